"""Process-fork branching: copy-on-write snapshots of the whole process, driven over sockets.

The checkpoint is a process forked with ``os.fork``; each branch forks that snapshot again
and is driven through a :class:`ForkedEnvironment` proxy over a Unix socket
(``multiprocessing.connection`` framing, pickled calls). An ``atexit`` hook releases the
processes of every strategy a program forgot to close. Stdlib only, Linux or macOS.
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
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from twinkle.core.branching_strategies import BranchHandle, CheckpointHandle
from twinkle.core.state import Action, State

__all__ = ["ForkedEnvironment", "ProcessForkStrategy"]


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
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            reply = ("err", exc)
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - an unpicklable reply is reported as an error
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
        """The environment's ``prompts``, or ``{}`` when it has none (an optional member)."""
        try:
            return self._attr("prompts")
        except AttributeError:
            return {}

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
