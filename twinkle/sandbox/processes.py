"""A sandbox's commands, started through its init (:mod:`twinkle.sandbox.spawner`).

Each sandbox has one long-lived init process, started under bubblewrap when the sandbox is
created. A command is one message to it over a ``SOCK_SEQPACKET`` socket pair, carrying the
command's three pipe ends as file descriptors; the init forks and execs the command inside
the sandbox's namespaces and reports its PID and exit status. The server keeps the other
pipe ends and reads them on its asyncio loop (``add_reader``), so output streams while the
command runs and stdin is an ordinary pipe.

The stdlib is enough here: ``socket.send_fds`` passes the descriptors and a pidfd tells the
loop when the init itself ends. The init is the PID 1 of the sandbox's PID namespace: killing
it makes the kernel kill every process left in the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from twinkle.errors import SandboxError

_READ_CHUNK = 64 * 1024
#: The most unread output (bytes, stdout and stderr together) the server holds per command.
#: Past it the server stops reading the command's pipes until the client has taken some, so
#: the command blocks in ``write`` (backpressure); nothing is dropped.
OUTPUT_WINDOW = 8 * 1024 * 1024
#: The init's command line: it reads the spawner program as the first packet on its socket,
#: so ``ps`` in the sandbox shows a short line instead of the program's source.
BOOTSTRAP = "import os, sys; exec(os.read(int(sys.argv[1]), 1 << 20))"
_SPAWNER_SOURCE = Path(__file__).with_name("spawner.py").read_bytes()
#: How long a command waits for the init to fork it (the init's own start-up included).
START_TIMEOUT = 30.0


class InitError(SandboxError, OSError):
    """The sandbox's init is gone or could not start a command."""


class CommandRefused(InitError):
    """The init is up but could not fork the command (the sandbox is at its process limit)."""


