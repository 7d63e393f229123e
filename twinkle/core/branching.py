"""Branching: independent copies of an environment taken from an intermediate state.

Three strategies, tried in this order when none is named:

* ``direct`` (:class:`DirectStrategy`): the environment is a pure function of its state
  (``spec.pure_step``), so a branch is the same environment and the saved state.
* ``process_fork`` (:class:`ProcessForkStrategy`): any environment on a Unix system. The
  checkpoint is a copy-on-write snapshot of the whole process taken with ``os.fork``; each
  branch forks that snapshot again and is driven through a :class:`ForkedEnvironment` proxy
  over a Unix socket (``multiprocessing.connection`` framing, pickled calls).
* ``action_replay`` (:class:`ActionReplayStrategy`): rebuild the environment with a factory,
  reset it with the same seed and task, and replay the actions (cost O(steps)).

:class:`BranchManager` names checkpoints and releases every checkpoint's resources (forked
processes, replayed environments) on ``release``, ``close`` or leaving its ``with`` block;
an ``atexit`` hook releases whatever a program forgot. Stdlib only (``os.fork``,
``socket``, ``multiprocessing.connection``), so it runs on any Linux or macOS host.

This module picks the strategy and manages checkpoints; the handles, the protocol and the
in-process strategies live in :mod:`twinkle.core.branching_strategies`, the process-fork
machinery in :mod:`twinkle.core.branching_fork`. All are importable from here.

Example:
    >>> from twinkle.core.environment import EnvironmentSpec
    >>> class Pure:
    ...     spec = EnvironmentSpec("pure", pure_step=True)
    >>> with BranchManager.create(Pure()) as mgr:
    ...     _ = mgr.checkpoint("start", "state-0")
    ...     env, state = mgr.branch("start")
    >>> mgr.strategy.name, state
    ('direct', 'state-0')
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from twinkle.core.branching_fork import ForkedEnvironment, ProcessForkStrategy
from twinkle.core.branching_strategies import (
    ActionReplayStrategy,
    BranchHandle,
    BranchingStrategy,
    CheckpointHandle,
    DirectStrategy,
    env_spec,
    replayable,
)
from twinkle.core.state import Action

__all__ = [
    "ActionReplayStrategy",
    "BranchHandle",
    "BranchManager",
    "BranchingStrategy",
    "CheckpointHandle",
    "DirectStrategy",
    "ForkedEnvironment",
    "ProcessForkStrategy",
    "resolve_strategy",
]

#: Strategy names in the order ``resolve_strategy`` tries them.
STRATEGIES = ("direct", "process_fork", "action_replay")


def resolve_strategy(
    env: Any, *, preference: str | None = None, env_factory: Callable[[], Any] | None = None
) -> BranchingStrategy:
    """Pick a strategy: the named one, else direct > process_fork > action_replay.

    Raises:
        ValueError: an unknown name, or action_replay without ``env_factory``.
        NotImplementedError: process_fork where ``os.fork`` is missing, or no strategy fits.
    """
    if preference is not None:
        if preference not in STRATEGIES:
            raise ValueError(f"Unknown branching strategy {preference!r}; choose from {STRATEGIES}")
        if preference == "direct":
            return DirectStrategy()  # honoured even for impure envs: the caller knows best
        if preference == "action_replay":
            if env_factory is None:
                raise ValueError("the action_replay strategy needs env_factory=")
            return ActionReplayStrategy(env_factory)
        strategy = ProcessForkStrategy()
        if not strategy.can_branch(env):
            raise NotImplementedError("process_fork needs os.fork (Linux or macOS)")
        return strategy
    if DirectStrategy().can_branch(env):
        return DirectStrategy()
    fork = ProcessForkStrategy()
    if fork.can_branch(env):
        return fork
    if replayable(env):
        if env_factory is None:
            raise ValueError(
                "this environment can only be branched by action_replay; pass env_factory="
            )
        return ActionReplayStrategy(env_factory)
    flags = {
        name: getattr(env_spec(env), name, None)
        for name in ("pure_step", "supports_seed", "supports_task_index")
    }
    raise NotImplementedError(
        f"no branching strategy fits: {flags}, os.fork available={hasattr(os, 'fork')}"
    )


class BranchManager:
    """Named checkpoints of one environment and branches made from them.

    Args:
        strategy: a :class:`BranchingStrategy`.
        env: the environment being checkpointed.

    Example:
        >>> from twinkle.core.environment import EnvironmentSpec
        >>> class Pure:
        ...     spec = EnvironmentSpec("pure", pure_step=True)
        >>> mgr = BranchManager.create(Pure(), strategy="direct")
        >>> _ = mgr.checkpoint("a", "s0"); mgr.names
        ('a',)
        >>> mgr.close(); mgr.names
        ()
    """

    def __init__(self, strategy: BranchingStrategy, env: Any) -> None:
        self.strategy = strategy
        self.env = env
        self._handles: dict[str, CheckpointHandle] = {}

    @classmethod
    def create(
        cls,
        env: Any,
        strategy: str | None = None,
        env_factory: Callable[[], Any] | None = None,
    ) -> BranchManager:
        return cls(resolve_strategy(env, preference=strategy, env_factory=env_factory), env)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._handles)

    def checkpoint(
        self,
        name: str,
        state: Any,
        actions: Sequence[Action] = (),
        reset_options: dict[str, Any] | None = None,
    ) -> CheckpointHandle:
        """Save ``state`` under ``name`` (re-using a name releases the old checkpoint).

        ``actions`` and ``reset_options`` (``seed``, ``task_index``) are what action replay
        needs to rebuild the state; the other strategies ignore them.
        """
        old = self._handles.pop(name, None)
        if old is not None:
            self.strategy.release_checkpoint(old)
        handle = self.strategy.create_checkpoint(
            self.env, state, tuple(actions), dict(reset_options or {})
        )
        self._handles[name] = handle
        return handle

    def _handle(self, name: str) -> CheckpointHandle:
        if name not in self._handles:
            raise KeyError(f"Checkpoint '{name}' not found; available: {list(self._handles)}")
        return self._handles[name]

    def branch(self, name: str) -> tuple[Any, Any]:
        """A fresh ``(environment, state)`` pair from checkpoint ``name``."""
        handle = self.strategy.create_branch(self._handle(name))
        return handle.environment, handle.state

    def release(self, name: str) -> None:
        """Free one checkpoint's resources (its branches stop working for process_fork)."""
        handle = self._handle(name)
        del self._handles[name]
        self.strategy.release_checkpoint(handle)

    def close(self) -> None:
        """Release every checkpoint."""
        for name in list(self._handles):
            self.release(name)
        close = getattr(self.strategy, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> BranchManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
