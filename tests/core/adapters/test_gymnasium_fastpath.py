"""The gymnasium adapter's step shortcuts give what the general code gives: the objects its
fast constructors (``_make``) build equal the public constructors', the per-reply memo
follows the mapper and the cleaners, the reward memo gives floats, and each step's info is
its own."""

import dataclasses
import math

import numpy as np
import pytest

from twinkle.core import Action
from twinkle.core.adapters.action_mapper import ActionMapper
from twinkle.core.adapters.gymnasium import GymHidden
from twinkle.core.environment import StepResult
from twinkle.core.registry import environment_registry
from twinkle.core.state import Observation, ObservationContent, State, StateMetadata

GAMES = [
    ("FrozenLake-v1", {"is_slippery": False}),
    ("Taxi-v4", {}),
    ("CliffWalking-v1", {}),
    ("Blackjack-v1", {}),
]


def rebuilt(obj):
    """``obj`` through its public constructor, field by field (nested dataclasses too)."""
    if not dataclasses.is_dataclass(obj):
        return obj
    names = [f.name for f in dataclasses.fields(obj)]
    # built by ``_make``, so the instance dict must hold exactly the fields, in order
    assert list(vars(obj)) == names
    return type(obj)(**{n: rebuilt(getattr(obj, n)) for n in names})


def replies(names):
    yield from (f"I move <action>{n}</action>" for n in names)
    yield from ("<action>jump</action>", "no tags, no action", "", f"  <action> {names[0]}. ")
    yield from (f"<think>hm</think><action>{names[-1]}</action>", "1", f"go {names[0]}")


@pytest.mark.parametrize(("name", "kwargs"), GAMES)
def test_step_objects_equal_the_public_constructors(name, kwargs):
    env = environment_registry.get(name, adapter="gymnasium", **kwargs)
    state, _ = env.reset(seed=3)
    for k in range(3):  # the second and third rounds read the replies from the memo
        for reply in replies(env.mapper.names):
            result = env.step(state, Action.from_text(reply))
            assert type(result) is StepResult and result == rebuilt(result)
            nxt = result.next_state
            assert repr(nxt) == repr(rebuilt(nxt))
            assert type(nxt.observation) is Observation and type(nxt) is State
            assert type(nxt.metadata) is StateMetadata
            assert type(nxt.observation.state) is ObservationContent
            assert type(nxt.hidden) is GymHidden
            assert nxt.hidden == GymHidden(*nxt.hidden)
            data = nxt.observation.state.data
            assert type(data["gym_reward"]) is float and data["episode_step"] == nxt.metadata.step
            assert nxt.metadata.info["total_reward"] == nxt.hidden.total_reward
            assert nxt.observation.messages[-2:] == (
                {"role": "assistant", "content": reply},
                {"role": "user", "content": nxt.observation.prompt},
            )
            if result.done:
                nxt, _ = env.reset(seed=k)
            state = nxt


def test_the_reply_memo_follows_the_mapper_and_its_rules():
    env = environment_registry.get("CliffWalking-v1", adapter="gymnasium")
    state, _ = env.reset(seed=0)

    def read(reply):
        nonlocal state
        result = env.step(state, Action.from_text(reply))
        state = result.next_state
        return result.extracted_action, result.resolved_action, result.info["action_index"]

    assert read("<action>2</action>") == read("<action>2</action>") == ("2", "down", 2)
    env.mapper.allow_index = False  # the memo's reading of "2" no longer holds
    assert read("<action>2</action>") == ("2", None, None)
    env.mapper.allow_index = True
    assert read("<action>2</action>") == ("2", "down", 2)

    env.mapper = ActionMapper(["left", "down", "right", "up"], {"up": ["north"]})
    assert read("<action>up</action>") == ("up", "up", 3)
    assert read("<action>north</action>") == ("north", "up", 3)

    class Mapper:  # any object with parse, format_action and names does
        names = ("up", "right", "down", "left")

        def parse(self, text):
            return {"up": 0, "u": 0}.get(text)

        def format_action(self, index):
            return self.names[index]

    env.mapper = Mapper()
    assert read("<action>u</action>") == read("<action>u</action>") == ("u", "up", 0)
    assert read("<action>down</action>") == ("down", None, None)

    env.mapper = ActionMapper(["up", "right", "down", "left"])
    env.set_cleaners(post=[])  # the fused read (and its memo) is off
    assert read("<action>up.</action>") == ("up.", "up", 0)
    env.set_cleaners()
    assert read("<action>up.</action>") == ("up", "up", 0)


class _Raw:
    """A stand-in unwrapped env: steps give the rewards and infos it is handed."""

    def __init__(self, raw, outcomes):
        self.raw, self.outcomes = raw, iter(outcomes)

    def step(self, index):
        reward, info = next(self.outcomes)
        return 36, reward, False, False, info

    def __getattr__(self, name):
        return getattr(self.raw, name)


def test_rewards_become_floats_through_the_reward_memo():
    env = environment_registry.get("CliffWalking-v1", adapter="gymnasium")
    state, _ = env.reset(seed=0)
    rewards = [-1, -1.0, np.float32(0.5), 0.5, True, np.array(2.0), -1, float("nan")]
    env._raw = _Raw(env._raw, [(r, {"prob": 1.0}) for r in rewards])
    total = 0.0
    for reward in rewards:
        result = env.step(state, Action.from_text("<action>up</action>"))
        state = result.next_state
        got = state.observation.state.data["gym_reward"]
        signal = result.rewards.by_name("gym_reward").reward
        assert type(got) is float and type(signal) is float
        if math.isnan(float(reward)):
            assert math.isnan(got) and math.isnan(signal)
        else:
            total += float(reward)
            assert got == signal == float(reward)
            assert state.hidden.total_reward == total
    # every distinct reward once; NaN is never kept (it would never be found again)
    assert all(type(v) is float and v == v for v, _ in env._bundles.values())


def test_each_step_holds_its_own_info():
    env = environment_registry.get("CliffWalking-v1", adapter="gymnasium")
    state, _ = env.reset(seed=0)
    infos = [{"prob": 1.0}, {"prob": np.float64(0.5)}, {}, {"prob": 1.0, "x": [1, 2]}]
    infos += [{"x": np.float64(0.5)}, {5: 1.0}, {"prob": None}]
    env._raw = _Raw(env._raw, [(-1, info) for info in infos])
    results = []
    for _ in infos:
        results.append(env.step(state, Action.from_text("<action>up</action>")))
        state = results[-1].next_state
    got = [r.info["gym_info"] for r in results]
    assert got[:4] == [{"prob": 1.0}, {"prob": 0.5}, {}, {"prob": 1.0, "x": [1, 2]}]
    assert got[4:] == [{"x": 0.5}, {"5": 1.0}, {"prob": None}]
    assert type(got[1]["prob"]) is float and type(got[4]["x"]) is float
    for result, info in zip(results, got, strict=True):
        assert result.next_state.observation.state.data["gym_info"] is info
    assert len({id(info) for info in got}) == len(got)


def test_real_steps_do_not_share_info_dicts():
    env = environment_registry.get("FrozenLake-v1", adapter="gymnasium", is_slippery=False)
    state, _ = env.reset(seed=0)
    first = env.step(state, Action.from_text("<action>right</action>"))
    first.info["gym_info"]["mine"] = 1
    second = env.step(first.next_state, Action.from_text("<action>right</action>"))
    assert second.info["gym_info"] == {"prob": 1.0}
    assert second.info["gym_info"] is not first.info["gym_info"]
