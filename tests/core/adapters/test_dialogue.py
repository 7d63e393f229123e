"""dialogue adapter against the project's local OpenAI-compatible server (simulated user, judge)."""

import pytest

from twinkle.core import Action
from twinkle.core.registry import environment_registry
from twinkle.testing.openai_server import OpenAIServer

pytestmark = pytest.mark.slow


def _user_and_judge(request):
    system = request["messages"][0]["content"]
    if system.startswith("You grade"):
        return {"content": "The assistant reached the goal.\nScore: 10/10"}
    users = sum(1 for m in request["messages"] if m["role"] == "user")
    if users >= 2:
        return {"content": "Great, thank you! [GOAL]"}
    return {"content": "When will the refund arrive?"}


def test_episode_reaches_the_goal_and_is_judged():
    with OpenAIServer(_user_and_judge) as server:
        env = environment_registry.get(
            "customer_support",
            adapter="dialogue",
            user_base_url=server.base_url,
            judge_base_url=server.base_url,
            max_turns=4,
        )
        state, _ = env.reset(options={"task_index": 0})
        first = env.step(state, Action.from_text("Sorry! I will refund the duplicate."))
        assert not first.done and first.next_state.observation.prompt.startswith("When")
        assert first.extracted_action is None and first.resolved_action is None
        last = env.step(first.next_state, Action.from_text("Within 3 business days."))
        assert last.terminated and last.rewards.by_name("goal_reached").reward == 1.0
        assert last.rewards.by_name("judge").reward == 1.0 and last.rewards.total == 1.0
        assert "[GOAL]" not in last.next_state.observation.prompt
        # the simulated user saw the conversation with the roles swapped
        user_request = server.requests[1]["messages"]
        assert user_request[1] == {"role": "assistant", "content": state.observation.prompt}


def test_turn_budget_truncates_and_a_bad_episode_scores_zero():
    with OpenAIServer(lambda request: {"content": "That does not help."}) as server:
        env = environment_registry.get(
            "tutoring", "dialogue", user_base_url=server.base_url, max_turns=2
        )
        state, _ = env.reset()
        first = env.step(state, Action.from_text("Just add the tops."))
        last = env.step(first.next_state, Action.from_text("And the bottoms."))
        assert last.truncated and not last.terminated
        assert last.rewards.total == 0.0
