"""Episode records: transitions, named checkpoints and branchable trajectories.

A :class:`Trajectory` is an append-only list of :class:`Transition` s from an initial
state. Because states are immutable, branching a trajectory at a checkpoint is a shallow
copy of its first transitions; the environment side of branching lives in
``twinkle.core.branching``. Stdlib only.

Example:
    >>> from twinkle.core.signals import SignalBundle
    >>> from twinkle.core.state import Action, Observation, State, StateMetadata
    >>> s0 = State(Observation("q"), None, StateMetadata(0, "ep-1"))
    >>> traj = Trajectory.create(s0)
    >>> cp = traj.checkpoint("start")
    >>> traj.add_transition(Transition(s0, Action.from_text("a"), s0.with_metadata(step=1),
    ...                                SignalBundle.single(0.5)))
    >>> traj.total_reward, len(traj), len(traj.branch("start"))
    (0.5, 1, 0)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from twinkle.core.signals import SignalBundle
from twinkle.core.state import Action, State

__all__ = ["Checkpoint", "Trajectory", "Transition"]

HiddenT = TypeVar("HiddenT")


@dataclass(frozen=True)
class Transition(Generic[HiddenT]):
    """One step: ``state --action--> next_state`` with its rewards and extraction results.

    Example:
        >>> from twinkle.core.state import Observation, State, StateMetadata
        >>> s0 = State(Observation("q"), None, StateMetadata(0, "ep"))
        >>> t = Transition(s0, Action.from_text("4"), s0.with_metadata(step=1))
        >>> t.next_state.metadata.step, t.rewards.total
        (1, 0.0)
    """

    state: State[HiddenT]
    action: Action
    next_state: State[HiddenT]
    rewards: SignalBundle = field(default_factory=SignalBundle)
    extracted_action: str | None = None
    resolved_action: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint(Generic[HiddenT]):
    """A named position in a trajectory: after ``step_index`` transitions, at ``state``.

    Example:
        >>> from twinkle.core.state import Observation, State, StateMetadata
        >>> s0 = State(Observation("q"), None, StateMetadata(0, "ep"))
        >>> Checkpoint("start", trajectory_id="ep", step_index=0, state=s0).step_index
        0
    """

    name: str
    trajectory_id: str
    step_index: int
    state: State[HiddenT]


@dataclass(eq=False)
class Trajectory(Generic[HiddenT]):
    """A mutable episode record that can be checkpointed and branched.

    A dataclass, as the seed declares it (``dataclasses.replace``, ``asdict`` and ``fields``
    work); equality stays identity, as for any mutable record. The transitions and
    checkpoints are keyword-only fields, copied on construction, so a ``replace`` copy never
    shares its lists with the original.

    Args:
        episode_id: id of this trajectory (a branch gets a fresh one).
        initial_state: the state ``reset`` returned.
        parent_id: the episode id this trajectory was branched from, if any.

    Example:
        >>> import dataclasses
        >>> from twinkle.core.state import Observation, State, StateMetadata
        >>> t = Trajectory.create(State(Observation("q"), None, StateMetadata(0, "ep")))
        >>> t.state_at(0) is t.initial_state, t.is_terminal
        (True, False)
        >>> dataclasses.replace(t, episode_id="ep-2").episode_id
        'ep-2'
    """

    episode_id: str
    initial_state: State[HiddenT]
    parent_id: str | None = None
    _transitions: list[Transition[HiddenT]] = field(default_factory=list, kw_only=True)
    _checkpoints: dict[str, Checkpoint[HiddenT]] = field(default_factory=dict, kw_only=True)

    def __post_init__(self) -> None:
        self._transitions = list(self._transitions)
        self._checkpoints = dict(self._checkpoints)

    @classmethod
    def create(cls, initial_state: State[HiddenT]) -> Trajectory[HiddenT]:
        return cls(initial_state.metadata.episode_id, initial_state)

    def add_transition(self, transition: Transition[HiddenT]) -> None:
        self._transitions.append(transition)

    def checkpoint(self, name: str) -> Checkpoint[HiddenT]:
        """Record the current position under ``name``; a duplicate name raises ValueError."""
        if name in self._checkpoints:
            raise ValueError(f"Checkpoint '{name}' already exists")
        cp = Checkpoint(name, self.episode_id, len(self._transitions), self.current_state)
        self._checkpoints[name] = cp
        return cp

    def branch(self, checkpoint_name: str) -> Trajectory[HiddenT]:
        """A new, independent trajectory holding the transitions up to the checkpoint."""
        cp = self._checkpoints.get(checkpoint_name)
        if cp is None:
            raise KeyError(
                f"Checkpoint '{checkpoint_name}' not found; available: {sorted(self._checkpoints)}"
            )
        child = Trajectory(uuid.uuid4().hex, self.initial_state, parent_id=self.episode_id)
        child._transitions = self._transitions[: cp.step_index]
        return child

    def state_at(self, index: int) -> State[HiddenT]:
        """The state after ``index`` transitions (0 is the initial state)."""
        if index < 0 or index > len(self._transitions):
            raise IndexError(f"state index {index} out of range [0, {len(self._transitions)}]")
        return self.initial_state if index == 0 else self._transitions[index - 1].next_state

    def strip_images(self) -> Trajectory[HiddenT]:
        """A copy (same episode id) with every image removed from every observation."""

        def strip(s: State[HiddenT]) -> State[HiddenT]:
            return replace(s, observation=s.observation.strip_images())

        out = Trajectory(self.episode_id, strip(self.initial_state), self.parent_id)
        out._transitions = [
            replace(t, state=strip(t.state), next_state=strip(t.next_state))
            for t in self._transitions
        ]
        return out

    @property
    def current_state(self) -> State[HiddenT]:
        return self._transitions[-1].next_state if self._transitions else self.initial_state

    @property
    def transitions(self) -> tuple[Transition[HiddenT], ...]:
        return tuple(self._transitions)

    @property
    def checkpoints(self) -> dict[str, Checkpoint[HiddenT]]:
        return dict(self._checkpoints)

    @property
    def total_reward(self) -> float:
        return float(sum(t.rewards.total for t in self._transitions))

    @property
    def is_terminal(self) -> bool:
        return self.current_state.metadata.is_terminal

    def __len__(self) -> int:
        return len(self._transitions)

    def __repr__(self) -> str:
        return f"Trajectory(episode_id={self.episode_id!r}, transitions={len(self)})"
