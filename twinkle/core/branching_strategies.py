"""Branching building blocks: handles, the strategy protocol, and the in-process strategies.

:class:`DirectStrategy` serves environments that are a pure function of their state;
:class:`ActionReplayStrategy` rebuilds an environment and replays the actions that led to
the checkpoint. The process-fork strategy lives in :mod:`twinkle.core.branching_fork`, and
:mod:`twinkle.core.branching` picks a strategy and manages named checkpoints.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from twinkle.core.state import Action

__all__ = [
    "ActionReplayStrategy",
    "BranchHandle",
    "BranchingStrategy",
    "CheckpointHandle",
    "DirectStrategy",
    "env_spec",
    "replayable",
]


@dataclass(frozen=True)
class CheckpointHandle:
    """A strategy's receipt for a saved checkpoint.

    Example:
        >>> CheckpointHandle(checkpoint_id="c1", state="state-0").state
        'state-0'
    """

    checkpoint_id: str
    state: Any


@dataclass(frozen=True)
class BranchHandle:
    """A branch: an environment to step and the state to step it from.

    Example:
        >>> BranchHandle(environment="env", state="state-0").resource_id
        ''
    """

    environment: Any
    state: Any
    resource_id: str = ""


@runtime_checkable
class BranchingStrategy(Protocol):
    """How checkpoints are saved and branches are made.

    Example:
        >>> isinstance(DirectStrategy(), BranchingStrategy), isinstance(object(), BranchingStrategy)
        (True, False)
    """

    @property
    def name(self) -> str: ...

    def can_branch(self, env: Any) -> bool: ...

    def create_checkpoint(
        self, env: Any, state: Any, actions: Sequence[Action], reset_options: dict[str, Any]
    ) -> CheckpointHandle: ...

    def create_branch(self, handle: CheckpointHandle) -> BranchHandle: ...

    def release_checkpoint(self, handle: CheckpointHandle) -> None: ...


def env_spec(env: Any) -> Any:
    """The environment's ``spec`` (an ``EnvironmentSpec``), or None when it has none."""
    return getattr(env, "spec", None)


def replayable(env: Any) -> bool:
    """Whether a reset with the same seed and task rebuilds the environment's episode."""
    spec = env_spec(env)
    return bool(
        getattr(spec, "supports_seed", False) and getattr(spec, "supports_task_index", False)
    )


class DirectStrategy:
    """Branches of a pure environment are the environment itself and the saved state.

    Example:
        >>> s = DirectStrategy()
        >>> h = s.create_checkpoint("env", "state", (), {})
        >>> s.create_branch(h).state
        'state'
    """

    name = "direct"

    def __init__(self) -> None:
        self._saved: dict[str, tuple[Any, Any]] = {}

    def can_branch(self, env: Any) -> bool:
        return bool(getattr(env_spec(env), "pure_step", False))

    def create_checkpoint(
        self,
        env: Any,
        state: Any,
        actions: Sequence[Action] = (),
        reset_options: dict[str, Any] | None = None,
    ) -> CheckpointHandle:
        handle = CheckpointHandle(uuid.uuid4().hex, state)
        self._saved[handle.checkpoint_id] = (env, state)
        return handle

    def create_branch(self, handle: CheckpointHandle) -> BranchHandle:
        env, state = self._saved[handle.checkpoint_id]
        return BranchHandle(env, state)

    def release_checkpoint(self, handle: CheckpointHandle) -> None:
        self._saved.pop(handle.checkpoint_id, None)


# -- action replay -----------------------------------------------------------------------------
class ActionReplayStrategy:
    """Rebuild the environment, reset it identically and replay the saved actions.

    Args:
        env_factory: builds a fresh environment of the same kind.

    Example:
        >>> ActionReplayStrategy(env_factory=dict).name
        'action_replay'
    """

    name = "action_replay"

    def __init__(self, env_factory: Callable[[], Any]) -> None:
        if not callable(env_factory):
            raise ValueError(f"action_replay needs a callable env_factory, got {env_factory!r}")
        self.env_factory = env_factory
        self._saved: dict[str, tuple[tuple[Action, ...], dict[str, Any]]] = {}
        self._envs: dict[str, list[Any]] = {}

    def can_branch(self, env: Any) -> bool:
        return replayable(env)

    def create_checkpoint(
        self,
        env: Any,
        state: Any,
        actions: Sequence[Action] = (),
        reset_options: dict[str, Any] | None = None,
    ) -> CheckpointHandle:
        handle = CheckpointHandle(uuid.uuid4().hex, state)
        self._saved[handle.checkpoint_id] = (tuple(actions), dict(reset_options or {}))
        self._envs[handle.checkpoint_id] = []
        return handle

    def create_branch(self, handle: CheckpointHandle) -> BranchHandle:
        actions, options = self._saved[handle.checkpoint_id]
        env = self.env_factory()
        kwargs: dict[str, Any] = {}
        if options.get("seed") is not None:
            kwargs["seed"] = options["seed"]
        if options.get("task_index") is not None:
            kwargs["options"] = {"task_index": options["task_index"]}
        state, _ = env.reset(**kwargs)
        for action in actions:
            state = env.step(state, action).next_state
        self._envs[handle.checkpoint_id].append(env)
        return BranchHandle(env, state, resource_id=f"replay-{id(env):x}")

    def release_checkpoint(self, handle: CheckpointHandle) -> None:
        self._saved.pop(handle.checkpoint_id, None)
        for env in self._envs.pop(handle.checkpoint_id, []):
            close = getattr(env, "close", None)
            if callable(close):
                close()