@dataclass(eq=False)
class Process:
    """One command running in a sandbox; its output and exit arrive on ``events``.

    ``pid`` is the PID inside the sandbox (what ``ps`` there shows); ``exit_code`` is the exit
    status, or minus the signal number that ended it. Consumers take events with
    :meth:`next_event`, which keeps the output window's accounting (see ``OUTPUT_WINDOW``).
    """

    request: int
    config: dict[str, Any]
    tag: str | None
    spawner: Spawner
    pid: int = 0
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    exit_code: int | None = None
    stdin: asyncio.WriteTransport | None = None
    outputs: dict[int, str] = field(default_factory=dict)  # read fd -> "stdout" / "stderr"
    #: Output bytes queued on ``events`` and not yet taken; the pipes are not read (paused)
    #: while it is at the spawner's window.
    buffered: int = 0
    paused: bool = False

    async def next_event(self) -> tuple[str, Any]:
        """The next ``(kind, value)`` event: ``stdout``/``stderr`` bytes, or ``end`` status."""
        kind, value = await self.events.get()
        if kind != "end":
            self.buffered -= len(value)
            if self.paused and self.buffered <= self.spawner.output_window // 2:
                self.spawner.resume(self)
        return kind, value

    def signal(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the command's process group (it is a session leader)."""
        if self.exit_code is None and self.pid:
            with contextlib.suppress(InitError):  # the init is gone, and the command with it
                self.spawner.signal(self.pid, sig)

    @property
    def stdin_open(self) -> bool:
        return self.stdin is not None and not self.stdin.is_closing()

    def write_stdin(self, data: bytes) -> None:
        if not self.stdin_open:
            raise InitError(f"stdin of process {self.pid} is not open")
        assert self.stdin is not None
        self.stdin.write(data)

    def close_stdin(self) -> None:
        if self.stdin is not None:
            self.stdin.close()  # after the buffered input is written


class Spawner:
    """The server's end of one sandbox's init.

    Args:
        argv: how to start the init (bubblewrap's argv ending in ``python3 -c BOOTSTRAP``),
            with ``{fd}`` standing for the socket's descriptor number.
        spawn_kwargs: extra ``subprocess.Popen`` arguments (the host uid to run as).
        isolated: whether the init has its own PID namespace; without one, killing the
            sandbox must kill each command's process group itself.
        output_window: the most unread output bytes held per command (``OUTPUT_WINDOW``).
        on_boot: called with the init's host PID (bubblewrap's) right after it starts and
            before the init may run anything (it waits for its program on the socket): puts
            it in the sandbox's cgroups. If it raises, the init is killed and ``start`` fails.

    Example (inside a running event loop)::

        spawner = Spawner(['python3', '-I', '-S', '-c', BOOTSTRAP, '{fd}'], {}, isolated=False)
        spawner.start()
        proc = await spawner.run(['/bin/echo', 'hi'], {'PATH': '/bin'}, '/tmp', {}, False, {})
        await proc.next_event()   # ('stdout', b'hi\\n')
    """

    def __init__(
        self,
        argv: list[str],
        spawn_kwargs: dict[str, Any],
        isolated: bool,
        output_window: int = OUTPUT_WINDOW,
        on_boot: Callable[[int], None] | None = None,
    ) -> None:
        self.argv = argv
        self.on_boot = on_boot
        self.spawn_kwargs = spawn_kwargs
        self.isolated = isolated
        self.output_window = max(int(output_window), _READ_CHUNK)
        #: Every command whose events may still be queued (also after it ended), so that
        #: killing the sandbox can drop their unread output.
        self._streams: weakref.WeakSet[Process] = weakref.WeakSet()
        self.processes: dict[int, Process] = {}  # request id -> process, until it ends
        self._ids = count(1)
        self._pending: dict[int, asyncio.Future[int]] = {}
        self._init: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._pidfd: int | None = None
        self._devnull: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: str | None = None  # why the init is gone, once it is
        #: Called once the init has ended and been reaped.
        self.on_exit: Callable[[], None] | None = None
        #: Resolves to the init's host PID once it has booted (see ``wait_ready``).
        self._ready: asyncio.Future[int] | None = None
        self._ready_pidfd: int | None = None

    # -- the init ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the init; returns at once (commands queue on the socket while it boots)."""
        self._loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        files: list[int] = []  # "{file:PATH}" arguments: PATH opened, its fd number passed
        try:
            argv = []
            for arg in self.argv:
                if arg.startswith("{file:") and arg.endswith("}"):
                    files.append(os.open(arg[6:-1], os.O_RDONLY | os.O_CLOEXEC))
                    arg = str(files[-1])
                argv.append(arg.replace("{fd}", str(theirs.fileno())))
            self._init = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(), *files),
                start_new_session=True,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                **self.spawn_kwargs,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            for fd in files:
                os.close(fd)
        if self.on_boot is not None:
            try:
                self.on_boot(self._init.pid)
            except BaseException:
                ours.close()
                self._init.kill()
                self._init.wait()
                if self._init.stderr is not None:
                    self._init.stderr.close()
                raise
        self._sock = ours
        self._ready = self._loop.create_future()
        ours.send(_SPAWNER_SOURCE)
        ours.setblocking(False)
        self._loop.add_reader(ours.fileno(), self._on_message)
        self._pidfd = os.pidfd_open(self._init.pid)
        self._loop.add_reader(self._pidfd, self._on_init_exit)
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    @property
    def alive(self) -> bool:
        return self._sock is not None

    @property
    def exited(self) -> bool:
        """The init has ended and been reaped (``on_exit`` has run or will not run again)."""
        return self._init is not None and self._pidfd is None

    async def wait_ready(self, timeout: float = START_TIMEOUT) -> int:
        """The init's host PID, once it has booted; InitError if it ends or takes too long."""
        assert self._ready is not None, "start() first"
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError as exc:
            raise InitError(f"sandbox init did not boot in {timeout:g} s") from exc

    def root_process(self) -> tuple[int, int]:
        """The booted init's host PID and a pidfd of it (``/proc/<pid>/root`` is the sandbox's
        root while the pidfd does not report an exit). InitError if it is gone or not booted."""
        if self._ready is None or not self._ready.done() or self._ready_pidfd is None:
            raise InitError(f"sandbox init is not running: {self.error or 'not booted yet'}")
        return self._ready.result(), self._ready_pidfd

    def kill(self, reason: str = "the sandbox was killed") -> None:
        """Kill the init and with it every process of the sandbox; ends every open stream."""
        if not self.alive:
            return
        if not self.isolated:  # no PID namespace to collapse: kill each command's group
            for proc in self.processes.values():
                if proc.pid > 0:  # never killpg(0): that is the server's own group
                    with contextlib.suppress(OSError):
                        os.killpg(proc.pid, signal.SIGKILL)
        if self._init is not None:
            with contextlib.suppress(OSError):
                os.kill(self._inner_pid(), signal.SIGKILL)
        self._shut(reason)

    def _inner_pid(self) -> int:
        """The init's host PID: bubblewrap's child (or the init itself, unisolated).

        Killing it rather than bubblewrap lets every process be reaped by its own parent: the
        PID namespace collapses, bubblewrap reaps the init and exits, the loop reaps
        bubblewrap. Killing bubblewrap first would orphan the init to the host's PID 1, which
        in a container often reaps nothing.
        """
        assert self._init is not None
        pid = self._init.pid
        if self.isolated:
            with contextlib.suppress(OSError, ValueError):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                if children:
                    return int(children[0])
        return pid

    def reap(self, timeout: float) -> None:
        """Wait for the init to end after ``kill`` (server shutdown: the loop may be gone)."""
        if self._init is not None and self._pidfd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._init.wait(timeout)
                self._on_init_exit()

    def _shut(self, reason: str) -> None:
        self.error = self.error or reason
        if self._sock is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(InitError(f"sandbox init is gone: {self.error}"))
        self._pending.clear()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(InitError(f"sandbox init is gone: {self.error}"))
            self._ready.exception()  # retrieved: no "never retrieved" warning if none waits
        for proc in list(self.processes.values()):
            self._finish(proc, -signal.SIGKILL)
        # The sandbox is gone: its unread output goes too (a client that never reads must not
        # keep it in memory); each stream keeps only its end event.
        for proc in list(self._streams):
            _drop_output(proc)
        if self._devnull is not None:
            os.close(self._devnull)
            self._devnull = None

    def _on_init_exit(self) -> None:
        assert self._init is not None and self._pidfd is not None
        assert self._loop is not None
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        if self._ready_pidfd is not None:
            os.close(self._ready_pidfd)
            self._ready_pidfd = None
        code = self._init.wait()
        detail = b""
        if self._init.stderr is not None:
            # The init's stderr only carries start-up failures (bubblewrap's, python's).
            os.set_blocking(self._init.stderr.fileno(), False)
            with contextlib.suppress(OSError, TypeError):
                detail = self._init.stderr.read(4096) or b""
            self._init.stderr.close()
        message = detail.decode(errors="replace").strip()
        self._shut(f"init exited with status {code}" + (f": {message}" if message else ""))
        if self.on_exit is not None:
            self.on_exit()

    def _on_message(self) -> None:
        assert self._sock is not None
        while self._sock is not None:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:
                data, self.error = b"", f"init socket failed: {exc}"
            if not data:
                if (
                    self._init is not None
                    and self._pidfd is not None
                    and self._init.poll() is not None
                ):
                    self._on_init_exit()  # it exited: report why (its stderr)
                else:
                    self.kill("init closed its socket")
                return
            try:
                kind, request, value = _parse_init_message(data)
            except (ValueError, KeyError, TypeError, AttributeError):
                # The init shares the sandbox with untrusted code: a bad message ends it.
                self.kill(f"init sent a malformed message: {data[:200]!r}")
                return
            if kind == "ready":
                if self._ready is not None and not self._ready.done():
                    try:
                        pid = self._inner_pid()
                        self._ready_pidfd = _own_root_pidfd(pid, self.isolated)
                    except Exception as exc:  # noqa: BLE001 - ends this sandbox, says why
                        self.kill(f"init booted but cannot be watched: {exc!r}")
                        return
                    self._ready.set_result(pid)
            elif kind in ("pid", "error"):  # a command started, or could not be forked
                future = self._pending.pop(request, None)
                if future is not None and not future.done():
                    if kind == "pid":
                        future.set_result(value)
                    else:
                        future.set_exception(CommandRefused(value))
            elif request in self.processes:
                self._finish(self.processes[request], value)

    def signal(self, pid: int, sig: int) -> None:
        """Ask the init to send ``sig`` to the process group ``pid`` (inside the sandbox)."""
        self._send({"op": "signal", "pid": pid, "signal": int(sig)}, [])

    def _send(self, message: dict[str, Any], fds: list[int]) -> None:
        if self._sock is None:
            raise InitError(f"sandbox init is gone: {self.error}")
        data = json.dumps(message, separators=(",", ":")).encode()
        try:
            socket.send_fds(self._sock, [data], fds)
        except BlockingIOError as exc:  # only if the init stopped reading its socket
            raise InitError("sandbox init is not answering") from exc

    # -- commands ------------------------------------------------------------------------
    async def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        limits: dict[str, int],
        stdin: bool,
        config: dict[str, Any],
        tag: str | None = None,
    ) -> Process:
        """Start a command; returns once it runs (its PID known). InitError if it cannot."""
        assert self._loop is not None, "start() first"
        request = next(self._ids)
        proc = Process(request=request, config=config, tag=tag, spawner=self)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r = in_w = None
        try:
            if stdin:
                in_r, in_w = os.pipe()
            future = self._loop.create_future()
            self._pending[request] = future
            message = {"op": "start", "id": request, "argv": argv, "env": env, "cwd": cwd}
            self._send({**message, "limits": limits}, [in_r or self._devnull or -1, out_w, err_w])
        except BaseException:
            self._pending.pop(request, None)
            for fd in (out_r, in_w):
                if fd is not None:
                    os.close(fd)
            os.close(err_r)
            raise
        finally:
            for fd in (out_w, err_w, in_r):  # the init holds its own copies now
                if fd is not None:
                    os.close(fd)
        self.processes[request] = proc
        self._streams.add(proc)
        for fd, name in ((out_r, "stdout"), (err_r, "stderr")):
            os.set_blocking(fd, False)
            proc.outputs[fd] = name
            self._loop.add_reader(fd, self._pump, proc, fd)
        if in_w is not None:
            transport, _ = await self._loop.connect_write_pipe(
                asyncio.BaseProtocol, os.fdopen(in_w, "wb", buffering=0)
            )
            proc.stdin = transport  # type: ignore[assignment]
        try:
            proc.pid = await asyncio.wait_for(asyncio.shield(future), START_TIMEOUT)
        except TimeoutError as exc:
            self.kill("init did not start a command in time")
            raise InitError(f"sandbox init did not start the command: {self.error}") from exc
        except InitError:
            self._finish(proc, -signal.SIGKILL)
            if proc.stdin is not None:  # it never ran: nothing will read its stdin
                proc.stdin.abort()
            raise
        return proc

    def _pump(self, proc: Process, fd: int) -> None:
        """Forward what a pipe holds now; after the command ended, discard it (see _finish)."""
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close_output(proc, fd)
        elif proc.exit_code is None:
            proc.events.put_nowait((proc.outputs[fd], chunk))
            proc.buffered += len(chunk)
            if proc.buffered >= self.output_window:
                self._pause(proc)

    def _pause(self, proc: Process) -> None:
        """Stop reading the command's pipes: it blocks once they are full (backpressure)."""
        if proc.paused or self._loop is None:
            return
        proc.paused = True
        for fd in proc.outputs:
            self._loop.remove_reader(fd)

    def resume(self, proc: Process) -> None:
        """Read the command's pipes again (its client took output, or it ended)."""
        if not proc.paused or self._loop is None:
            return
        proc.paused = False
        for fd in proc.outputs:
            self._loop.add_reader(fd, self._pump, proc, fd)

    def _close_output(self, proc: Process, fd: int) -> None:
        if proc.outputs.pop(fd, None) is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
            os.close(fd)

    def _finish(self, proc: Process, status: int) -> None:
        """The command ended: pass on what it wrote, then its status.

        Its output is in the pipes by now, so reading what they hold loses nothing (at most
        their capacity: a background child that keeps writing must not hold the loop here). A
        background child may still hold them open (``server &``); those pipes stay drained
        and are closed at EOF or when the sandbox dies, so the child never gets SIGPIPE.
        """
        if proc.exit_code is not None:
            return
        for fd, name in list(proc.outputs.items()):
            try:
                left = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
            except OSError:
                left = _READ_CHUNK
            while left > 0:
                try:
                    chunk = os.read(fd, min(_READ_CHUNK, left))
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    self._close_output(proc, fd)
                    break
                proc.events.put_nowait((name, chunk))
                proc.buffered += len(chunk)
                left -= len(chunk)
        proc.exit_code = status
        # From now on the pipes are only drained (a background child may still write).
        self.resume(proc)
        self.processes.pop(proc.request, None)
        if self._sock is None:  # the sandbox is gone: nothing will hold the pipes any more
            for fd in list(proc.outputs):
                self._close_output(proc, fd)
            if proc.stdin is not None:
                proc.stdin.abort()
        proc.events.put_nowait(("end", status))


