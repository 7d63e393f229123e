"""Trajectory, Transition and Checkpoint."""

import pytest

from twinkle.core import (
    Action,
    ImageContent,
    Observation,
    ObservationContent,
    SignalBundle,
    State,
    StateMetadata,
)
from twinkle.core.trajectory import Checkpoint, Trajectory, Transition


def _chain(n):
    s0 = State(
        Observation("q", task=ObservationContent("t", images=(ImageContent("aGk="),))),
        0,
        StateMetadata(0, "ep-1"),
    )
    traj = Trajectory.create(s0)
    state = s0
    for i in range(n):
        nxt = State(state.observation, i + 1, StateMetadata(i + 1, "ep-1", is_terminal=i + 1 == n))
        traj.add_transition(
            Transition(
                state,
                Action.from_text(str(i)),
                nxt,
                SignalBundle.single(0.5),
                extracted_action=str(i),
                resolved_action=f"r{i}",
            )
        )
        state = nxt
    return traj


def test_basic_properties():
    traj = _chain(3)
    assert traj.episode_id == "ep-1" and len(traj) == 3 and traj.total_reward == 1.5
    assert traj.current_state.hidden == 3 and traj.is_terminal
    assert isinstance(traj.transitions, tuple) and traj.parent_id is None
    empty = Trajectory.create(traj.initial_state)
    assert empty.current_state is empty.initial_state and empty.total_reward == 0.0


def test_state_at():
    traj = _chain(2)
    assert traj.state_at(0) is traj.initial_state
    assert traj.state_at(2).hidden == 2
    for bad in (-1, 3):
        with pytest.raises(IndexError):
            traj.state_at(bad)


def test_checkpoint_and_branch():
    traj = _chain(2)
    cp = traj.checkpoint("mid")
    assert cp == Checkpoint("mid", "ep-1", 2, traj.current_state)
    with pytest.raises(ValueError, match="already exists"):
        traj.checkpoint("mid")
    traj.add_transition(traj.transitions[-1])
    child = traj.branch("mid")
    assert len(child) == 2 and child.parent_id == "ep-1" and child.episode_id != "ep-1"
    assert child.checkpoints == {} and child.initial_state is traj.initial_state
    child.add_transition(traj.transitions[0])
    assert len(traj) == 3 and len(child) == 3  # independent lists
    with pytest.raises(KeyError, match="Checkpoint 'nope' not found"):
        traj.branch("nope")
    copy = traj.checkpoints
    copy.clear()
    assert "mid" in traj.checkpoints


def test_strip_images_keeps_the_rest():
    traj = _chain(2)
    stripped = traj.strip_images()
    assert stripped.episode_id == traj.episode_id and len(stripped) == 2
    assert not stripped.initial_state.observation.get_images()
    assert traj.initial_state.observation.get_images()
    assert [t.resolved_action for t in stripped.transitions] == ["r0", "r1"]
