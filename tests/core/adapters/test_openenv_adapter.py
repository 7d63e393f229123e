"""openenv adapter: the project's OpenEnv packages through the registry (embedded mode)."""

from twinkle.core import Action
from twinkle.core.registry import environment_registry
from twinkle.core.tools import ToolCall


def test_number_guess_is_listed_and_played_with_tool_calls():
    assert ("openenv", "number_guess") in environment_registry
    env = environment_registry.get(
        "number_guess", adapter="openenv", env_kwargs={"high": 10}, reset_kwargs={"target": 7}
    )
    assert [t.name for t in env.available_tools] == ["guess"]
    state, _ = env.reset()
    assert "between 1 and 10" in state.observation.prompt
    text = env.step(state, Action.from_text("I guess seven"))
    assert text.rewards.total == 0.0 and not text.done
    assert "guess" in text.rewards.by_name("env_reward").feedback
    low = env.step(text.next_state, Action.from_tool_call(ToolCall("c1", "guess", {"guess": 3})))
    assert low.rewards.total == 0.0 and not low.done
    assert low.next_state.observation.tool_results[0].output.startswith("Higher")
    win = env.step(low.next_state, Action.from_tool_call(ToolCall("c2", "guess", {"guess": 7})))
    assert win.rewards.total == 1.0 and win.terminated
    assert win.extracted_action is None and win.resolved_action is None
    roles = [m["role"] for m in win.next_state.observation.messages]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant", "tool"]


def test_wrong_guess_scores_zero_and_bad_arguments_are_errors():
    env = environment_registry.get(
        "number_guess", "openenv", env_kwargs={"high": 10}, reset_kwargs={"target": 2}
    )
    state, _ = env.reset()
    bad = env.step(state, Action.from_tool_call(ToolCall("c1", "guess", {"guess": "x"})))
    assert bad.next_state.observation.tool_results[0].status.value == "ERROR"
    wrong = env.step(bad.next_state, Action.from_tool_call(ToolCall("c2", "guess", {"guess": 9})))
    assert wrong.rewards.total == 0.0
