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

import atexit
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol, runtime_checkable

from twinkle.core.state import Action, State

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

STRATEGIES = ("direct", "process_fork", "action_replay")


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


def _spec(env: Any) -> Any:
    return getattr(env, "spec", None)


def _replayable(env: Any) -> bool:
    spec = _spec(env)
    return bool(
        getattr(spec, "supports_seed", False) and getattr(spec, "supports_task_index", False)
    )


# -- direct ------------------------------------------------------------------------------------
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
        return bool(getattr(_spec(env), "pure_step", False))

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
        return _replayable(env)

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


# -- process fork ------------------------------------------------------------------------------
def _connect(path: str) -> Connection:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return Connection(sock.detach())


def _spawn_server(env: Any, sock_dir: str, inherited: Connection | None = None) -> tuple[str, int]:
    """Fork a child that serves ``env`` on a new Unix socket; returns ``(path, pid)``.

    The listening socket exists before the fork, so the caller may connect at once.
    """
    path = os.path.join(sock_dir, f"{uuid.uuid4().hex[:16]}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    pid = os.fork()
    if pid == 0:  # child: never returns
        try:
            # Links held by the parent are not ours: holding them open would hide the EOF
            # that tells a server its client has gone.
            if inherited is not None:
                inherited.close()
            for proxy in list(_LIVE_PROXIES):
                proxy._drop_link()
            sock, _ = listener.accept()
            listener.close()
            os.unlink(path)
            _serve(env, Connection(sock.detach()), sock_dir)
        finally:
            os._exit(0)
    listener.close()
    return path, pid


def _serve(env: Any, conn: Connection, sock_dir: str) -> None:
    """The request loop of a forked environment server (runs in the child)."""
    # Branch servers forked from here are reaped automatically; signals act by default.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    while True:
        try:
            op, arg = conn.recv()
        except (EOFError, OSError):
            return
        if op == "close":
            conn.send(("ok", None))
            return
        try:
            if op == "fork":
                result: Any = _spawn_server(env, sock_dir, inherited=conn)
            elif op == "getattr":
                result = getattr(env, arg)
            elif op == "call":
                name, args, kwargs = arg
                result = getattr(env, name)(*args, **kwargs)
            else:
                raise ValueError(f"unknown operation {op!r}")
            reply = ("ok", result)
        except BaseException as exc:  # every failure goes back to the caller
            reply = ("err", exc)
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result or exception
            conn.send(("err", RuntimeError(f"{reply[0]} value could not be sent: {exc!r}")))


class ForkedEnvironment:
    """Proxy to an environment living in a forked process (a process-fork branch).

    It implements the ``Environment`` protocol by forwarding each call; states, actions and
    results travel pickled. ``reward_functions`` is ``()`` because rewards are computed by
    the remote environment.

    Example:
        >>> ForkedEnvironment.__name__
        'ForkedEnvironment'
    """

    def __init__(self, path: str, pid: int, *, sock_dir: str, owned: bool) -> None:
        self.pid = pid
        self.sock_dir = sock_dir
        self._owned = owned  # a direct child of this process (we must reap it)
        self._conn: Connection | None = _connect(path)
        self._lock = threading.Lock()
        self._cache: dict[str, Any] = {}
        _LIVE_PROXIES.add(self)

    def _drop_link(self) -> None:
        """Close this process's copy of the link without telling the server (after a fork)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _request(self, op: str, arg: Any = None) -> Any:
        with self._lock:
            if self._conn is None:
                raise RuntimeError(f"forked environment (pid {self.pid}) is closed")
            try:
                self._conn.send((op, arg))
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                raise RuntimeError(f"forked environment (pid {self.pid}) is gone") from exc
        if status == "err":
            raise value
        return value

    def _attr(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._request("getattr", name)
        return self._cache[name]

    @property
    def spec(self) -> Any:
        return self._attr("spec")

    @property
    def available_tools(self) -> tuple[Any, ...]:
        return self._attr("available_tools")

    @property
    def prompts(self) -> dict[str, str]:
        return self._attr("prompts")

    @property
    def reward_functions(self) -> tuple[Any, ...]:
        return ()

    def __len__(self) -> int:
        return self._request("call", ("__len__", (), {}))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._request("call", ("reset", (), {"seed": seed, "options": options}))

    def step(self, state: State[Any], action: Action) -> Any:
        return self._request("call", ("step", (state, action), {}))

    def compute_rewards(self, state: State[Any], action: Action, next_state: State[Any]) -> Any:
        return self._request("call", ("compute_rewards", (state, action, next_state), {}))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call any other method of the remote environment."""
        return self._request("call", (method, args, kwargs))

    def fork(self) -> tuple[str, int]:
        """Fork the remote process; returns the new server's ``(socket path, pid)``."""
        return self._request("fork")

    @property
    def closed(self) -> bool:
        return self._conn is None

    def close(self) -> None:
        """Stop the remote process (idempotent)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.send(("close", None))
            if conn.poll(2.0):
                conn.recv()
        except (EOFError, OSError):
            pass
        finally:
            conn.close()
        self._stop_process()

    def _stop_process(self) -> None:
        """Wait (at most 5 s) for the server to exit after "close", then kill it."""
        if self._exited(timeout=5.0):
            return
        _kill(self.pid, signal.SIGKILL)
        self._exited(timeout=5.0)

    def _exited(self, timeout: float) -> bool:
        # Our own child must be reaped; a nested server is reaped by its parent server
        # (SIGCHLD ignored there), so it is gone once signal 0 no longer finds it.
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._owned:
                    if os.waitpid(self.pid, os.WNOHANG)[0]:
                        return True
                else:
                    os.kill(self.pid, 0)
            except (ChildProcessError, ProcessLookupError):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def __repr__(self) -> str:
        return f"ForkedEnvironment(pid={self.pid}, closed={self.closed})"


_LIVE_PROXIES: weakref.WeakSet[ForkedEnvironment] = weakref.WeakSet()


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_LIVE_FORK_STRATEGIES: weakref.WeakSet[ProcessForkStrategy] = weakref.WeakSet()


@atexit.register
def _release_forgotten() -> None:
    for strategy in list(_LIVE_FORK_STRATEGIES):
        strategy.close()


class ProcessForkStrategy:
    """Copy-on-write process snapshots: any environment, no replay, Unix only.

    ``create_checkpoint`` forks the current process (the environment as it is now) into a
    checkpoint server; each ``create_branch`` asks that server to fork again and returns a
    :class:`ForkedEnvironment` for the new process with the checkpoint's state. Checkpoints
    of a ``ForkedEnvironment`` fork its remote process instead, so branches nest.

    Example:
        >>> ProcessForkStrategy().can_branch(object()) == hasattr(os, "fork")
        True
    """

    name = "process_fork"

    def __init__(self) -> None:
        self._sock_dir: str | None = None
        self._checkpoints: dict[str, tuple[ForkedEnvironment, list[ForkedEnvironment]]] = {}
        self._lock = threading.Lock()
        _LIVE_FORK_STRATEGIES.add(self)

    def can_branch(self, env: Any) -> bool:
        return hasattr(os, "fork") and sys.platform != "win32"

    def _dir(self) -> str:
        if self._sock_dir is None:
            # A private 0700 directory keeps other users off the sockets; short for AF_UNIX.
            self._sock_dir = tempfile.mkdtemp(prefix="twinkle-fork-")
        return self._sock_dir

    def create_checkpoint(
        self,
        env: Any,
        state: Any,
        actions: Sequence[Action] = (),
        reset_options: dict[str, Any] | None = None,
    ) -> CheckpointHandle:
        if isinstance(env, ForkedEnvironment):
            path, pid = env.fork()
            server = ForkedEnvironment(path, pid, sock_dir=env.sock_dir, owned=False)
        else:
            path, pid = _spawn_server(env, self._dir())
            server = ForkedEnvironment(path, pid, sock_dir=self._dir(), owned=True)
        handle = CheckpointHandle(uuid.uuid4().hex, state)
        with self._lock:
            self._checkpoints[handle.checkpoint_id] = (server, [])
        return handle

    def create_branch(self, handle: CheckpointHandle) -> BranchHandle:
        with self._lock:
            server, branches = self._checkpoints[handle.checkpoint_id]
        path, pid = server.fork()
        branch = ForkedEnvironment(path, pid, sock_dir=server.sock_dir, owned=False)
        with self._lock:
            branches.append(branch)
        return BranchHandle(branch, handle.state, resource_id=str(pid))

    def release_checkpoint(self, handle: CheckpointHandle) -> None:
        """Stop every branch process of the checkpoint, then the checkpoint process."""
        with self._lock:
            entry = self._checkpoints.pop(handle.checkpoint_id, None)
        if entry is None:
            return
        server, branches = entry
        for branch in branches:
            branch.close()
        server.close()

    def close(self) -> None:
        """Release every checkpoint and remove the socket directory."""
        with self._lock:
            ids = list(self._checkpoints)
        for checkpoint_id in ids:
            self.release_checkpoint(CheckpointHandle(checkpoint_id, None))
        if self._sock_dir is not None:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            self._sock_dir = None


# -- resolution and the manager ------------------------------------------------------------------
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
    if _replayable(env):
        if env_factory is None:
            raise ValueError(
                "this environment can only be branched by action_replay; pass env_factory="
            )
        return ActionReplayStrategy(env_factory)
    flags = {
        name: getattr(_spec(env), name, None)
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
        *,
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
