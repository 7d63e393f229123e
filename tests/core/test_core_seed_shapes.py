"""The core types take the seed's shapes: a protocol a class written from the seed satisfies,
real dataclasses, and signatures positional where the seed writes them positionally."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from envs_for_core_tests import CounterEnv, PureEnv

from twinkle.core import (
    Action,
    Environment,
    EnvironmentSpec,
    Observation,
    ObservationContent,
    PromptSource,
    RewardType,
    Signal,
    SignalBundle,
    State,
    StateMetadata,
    StepResult,
)
from twinkle.core.branching import BranchManager
from twinkle.core.environments import MathEnvironment
from twinkle.core.trajectory import Checkpoint, Trajectory, Transition


class SeedEnv:
    """An environment written from the seed's ``Environment`` members only (no ``prompts``)."""

    spec = EnvironmentSpec("seed", "test", None, False)
    reward_functions: tuple[Any, ...] = ()
    available_tools: tuple[Any, ...] = ()

    def reset(self, *, seed=None, options=None):
        return State(Observation("1 + 1?"), None, StateMetadata(0, "ep")), {}

    def step(self, state, action):
        return StepResult(state.with_metadata(step=1, is_terminal=True), terminated=True)

    def compute_rewards(self, state, action, next_state):
        return SignalBundle.single(1.0)


def test_a_class_written_from_the_seed_is_an_environment():
    assert isinstance(SeedEnv(), Environment)
    assert not isinstance(SeedEnv(), PromptSource)  # prompts is optional, and apart
    math = MathEnvironment(tasks=[{"question": "1 + 1?", "answer": "2"}])
    assert isinstance(math, Environment) and isinstance(math, PromptSource)


def test_a_forked_branch_of_an_env_without_prompts_reads_as_none():
    env = SeedEnv()
    state, _ = env.reset()
    with BranchManager.create(env, "process_fork") as mgr:
        mgr.checkpoint("start", state)
        branch, branch_state = mgr.branch("start")
        assert branch.prompts == {} and branch_state.metadata.episode_id == "ep"


def test_branch_manager_create_takes_strategy_positionally():
    env = PureEnv()
    state, _ = env.reset()
    with BranchManager.create(env, "direct") as mgr:
        assert mgr.strategy.name == "direct"
        mgr.checkpoint("a", state)
        _, branched = mgr.branch("a")
        assert branched == state
    replay = BranchManager.create(CounterEnv(), "action_replay", CounterEnv)
    assert replay.strategy.name == "action_replay"


def test_environment_spec_positional_order_is_the_seeds():
    spec = EnvironmentSpec("e", "adapter", 5, True, False)
    assert (spec.max_steps, spec.is_multi_turn, spec.supports_task_index) == (5, True, False)


FROZEN = [
    State,
    StateMetadata,
    ObservationContent,
    Observation,
    Action,
    StepResult,
    EnvironmentSpec,
    Signal,
    SignalBundle,
    Transition,
    Checkpoint,
]


@pytest.mark.parametrize("cls", FROZEN, ids=lambda c: c.__name__)
def test_seed_frozen_types_are_frozen_dataclasses(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen


def test_trajectory_is_a_dataclass_with_its_behaviour_kept():
    s0 = State(Observation("q"), None, StateMetadata(0, "ep"))
    traj = Trajectory.create(s0)
    traj.add_transition(
        Transition(s0, Action.from_text("a"), s0.with_metadata(step=1), SignalBundle.single(0.5))
    )
    traj.checkpoint("one")
    assert [f.name for f in dataclasses.fields(Trajectory)][:2] == ["episode_id", "initial_state"]
    copy = dataclasses.replace(traj, episode_id="ep-2")
    copy.add_transition(traj.transitions[0])  # the copy's list is its own
    assert (len(traj), len(copy), copy.episode_id) == (1, 2, "ep-2")
    assert list(copy.checkpoints) == ["one"]
    assert dataclasses.asdict(traj)["episode_id"] == "ep"
    restored = pickle.loads(pickle.dumps(traj))
    assert restored.total_reward == 0.5 and len(restored.branch("one")) == 1
    assert traj != copy and traj == traj and len({traj, copy}) == 2  # identity, hashable
    assert repr(traj) == "Trajectory(episode_id='ep', transitions=1)"
    signal = dataclasses.replace(Signal("r", RewardType.OUTCOME, 1.0), reward=0.0)
    assert signal.reward == 0.0
