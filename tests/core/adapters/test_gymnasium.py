"""gymnasium adapter over real Gymnasium: ActionMapper, multi-step episodes, state data."""

import pytest

from twinkle.core import Action
from twinkle.core.adapters import ActionMapper
from twinkle.core.registry import environment_registry


def test_action_mapper_resolves_words_aliases_and_indices():
    m = ActionMapper(["left", "down", "right", "up"], aliases={"down": ["south", "move down"]})
    assert [m.parse(t) for t in ("left", "Move down", "south", "3", "go right!")] == [0, 1, 1, 3, 2]
    assert m.parse("jump") is None and m.parse("7") is None and m.parse(None) is None
    assert m.parse("not left, I go up") == 3  # the last named action wins
    assert m.format_action(2) == "right"


def test_frozen_lake_episode_through_the_action_mapper_reaches_the_goal():
    env = environment_registry.get("FrozenLake-v1", adapter="gymnasium", is_slippery=False)
    state, _ = env.reset(seed=0)
    assert "P" in state.observation.prompt and "\x1b" not in state.observation.prompt
    assert state.observation.state.data == {
        "gym_info": {"prob": 1.0},
        "gym_reward": 0.0,
        "episode_step": 0,
    }
    # S at (0,0), G at (3,3): down, down, right, right, down, right avoids every hole
    replies = ["move down", "<action>down</action>", "right", "2", "south", "Go right."]
    expected = ["down", "down", "right", "right", "down", "right"]
    for i, (reply, native) in enumerate(zip(replies, expected), 1):
        result = env.step(state, Action.from_text(reply))
        state = result.next_state
        assert result.resolved_action == native
        assert state.observation.state.data["episode_step"] == i
    assert result.terminated and result.rewards.total == 1.0
    assert state.observation.state.data["gym_reward"] == 1.0
    assert state.metadata.is_terminal


def test_invalid_action_keeps_the_board_and_reports_no_resolved_action():
    env = environment_registry.get("CliffWalking-v1", "gymnasium", invalid_action_penalty=0.1)
    state, _ = env.reset(seed=0)
    bad = env.step(state, Action.from_text("fly away"))
    assert bad.extracted_action == "fly away" and bad.resolved_action is None
    assert bad.rewards.by_name("invalid_action").reward == -0.1
    assert bad.next_state.observation.state.text == state.observation.state.text
    good = env.step(bad.next_state, Action.from_text("<action>up</action>"))
    assert good.extracted_action == "up" and good.resolved_action == "up"
    assert good.rewards.by_name("gym_reward").reward == -1.0
    with pytest.raises(NotImplementedError):
        env.step(state, Action.from_text("up"))  # a stale state: not the latest


@pytest.mark.parametrize("name, reply", [("Taxi-v4", "pickup"), ("Blackjack-v1", "stick")])
def test_other_games_render_text_and_step(name, reply):
    env = environment_registry.get(name, adapter="gymnasium")
    state, _ = env.reset(seed=3)
    assert state.observation.prompt and "\x1b" not in state.observation.prompt
    result = env.step(state, Action.from_text(reply))
    assert result.resolved_action == reply
    assert set(result.next_state.observation.state.data) == {
        "gym_info",
        "gym_reward",
        "episode_step",
    }


def test_truncation_at_the_step_budget():
    env = environment_registry.get("FrozenLake-v1", "gymnasium", is_slippery=False, max_steps=2)
    state, _ = env.reset(seed=0)
    first = env.step(state, Action.from_text("left"))
    second = env.step(first.next_state, Action.from_text("left"))
    assert not first.done and second.truncated and not second.terminated
