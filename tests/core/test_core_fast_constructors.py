"""The internal fast constructors (``_make``) build objects indistinguishable from the public
constructors': equality, repr, hashing, ``replace``, ``fields``, pickling, immutability; and
the Gymnasium adapter's per-step objects, built with them, behave like public ones."""

import copy
import dataclasses
import pickle

import pytest

from twinkle.core import Action
from twinkle.core.environment import StepResult, _StateContinuityTracker
from twinkle.core.registry import environment_registry
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import (
    ImageContent,
    Observation,
    ObservationContent,
    State,
    StateMetadata,
)

CONTENT = (("board", (ImageContent("AA=="),), {"turn": 3}), ("", (), None))
OBSERVATION = (
    "prompt",
    ({"role": "user", "content": "prompt"},),
    (),
    (),
    (),
    ObservationContent("goal"),
    ObservationContent("board", data={"k": 1}),
)
METADATA = (3, "ep-1", True, {"extracted_answer": "left"})
STATE = (Observation("q"), ("hidden", 1), StateMetadata(1, "ep"))
BUNDLE = SignalBundle((Signal("gym_reward", RewardType.STEP, 1.0),))
RESULT = (State(*STATE), BUNDLE, True, False, "left", "left", {"action_index": 0})

CASES = [(ObservationContent, args) for args in CONTENT] + [
    (Observation, OBSERVATION),
    (StateMetadata, METADATA),
    (State, STATE),
    (StepResult, RESULT),
]


def _hash_or_error(obj):
    try:
        return hash(obj)
    except TypeError as exc:
        return str(exc)


@pytest.mark.parametrize("cls, args", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_make_equals_the_public_constructor(cls, args):
    fast, public = cls._make(*args), cls(*args)
    assert type(fast) is cls
    assert fast == public and repr(fast) == repr(public) and vars(fast) == vars(public)
    assert _hash_or_error(fast) == _hash_or_error(public)
    assert [f.name for f in dataclasses.fields(fast)] == list(vars(fast))
    assert pickle.loads(pickle.dumps(fast)) == public
    assert copy.deepcopy(fast) == public and copy.copy(fast) == public
    name = dataclasses.fields(cls)[0].name
    changed = dataclasses.replace(fast, **{name: args[0] if cls is State else None})
    assert type(changed) is cls and dataclasses.replace(fast) == public
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, name, None)


def test_make_takes_every_field_in_order():
    for cls, args in CASES:
        assert len(args) == len(dataclasses.fields(cls))
        fast = cls._make(*args)
        assert [getattr(fast, f.name) for f in dataclasses.fields(cls)] == list(args)


def test_state_methods_work_on_fast_states():
    state = State._make(
        Observation._make(*OBSERVATION), None, StateMetadata._make(0, "ep", False, {})
    )
    moved = state.with_metadata(step=1)
    assert moved.metadata == StateMetadata(1, "ep") and state.metadata.step == 0
    assert state.observation.strip_images() == Observation(*OBSERVATION).strip_images()


def test_tracker_accepts_its_latest_state_and_an_equal_copy_only_when_current():
    t = _StateContinuityTracker()
    s0 = State(Observation("q"), None, StateMetadata(0, "ep"))
    t.track(s0)
    assert t.latest is s0
    t.validate(s0, "env")
    t.validate(copy.copy(s0), "env")  # equal, not the same object: checked, and current
    s1 = s0.with_metadata(step=1)
    t.track(s1)
    with pytest.raises(NotImplementedError, match="stale state"):
        t.validate(s0, "env")


@pytest.mark.parametrize("name", ["FrozenLake-v1", "Taxi-v4", "CliffWalking-v1", "Blackjack-v1"])
def test_gymnasium_step_objects_behave_like_public_ones(name):
    env = environment_registry.get(name, adapter="gymnasium")
    state, _ = env.reset(seed=3)
    for k in range(6):
        reply = Action.from_text(f"<action>{env.mapper.names[k % env.mapper.n]}</action>")
        result = env.step(state, reply)
        nxt = result.next_state
        obs, meta = nxt.observation, nxt.metadata
        rebuilt = StepResult(
            State(
                Observation(
                    obs.prompt,
                    obs.messages,
                    task=obs.task,
                    state=ObservationContent(obs.state.text, data=obs.state.data),
                ),
                nxt.hidden,
                StateMetadata(meta.step, meta.episode_id, meta.is_terminal, meta.info),
            ),
            result.rewards,
            result.terminated,
            result.truncated,
            result.extracted_action,
            result.resolved_action,
            result.info,
        )
        assert result == rebuilt and repr(result) == repr(rebuilt)
        assert pickle.loads(pickle.dumps(result)) == result
        assert type(obs.messages) is tuple and len(obs.messages) == 2 * meta.step + 1
        assert obs.messages[-2] == {"role": "assistant", "content": reply.text}
        assert meta.step == state.metadata.step + 1 == obs.state.data["episode_step"]
        with pytest.raises(dataclasses.FrozenInstanceError):
            nxt.hidden = None
        if result.done:
            break
        with pytest.raises(NotImplementedError, match="stale state"):
            env.step(state, reply)  # the previous state is stale now
        state = nxt
