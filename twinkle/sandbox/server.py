"""``SandboxServer``: the local E2B-compatible server, run by uvicorn in a background thread.

uvicorn serves the ASGI app on one loopback port; the thread owns the event loop that all
sandbox processes belong to. ``stop()`` (or leaving the ``with`` block) shuts uvicorn down,
which kills every sandbox's process group and deletes its files; an ``atexit`` hook does
the same if the interpreter exits first.

No orphans: each server writes its PID (and the process's start time, so a reused PID does
not count) to ``.server-pid`` in its folder, and at start removes, off the start path, the
``twinkle-sandboxes-*`` folders beside its own whose server is gone (killed with SIGKILL,
say) and the sandboxes a dead server left in its own folder. A server given ``parent_pid``
(``twinkle sandbox serve --parent-pid``, as the flows start it) shuts down cleanly once that
process is no longer its parent, so a ``kill -9`` of ``twinkle run`` takes it along; each
sandbox's bubblewrap dies with the server in any case (``--die-with-parent``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path
from secrets import token_hex
from typing import Any

from twinkle.sandbox.app import SandboxApp
from twinkle.sandbox.cgroups import Cgroups, detect
from twinkle.sandbox.isolation import (
    ETC_PROFILE,
    HOME_PROFILE,
    Isolation,
    IsolationError,
    find_bwrap,
)
from twinkle.sandbox.network import RESOLV_CONF, find_slirp4netns
from twinkle.sandbox.sandbox import SandboxManager
from twinkle.sandbox.templates import TemplateRegistry
from twinkle.utils.serving import ThreadedServer

log = logging.getLogger(__name__)

#: The prefix of a server's own temporary folder; stale ones are removed at start.
ROOT_PREFIX = "twinkle-sandboxes-"
#: The file in a server's folder that names the process owning it: "PID START_TIME".
PID_FILE = ".server-pid"
_SANDBOX_DIR = re.compile(r"^i[0-9a-f]{20}$")
#: Descriptors a live sandbox holds in the server (measured 5: the init's socket, two pidfds,
#: its stderr pipe, a client's connection), with room to spare; and the server's own.
FDS_PER_SANDBOX = 6
FDS_BASE = 256


class SandboxServer:
    """A local E2B-compatible sandbox server on ``host:port``.

    Args:
        port: TCP port; 0 picks a free one (see ``url`` after ``start()``).
        host: interface to bind; loopback by default (the server runs code on request).
        api_key: the key clients must send; defaults to ``E2B_API_KEY``. Required.
        templates: a ``TemplateRegistry``, a path to a YAML/JSON templates file, or None for
            just the built-in ``base`` template.
        unisolated: run commands as plain processes when bubblewrap is missing. Unsafe: a
            command can read and write anything the server's user can. Never the default.
        root: directory for sandbox files (a fresh temporary directory by default).
        max_sandboxes: the most sandboxes alive at once.
        output_window_mb: the most unread output (MiB) the server holds per command; past it
            the command blocks in ``write`` until its client reads (backpressure).
        parent_pid: shut down (``serve_forever`` returns, cleaning up) once this process is no
            longer the server's parent: the process that started it died.
        require_limits: refuse to start unless every per-sandbox limit is enforced here (see
            ``limits``): memory, pids and CPU through cgroups, disk, network isolation.

    Raises:
        IsolationError: bubblewrap is not usable and ``unisolated`` is False, or
            ``require_limits`` and a limit is not enforced on this host.

    Example::

        with SandboxServer(port=0, api_key='k') as srv:
            sbx = e2b.Sandbox.create(**srv.sdk_kwargs())   # api_url = sandbox_url = srv.url
            sbx.commands.run('python -c "print(1+1)"').stdout   # '2\n'
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        api_key: str | None = None,
        templates: TemplateRegistry | str | Path | None = None,
        unisolated: bool = False,
        root: str | Path | None = None,
        max_sandboxes: int = 1024,
        output_window_mb: float = 8,
        parent_pid: int | None = None,
        require_limits: bool = False,
    ) -> None:
        self.parent_pid = parent_pid
        self.require_limits = require_limits
        self.api_key = api_key or os.environ.get("E2B_API_KEY") or ""
        if not self.api_key:
            raise ValueError("an API key is required: pass api_key= or set E2B_API_KEY")
        if isinstance(templates, (str, Path)):
            templates = TemplateRegistry.from_file(templates)
        self.templates = templates or TemplateRegistry()
        found = find_bwrap()
        if found is None and not unisolated:
            raise IsolationError(
                "bubblewrap (bwrap) is not installed or cannot create namespaces here; install it "
                "(apt-get install bubblewrap) or pass unisolated=True / --unisolated to run "
                "commands without isolation (unsafe)"
            )
        self.host, self.port = host, port
        self._own_root = root is None
        # Only a name here; start() creates the directory and stop() removes it.
        self.root = Path(root or Path(tempfile.gettempdir(), f"{ROOT_PREFIX}{token_hex(6)}"))
        bwrap, drop = found if found is not None else (None, False)
        self.isolation = Isolation(
            bwrap=bwrap,
            server_root=self.root,
            drop_privileges=drop,
            slirp4netns=find_slirp4netns() if bwrap else None,
        )
        #: Created by ``start()`` (the server's own groups are made there).
        self.cgroups: Cgroups | None = None
        self.manager = SandboxManager(
            self.templates,
            self.isolation,
            self.root,
            max_sandboxes=max_sandboxes,
            token_key=self.api_key.encode(),
            output_window=int(output_window_mb * 1024 * 1024),
        )
        self._sandbox_app = SandboxApp(self.manager, self.api_key)
        #: The ASGI app served by ``start()``; wrap it before starting to observe requests.
        self.app: Any = self._sandbox_app
        self._http: ThreadedServer | None = None

    @property
    def isolated(self) -> bool:
        return self.isolation.isolated

    @property
    def url(self) -> str:
        """The base URL for both ``api_url`` and ``sandbox_url``."""
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that point the e2b SDK (and ``AgentEnv``) at this server."""
        return {"E2B_API_URL": self.url, "E2B_SANDBOX_URL": self.url, "E2B_API_KEY": self.api_key}

    def sdk_kwargs(self) -> dict[str, str]:
        """Keyword arguments for ``e2b.Sandbox.create`` / ``connect`` that target this server."""
        return {"api_url": self.url, "sandbox_url": self.url, "api_key": self.api_key}

    def limits(self) -> dict[str, str]:
        """Each per-sandbox limit and how it is enforced here ("not enforced: why" if not).

        ``memory``, ``pids``, ``cpu``: the sandbox's cgroups; ``disk``: size-limited tmpfs;
        ``network``: a sandbox with network in its own namespace behind slirp4netns.
        """
        if not self.isolated:
            return dict.fromkeys(
                ("memory", "pids", "cpu", "disk", "network"), "not enforced: unisolated"
            )
        out = (self.cgroups or Cgroups(0, {}, {})).describe()
        out["disk"] = (
            "tmpfs of the template's disk_mb at /home/user, /tmp and /dev/shm, in the "
            "sandbox's mount namespace; /home, /root and /dev read-only"
        )
        out["network"] = (
            f"own namespace, slirp4netns ({self.isolation.slirp4netns})"
            if self.isolation.slirp4netns
            else "not enforced: slirp4netns is not installed (apt-get install slirp4netns); "
            "sandboxes with network share the server's"
        )
        return out

    def start(self, timeout: float = 30.0) -> SandboxServer:
        """Create the sandbox root, bind, serve in a daemon thread; returns once it accepts."""
        if self._http is not None:
            return self
        try:
            if self.isolated and self.cgroups is None:
                self.cgroups = detect()
                self.manager.cgroups = self.cgroups
            missing = {k: v for k, v in self.limits().items() if v.startswith("not enforced")}
            if self.require_limits and missing:
                raise IsolationError(
                    "limits required but not enforced on this host: "
                    + "; ".join(
                        f"{k}: {v.removeprefix('not enforced: ')}" for k, v in missing.items()
                    )
                )
            open_files_for(self.manager.max_sandboxes)
            self._serve(timeout)
        except BaseException:
            self.stop()  # leaves no directory or thread behind
            raise
        return self

    def _serve(self, timeout: float) -> None:
        self.root.mkdir(parents=True, exist_ok=not self._own_root)
        os.chmod(self.root, 0o711)  # sandboxes running as another uid must reach their own dirs
        self.isolation.check_root()
        self._remove_orphans()
        (self.root / ".etc-profile").write_text(ETC_PROFILE)
        (self.root / ".resolv-slirp").write_text(RESOLV_CONF)
        (self.root / ".home-profile").write_text(HOME_PROFILE)
        http = ThreadedServer(
            self.app,
            self.host,
            self.port,
            name="twinkle-sandbox",
            lifespan="on",
            timeout_keep_alive=75,
            timeout_graceful_shutdown=5,
            http="h11",
            ws="none",
        )
        self._http = http.start(timeout)
        self.port = http.port
        atexit.register(self.stop)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving; kills every sandbox and removes the files. Safe to call twice."""
        loop = self._sandbox_app.loop
        if self._http is not None and loop is not None and loop.is_running():
            # Kill the sandboxes on their own loop first: that ends every open command stream,
            # so uvicorn's graceful shutdown does not wait on them.
            done = threading.Event()
            loop.call_soon_threadsafe(lambda: (self.manager.shutdown(wait_files=False), done.set()))
            done.wait(timeout)
        if self._http is not None:
            self._http.stop(timeout)
            self._http = None
        self.manager.shutdown()  # also covers a loop that died without its shutdown hook
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)

    def serve_forever(self) -> None:
        """Start and block until interrupted (the CLI's ``twinkle sandbox serve``)."""
        self.start()
        try:
            while self._http is not None and self._http.running:
                if self.parent_pid is not None and os.getppid() != self.parent_pid:
                    log.warning("the sandbox server's parent %d is gone: stopping", self.parent_pid)
                    break
                time.sleep(0.5)
        finally:
            self.stop()

    def _remove_orphans(self) -> None:
        """Claim this folder (``.server-pid``); remove what dead servers left (in the background).

        Only folders whose ``.server-pid`` names a process that is gone are touched: a folder
        without one may belong to a server that is starting right now.
        """
        mine = self.root / PID_FILE
        previous = _read_owner(mine)
        if previous is not None and not _alive(previous):
            for entry in self.root.iterdir():  # sandboxes of the dead server that had this root
                if _SANDBOX_DIR.match(entry.name):
                    self.manager.remove_later(entry)
        staged = mine.with_name(f"{PID_FILE}.{os.getpid()}")
        staged.write_text(f"{os.getpid()} {_start_time(os.getpid())}")
        os.replace(staged, mine)
        with contextlib.suppress(OSError):
            for folder in self.root.parent.glob(f"{ROOT_PREFIX}*"):
                owner = _read_owner(folder / PID_FILE)
                if folder != self.root and owner is not None and not _alive(owner):
                    log.info("removing %s, left by a sandbox server that is gone", folder)
                    self.manager.remove_later(folder)

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def open_files_for(max_sandboxes: int) -> int:
    """Raise this process's open-files limit (soft, up to the hard one) to what
    ``max_sandboxes`` live sandboxes need; returns how many sandboxes the limit now holds.

    Many hosts start processes with a soft limit of 1,024 descriptors: a server would then
    fail to create sandboxes, or accept connections, past about 170 live ones. Where the hard
    limit is lower than needed, a warning says how many fit and how to raise it.

    Example:
        >>> open_files_for(16) >= 16
        True
    """
    need = FDS_BASE + FDS_PER_SANDBOX * max_sandboxes
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return max_sandboxes
    fits = max(0, (soft - FDS_BASE) // FDS_PER_SANDBOX)
    if fits < max_sandboxes:
        log.warning(
            "the open-files limit (%d) holds about %d live sandboxes, not max_sandboxes=%d; "
            "raise the hard limit (ulimit -Hn, LimitNOFILE= in a systemd unit, --ulimit "
            "nofile= in docker) or keep fewer sandboxes alive at once",
            soft,
            fits,
            max_sandboxes,
        )
    return min(fits, max_sandboxes)


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot), or "" if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    # After the ")" of the name: state is field 3 of stat(5), start time field 22.
    return "" if fields[0] in ("Z", "X") else fields[19]


def _read_owner(pid_file: Path) -> tuple[int, str] | None:
    """``(pid, start time)`` from a server's ``.server-pid``, or None if unreadable."""
    try:
        pid, start = pid_file.read_text().split()
        return int(pid), start
    except (OSError, ValueError):
        return None


def _alive(owner: tuple[int, str]) -> bool:
    """Whether the server process that wrote a ``.server-pid`` still runs."""
    pid, start = owner
    return _start_time(pid) == start
