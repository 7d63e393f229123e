"""The sandbox's init: a tiny program that runs inside the sandbox and starts its commands.

The server starts it once per sandbox, under bubblewrap, with the sandbox's mounts,
namespaces and uid, as ``python3 -I -S -c BOOTSTRAP <fd>``; the bootstrap line reads this
file's source as the first packet on the socket and runs it. Every command of the
sandbox is then a child of this one process, so all commands share one PID, network, IPC
and mount namespace: a server started in the background by one command is reachable from the
next, and ``ps`` sees the processes of earlier commands, as on a VM. It is the PID 1 of the
sandbox (bubblewrap's ``--as-pid-1``), so the kernel keeps the sandbox's own processes from
killing it (even ``kill -9 1`` or ``pkill -9 python``: PID 1 gets only signals it handles) and
it reaps orphans. When the sandbox is killed it dies, and the kernel kills everything else in
the namespace.

It is stdlib-only and self-contained because it runs on the *template's* Python (the sandbox
root's ``python3``), never on the server's interpreter or packages.

Protocol, over a ``SOCK_SEQPACKET`` unix socket inherited as ``argv[1]`` (one JSON message per
packet, so no framing is needed):

* server -> init ``{"op": "start", "id": N, "argv": [...], "env": {...}, "cwd": "/home/user",
  "limits": {"nproc": 48, "as": bytes, "cpu": seconds}}`` with three file descriptors attached
  (``SCM_RIGHTS``): the command's stdin, stdout and stderr. The server keeps the other pipe ends.
* init -> server ``{"ready": true}`` once, when it has booted.
* init -> server ``{"id": N, "pid": P}`` once forked (P is the PID inside the sandbox), then
  ``{"id": N, "status": S}`` when it ends (S: exit code, or minus the signal number); or
  ``{"id": N, "error": "..."}`` if it could not fork (the sandbox is at its process limit).
* server -> init ``{"op": "signal", "pid": P, "signal": 9}``: sent to the command's process
  group (each command is a session leader, so this reaches what it forked).

The init ends when the socket closes (the server went away), taking the sandbox with it.

Example (what the server runs, then it sends this file's source on the socket)::

    bwrap ... -- python3 -I -S -c 'import os, sys; exec(os.read(int(sys.argv[1]), 1 << 20))' 3
"""

import json
import os
import resource
import select
import signal
import socket
import sys

_LIMITS = (
    ("nproc", resource.RLIMIT_NPROC),
    ("as", resource.RLIMIT_AS),
    ("cpu", resource.RLIMIT_CPU),
)


def _child(argv, env, cwd, limits, fds):
    """In the forked child: become a session leader, take the pipes and limits, exec."""
    step = "start"
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # Python ignores SIGPIPE and SIGXFSZ at start-up and exec keeps "ignored": restore them.
        for name in ("SIGPIPE", "SIGXFSZ", "SIGCHLD"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:  # the server shields the init from the OOM killer; commands are fair game
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("0")
        except OSError:
            pass
        for key, which in _LIMITS:
            if limits.get(key):
                soft = int(limits[key])
                # CPU: SIGXCPU at the limit, SIGKILL a second later if it is caught.
                hard = soft + 1 if key == "cpu" else soft
                resource.setrlimit(which, (soft, hard))
        step = f"change to directory {cwd!r} for"
        os.chdir(cwd)
        step = "start"
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the loop
        try:
            os.write(
                2,
                f"sandbox: cannot {step} {argv[0]!r}: "
                f"{getattr(exc, 'strerror', None) or exc}\n".encode(),
            )
        finally:
            os._exit(127 if step == "start" and isinstance(exc, FileNotFoundError) else 126)


def _status(wait_status):
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def main(fd):
    ctl = socket.socket(fileno=fd)
    ctl.set_inheritable(False)
    try:  # `ps` in the sandbox shows this name; `pkill python` does not match it
        with open("/proc/self/comm", "w") as comm:
            comm.write("sandbox-init")
    except OSError:
        pass
    # SIGCHLD wakes the poll through this pipe; both ends close on exec in the children.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children = {}  # pid -> request id

    def send(message):
        try:
            ctl.send(json.dumps(message).encode())
        except OSError:
            os._exit(0)  # the server is gone

    def reap():
        # As PID 1 of the sandbox it also reaps orphans that its commands left behind.
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            request = children.pop(pid, None)
            if request is not None:
                send({"id": request, "status": _status(wait_status)})

    send({"ready": True})  # booted: the server may now look at the sandbox from outside
    poller = select.poll()
    poller.register(ctl.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        try:
            ready = poller.poll()
        except InterruptedError:
            continue
        for ready_fd, _ in ready:
            if ready_fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
                reap()
                continue
            data, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 3, socket.MSG_CMSG_CLOEXEC)
            if not data:
                os._exit(0)  # the server closed the socket: end the sandbox
            message = json.loads(data)
            if message.get("op") == "start":
                try:
                    pid = os.fork()
                except OSError as exc:  # the sandbox's pids or memory limit is reached
                    pid = -1
                    send({"id": message["id"], "error": f"cannot fork: {exc.strerror or exc}"})
                if pid == 0:
                    _child(message["argv"], message["env"], message["cwd"], message["limits"], fds)
                for received in fds:
                    os.close(received)
                if pid > 0:
                    children[pid] = message["id"]
                    send({"id": message["id"], "pid": pid})
            elif message.get("op") == "signal":
                pid = int(message["pid"])
                if pid in children:  # never a reaped (possibly reused) PID
                    try:
                        os.killpg(pid, int(message["signal"]))
                    except ProcessLookupError:
                        # Forked but not yet a session leader: it has no children yet either.
                        try:
                            os.kill(pid, int(message["signal"]))
                        except OSError:
                            pass
                    except OSError:
                        pass
            for received in fds if message.get("op") != "start" else ():
                os.close(received)
        reap()


if __name__ == "__main__":
    main(int(sys.argv[1]))
