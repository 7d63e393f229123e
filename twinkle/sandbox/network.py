"""Isolated networking for sandboxes with network: their own namespace, user-mode networking.

A sandbox whose template allows network keeps its own network namespace (bubblewrap's
``--unshare-net``, as every sandbox) and gets a ``tap0`` device there from ``slirp4netns``
(Debian package ``slirp4netns``): address 10.0.2.100, gateway 10.0.2.2, DNS 10.0.2.3 (bound
over ``/etc/resolv.conf``). Its traffic leaves through slirp4netns's ordinary sockets in the
server's namespace, so it reaches what the server can reach, except the server's loopback
(``--disable-host-loopback``): services on the host's 127.0.0.1, the sandbox server included,
and other sandboxes (each has its own namespace and loopback) are out of reach. slirp4netns
runs in its own sandbox (``--enable-sandbox``, ``--enable-seccomp``) and exits with the
server (``--exit-fd``) or when the sandbox is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass

#: What the sandbox's ``/etc/resolv.conf`` says: slirp4netns's DNS forwarder.
RESOLV_CONF = "nameserver 10.0.2.3\n"
#: How long slirp4netns may take to configure the sandbox's ``tap0``.
READY_TIMEOUT = 10.0


def find_slirp4netns() -> str | None:
    """The path of ``slirp4netns``, or None if it is not installed."""
    return shutil.which("slirp4netns", path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")


@dataclass(eq=False)
class Slirp:
    """One sandbox's slirp4netns; ``close`` ends it (the server holds its exit pipe)."""

    process: subprocess.Popen[bytes]
    exit_fd: int

    def close(self) -> None:
        """Ask slirp4netns to exit (it also does when the server dies); does not wait."""
        if self.exit_fd >= 0:
            os.close(self.exit_fd)
            self.exit_fd = -1

    def reap(self, timeout: float = 5.0) -> None:
        """Wait for it to end after ``close`` (kill it past ``timeout``); off the event loop."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def start_slirp(binary: str, init_pid: int, timeout: float = READY_TIMEOUT) -> Slirp:
    """Give the network namespace of host process ``init_pid`` a ``tap0``; returns when ready.

    OSError if slirp4netns fails or is not ready within ``timeout``.
    """
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    os.set_inheritable(exit_w, False)
    argv = [
        binary,
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
        f"--ready-fd={ready_w}",
        f"--exit-fd={exit_r}",
        "--netns-type=path",
        f"/proc/{init_pid}/ns/net",
        "tap0",
    ]
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # it logs each packet event; nothing to keep
            pass_fds=(ready_w, exit_r),
            start_new_session=True,
        )
    except BaseException:
        for fd in (ready_r, exit_w):
            os.close(fd)
        raise
    finally:
        os.close(ready_w)
        os.close(exit_r)
    slirp = Slirp(process, exit_w)
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[bytes] = loop.create_future()

    def on_ready() -> None:
        if not ready.done():
            try:
                ready.set_result(os.read(ready_r, 1))
            except OSError as exc:
                ready.set_exception(exc)

    loop.add_reader(ready_r, on_ready)
    try:
        answer = await asyncio.wait_for(ready, timeout)
        if answer != b"1":
            raise OSError("slirp4netns exited before the network was configured")
    except BaseException as exc:
        slirp.close()
        process.kill()
        with contextlib.suppress(subprocess.SubprocessError):
            process.wait(timeout=2)
        if isinstance(exc, (OSError, TimeoutError)):
            code = process.returncode
            raise OSError(f"slirp4netns failed ({exc or 'timed out'}; exit {code})") from exc
        raise
    finally:
        loop.remove_reader(ready_r)
        os.close(ready_r)
    return slirp
