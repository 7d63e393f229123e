"""The gymnasium adapter's per-step shortcuts give what the general code gives: the fused
``<action>`` read, the cleaned-content cache, the lazily told continuity tracker, the fast
reset constructors and the inlined info copy."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinkle.core import Action
from twinkle.core.adapters.gymnasium import GymHidden
from twinkle.core.cleaning import SPECIAL_TOKENS
from twinkle.core.extraction import CleanedExtractor, TagBasedExtractor
from twinkle.core.registry import environment_registry
from twinkle.core.state import State, StateMetadata

REPLIES = st.lists(
    st.sampled_from(
        ["<action>", "</action>", "<ACTION>", "</Action>", "<answer>", "</answer>", "<think>"]
        + ["</think>", "<", "think>", " up ", "down", "Left", "2", "jump", "\n", " ", ".", ","]
        + ["move down", "\u0130", "I go ", *SPECIAL_TOKENS]
    ),
    max_size=9,
).map("".join)
PLAIN = st.lists(
    st.sampled_from([" ", ".", ",", "up", "Down", "2", "go", "\n", "\t", "!"]), max_size=5
)
#: The prompted shape, "...<action>NAME</action>...", which the fused read takes.
PROMPTED = st.tuples(PLAIN, PLAIN, PLAIN).map(
    lambda p: "".join(p[0]) + "<action>" + "".join(p[1]) + "</action>" + "".join(p[2])
)

CLIFF = environment_registry.get("CliffWalking-v1", adapter="gymnasium")


@settings(max_examples=600, deadline=None)
@given(REPLIES | PROMPTED)
def test_step_reads_what_the_configured_extractor_and_mapper_read(reply):
    env = CLIFF
    state, _ = env.reset(seed=0)
    for _ in range(2):  # the second read of the same content comes from the cache
        want = env.extractor.extract(reply)[0]
        index = env.mapper.parse(want)
        name = None if index is None else env.mapper.format_action(index)
        result = env.step(state, Action.from_text(reply))
        assert result.extracted_action == want and result.resolved_action == name
        assert result.next_state.metadata.info["extracted_answer"] == want
        state = result.next_state


def test_other_cleaners_or_another_extractor_turn_the_fused_read_off():
    reply = Action.from_text("<action> up. </action>")
    plain = environment_registry.get("CliffWalking-v1", "gymnasium", post_cleaners=[])
    state, _ = plain.reset(seed=0)
    result = plain.step(state, reply)
    assert result.extracted_action == "up." and result.resolved_action == "up"

    env = environment_registry.get("CliffWalking-v1", adapter="gymnasium")
    state, _ = env.reset(seed=0)
    assert env.step(state, reply).extracted_action == "up"
    env.extractor = CleanedExtractor(TagBasedExtractor("answer"))
    state, _ = env.reset(seed=0)
    result = env.step(state, Action.from_text("<action>up</action><answer>down</answer>"))
    assert result.extracted_action == "down" and result.resolved_action == "down"


def test_stale_and_foreign_states_are_still_refused():
    env = environment_registry.get("FrozenLake-v1", adapter="gymnasium", is_slippery=False)
    s0, _ = env.reset(seed=0)
    s1 = env.step(s0, Action.from_text("<action>right</action>")).next_state
    s2 = env.step(s1, Action.from_text("<action>right</action>")).next_state
    for stale in (s0, s1):
        with pytest.raises(NotImplementedError, match="stale state"):
            env.step(stale, Action.from_text("down"))
    # an equal copy of the latest state is the latest state, as before
    copy = dataclasses.replace(s2)
    assert copy is not s2
    s3 = env.step(copy, Action.from_text("<action>down</action>")).next_state
    assert s3.metadata.step == 3
    other, _ = env.reset(seed=0)
    with pytest.raises(NotImplementedError, match="different episode"):
        env.step(s3, Action.from_text("down"))
    assert env.step(other, Action.from_text("down")).next_state.metadata.step == 1


def test_reset_state_equals_the_public_constructors():
    env = environment_registry.get("Blackjack-v1", adapter="gymnasium")
    state, info = env.reset(seed=5)
    meta = state.metadata
    public = State(
        state.observation,
        GymHidden(list(state.hidden.obs), 0.0, 5),
        StateMetadata(0, meta.episode_id),
    )
    assert state == public and repr(state) == repr(public)
    assert type(state.hidden) is GymHidden and meta.info == {} and not meta.is_terminal
    assert info == {"seed": 5, "gym_info": {}}


def test_step_info_is_a_plain_copy():
    env = environment_registry.get("Taxi-v4", adapter="gymnasium")
    state, _ = env.reset(seed=3)
    result = env.step(state, Action.from_text("<action>down</action>"))
    info = result.next_state.observation.state.data["gym_info"]
    assert info is result.info["gym_info"]
    assert type(info["action_mask"]) is list and all(type(v) is int for v in info["action_mask"])
    assert type(info["prob"]) is float
    lake = environment_registry.get("FrozenLake-v1", adapter="gymnasium", is_slippery=False)
    state, _ = lake.reset(seed=0)
    result = lake.step(state, Action.from_text("<action>down</action>"))
    assert result.info["gym_info"] == {"prob": 1.0}
    assert type(result.next_state.observation.state.data["gym_reward"]) is float