def _parse_init_message(data: bytes) -> tuple[str, int, Any]:
    """(kind, request id, value) of a message from the init: ``("ready", 0, None)``,
    ``("pid", id, pid)``, ``("error", id, why)`` (the command could not be forked) or
    ``("status", id, exit status)``. Raises ValueError, KeyError, TypeError or AttributeError
    when it is malformed.

    Example:
        >>> _parse_init_message(b'{"id": 3, "pid": 41}')
        ('pid', 3, 41)
    """
    message = json.loads(data)
    if message.get("ready") is True:
        return "ready", 0, None
    request = int(message["id"])
    if "error" in message:
        return "error", request, str(message["error"])[:500]
    if "pid" in message:
        return "pid", request, int(message["pid"])
    return "status", request, int(message["status"])


def _own_root_pidfd(pid: int, isolated: bool) -> int | None:
    """A pidfd of the booted init ``pid``, or None if it is gone or not the sandbox's.

    Only a process in a mount namespace of its own is an isolated sandbox's init: its
    ``/proc/<pid>/root`` must never be the host's root. The pidfd is taken first, so the
    checks are about that very process (a PID reused meanwhile shows as exited).
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        mine = not isolated or os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink(
            "/proc/self/ns/mnt"
        )
    except OSError:
        mine = False
    if not mine or pidfd_exited(pidfd):
        os.close(pidfd)
        return None
    return pidfd


def pidfd_exited(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has exited (its pidfd reads as ready), without waiting.

    ``poll`` rather than ``select``: a server with hundreds of live sandboxes holds descriptors
    numbered past ``FD_SETSIZE`` (1024), which ``select`` refuses with ``ValueError``.

    Example:
        >>> fd = os.pidfd_open(os.getpid())
        >>> pidfd_exited(fd)
        False
        >>> os.close(fd)
    """
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _drop_output(proc: Process) -> None:
    """Discard the command's queued output, keeping its end event if it is queued."""
    kept = []
    while not proc.events.empty():
        event = proc.events.get_nowait()
        if event[0] == "end":
            kept.append(event)
    proc.buffered = 0
    for event in kept:
        proc.events.put_nowait(event)
