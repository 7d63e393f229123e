"""Sandboxes: create, run commands, kill, reap.

Everything here runs on the server's asyncio loop. A sandbox is one long-lived init process
(:mod:`twinkle.sandbox.processes`) started under bubblewrap at create time, in its own cgroups
(:mod:`twinkle.sandbox.cgroups`), with its files in tmpfs mounts of its own mount namespace
(unisolated: a host directory holding ``home`` and ``tmp``); every command is forked by that
init inside the sandbox's namespaces, so commands share processes, network and files as on one
machine. Killing the init collapses the sandbox's PID namespace, which removes everything its
commands started, including background and forked children, and its mount namespace, which
frees its files. What is left (its cgroups, its slirp4netns, a host directory) is removed
off the loop, on one cleanup thread, so that no kill stalls every other sandbox's requests.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hmac
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle.errors import SandboxError
from twinkle.sandbox.cgroups import Cgroups, SandboxCgroup
from twinkle.sandbox.files import SandboxFiles
from twinkle.sandbox.isolation import HOME_PROFILE, SANDBOX_HOME, Isolation, IsolationError
from twinkle.sandbox.network import Slirp, start_slirp
from twinkle.sandbox.processes import OUTPUT_WINDOW, Process, Spawner
from twinkle.sandbox.templates import Template, TemplateRegistry

#: The envd version reported to the SDK; 0.5.7 unlocks octet-stream uploads and stdin control.
ENVD_VERSION = "0.5.7"


class SetupError(SandboxError, RuntimeError):
    """A template's setup command failed while creating a sandbox."""


@dataclass(eq=False)
class Sandbox:
    """One sandbox: its directory, template, lifetime and running processes."""

    sandbox_id: str
    template: Template
    directory: Path
    access_token: str
    envs: dict[str, str]
    metadata: dict[str, str]
    network: bool
    started_at: float
    end_at: float
    files: SandboxFiles
    spawner: Spawner
    #: Its cgroups (None where the host enforces none); removed once its init is reaped.
    cgroup: SandboxCgroup | None = None
    #: Its user-mode networking (sandboxes with network, where slirp4netns is installed).
    slirp: Slirp | None = None

    @property
    def processes(self) -> dict[int, Process]:
        """The running commands by PID (inside the sandbox)."""
        return {p.pid: p for p in self.spawner.processes.values() if p.pid}

    def info(self, detail: bool = False) -> dict[str, Any]:
        """The control plane's JSON for this sandbox (``Sandbox``, or ``SandboxDetail``)."""
        out: dict[str, Any] = {
            "templateID": self.template.name,
            "sandboxID": self.sandbox_id,
            "clientID": "local",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.access_token,
            "alias": self.template.name,
        }
        if detail:
            out.update(
                startedAt=_iso(self.started_at),
                endAt=_iso(self.end_at),
                cpuCount=self.template.cpu_count,
                memoryMB=self.template.memory_mb,
                diskSizeMB=self.template.disk_mb,
                state="running",
                metadata=self.metadata,
            )
        return out

    def kill_processes(self) -> None:
        self.spawner.kill()


def _boot_into(cgroup: SandboxCgroup) -> Callable[[int], None]:
    """The spawner's ``on_boot``: move bubblewrap (and what it forked) into the sandbox's groups.

    Those processes are the sandbox's machinery, so the OOM killer is steered away from them
    (it still may take them as a last resort); each command resets its own score to 0.
    """

    def boot(pid: int) -> None:
        for moved in cgroup.add_tree(pid):
            with contextlib.suppress(OSError):
                Path(f"/proc/{moved}/oom_score_adj").write_text("-999")

    return boot


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


class SandboxManager:
    """Creates, finds, kills and reaps sandboxes under one server directory.

    Args:
        templates: the template registry.
        isolation: how commands are started (bubblewrap, or unisolated).
        root: the directory holding one sub-directory per sandbox.
        max_sandboxes: refuse to create more than this many live sandboxes.
        token_key: the secret that access tokens are derived from (random by default; the
            server passes its API key, so tokens stay valid across a restart).
        output_window: the most unread output bytes held per command; past it the command
            blocks until its client reads (see :data:`twinkle.sandbox.processes.OUTPUT_WINDOW`).
        cgroups: the server's cgroups (:func:`twinkle.sandbox.cgroups.detect`): each sandbox
            gets groups limiting its memory (tmpfs included), processes and CPUs to its
            template's ``memory_mb``, ``max_processes`` and ``cpu_count``. None: no cgroups.

    Example (inside a running event loop)::

        manager = SandboxManager(TemplateRegistry(), Isolation('/usr/bin/bwrap', root, True), root)
        sbx = await manager.create('base', timeout=60, envs={}, metadata={})
        proc = await manager.start(sbx, '/bin/bash', ['-c', 'echo hi'], {}, None, stdin=False)
    """

    def __init__(
        self,
        templates: TemplateRegistry,
        isolation: Isolation,
        root: Path,
        max_sandboxes: int = 1024,
        token_key: bytes | None = None,
        output_window: int = OUTPUT_WINDOW,
        cgroups: Cgroups | None = None,
    ) -> None:
        self.templates = templates
        self.cgroups = cgroups if isolation.isolated else None
        self.output_window = output_window
        self._token_key = token_key or secrets.token_bytes(32)
        self.isolation = isolation
        self.root = root
        self.max_sandboxes = max_sandboxes
        self.sandboxes: dict[str, Sandbox] = {}
        #: Removes killed sandboxes' directories, off the event loop (see ``kill``).
        self._cleaner = concurrent.futures.ThreadPoolExecutor(1, "twinkle-sandbox-cleanup")
        self._cleanups: set[concurrent.futures.Future[None]] = set()
        self._cleanups_lock = threading.Lock()
        self.owner = isolation.owner()
        self._has_python = shutil.which("python", path="/usr/local/bin:/usr/bin:/bin") is not None

    # -- lifecycle -----------------------------------------------------------------------
    async def create(
        self,
        template: str,
        timeout: float,
        envs: dict[str, str],
        metadata: dict[str, str],
        allow_internet: bool | None = None,
    ) -> Sandbox:
        """A new running sandbox. KeyError for an unknown template, SetupError if setup fails."""
        tmpl = self.templates.get(template)
        if len(self.sandboxes) >= self.max_sandboxes:
            raise OverflowError(f"too many sandboxes (max {self.max_sandboxes})")
        sandbox_id = "i" + secrets.token_hex(10)
        directory = self.root / sandbox_id
        network = tmpl.network and allow_internet is not False
        try:
            init = self.isolation.init_argv(tmpl, directory, network)
        except IsolationError as exc:
            raise SetupError(str(exc)) from exc
        if not self.isolation.isolated:  # isolated: tmpfs mounts inside the sandbox instead
            self._make_dirs(directory)
        cgroup = None
        try:
            if self.cgroups is not None and self.cgroups.enforced:
                cgroup = self.cgroups.create(
                    sandbox_id,
                    memory_bytes=tmpl.memory_mb * 1024 * 1024,
                    # bubblewrap's own process stays beside the sandbox's init
                    pids=tmpl.max_processes + 1,
                    cpus=tmpl.cpu_count,
                )
            spawner = Spawner(
                init,
                self.isolation.spawn_kwargs(),
                self.isolation.isolated,
                self.output_window,
                on_boot=None if cgroup is None else _boot_into(cgroup),
            )
            spawner.start()  # the init boots while the client gets its answer
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            if cgroup is not None:
                cgroup.remove(timeout=1.0)
            raise SetupError(f"template {tmpl.name!r}: cannot start the sandbox: {exc}") from exc
        now = time.time()
        sbx = Sandbox(
            sandbox_id=sandbox_id,
            template=tmpl,
            directory=directory,
            access_token=self.access_token(sandbox_id),
            envs=dict(envs),
            metadata=dict(metadata),
            network=network,
            started_at=now,
            end_at=now + timeout,
            files=SandboxFiles(directory, self.owner, spawner if self.isolation.isolated else None),
            spawner=spawner,
            cgroup=cgroup,
        )
        self.sandboxes[sandbox_id] = sbx
        if cgroup is not None and self.cgroups is not None:
            self.cgroups.weigh(len(self.sandboxes))
        try:
            if network and self.isolation.slirp4netns is not None:
                pid = await spawner.wait_ready()
                sbx.slirp = await start_slirp(self.isolation.slirp4netns, pid)
            for command in tmpl.setup:
                await asyncio.wait_for(self._setup(sbx, command), timeout=timeout)
        except (OSError, TimeoutError, SetupError) as exc:
            self.kill(sandbox_id)
            if isinstance(exc, SetupError):
                raise
            raise SetupError(f"template {tmpl.name!r} setup failed: {exc!r}") from exc
        return sbx

    async def _setup(self, sbx: Sandbox, command: str) -> None:
        proc = await self.start(sbx, "/bin/bash", ["-l", "-c", command], {}, None, stdin=False)
        output = []
        while (event := await proc.next_event())[0] != "end":
            output.append(event[1])
        if event[1] != 0:
            tail = b"".join(output).decode(errors="replace")[-2000:]
            name = sbx.template.name
            raise SetupError(
                f"template {name!r} setup command {command!r} exited {event[1]}: {tail}"
            )

    def _make_dirs(self, directory: Path) -> None:
        directory.mkdir(mode=0o711)
        home, tmp = directory / "home", directory / "tmp"
        home.mkdir(mode=0o755)
        tmp.mkdir(mode=0o1777)
        os.chmod(tmp, 0o1777)  # mkdir's mode is masked by the umask
        (home / ".profile").write_text(HOME_PROFILE)
        if not self._has_python:  # hosts with python3 only: give the sandbox a `python`
            (home / ".local" / "bin").mkdir(parents=True)
            os.symlink(
                shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "/usr/bin/python3",
                home / ".local" / "bin" / "python",
            )
        for path in (home, tmp, *home.rglob("*")):
            os.chown(path, *self.owner, follow_symlinks=False)

    def access_token(self, sandbox_id: str) -> str:
        """The envd access token of ``sandbox_id``: an HMAC of the id, so no table is needed.

        Any id can be checked, live or not, so an envd request for an unknown id is refused
        exactly like one with a wrong token unless its token is the one this server (or one
        restarted with the same key) handed out; only then does it learn "not found".
        """
        digest = hmac.new(self._token_key, b"envd-access-token:" + sandbox_id.encode(), "sha256")
        return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")

    def get(self, sandbox_id: str) -> Sandbox:
        """The live sandbox with this id; KeyError if there is none (killed, expired or unknown)."""
        sbx = self.sandboxes.get(sandbox_id)
        if sbx is None or sbx.end_at <= time.time():
            if sbx is not None:
                self.kill(sandbox_id)
            raise KeyError(sandbox_id)
        return sbx

    def kill(self, sandbox_id: str) -> bool:
        """Kill every process of the sandbox and delete its files; False if it did not exist.

        Returns once the processes are signalled; the files are deleted by the cleanup thread
        (see ``wait_cleanups``), so a large sandbox does not hold up the server's loop.
        """
        sbx = self.sandboxes.pop(sandbox_id, None)
        if sbx is None:
            return False
        sbx.kill_processes()
        if sbx.cgroup is not None and self.cgroups is not None:
            self.cgroups.weigh(len(self.sandboxes))
        if sbx.slirp is not None:
            sbx.slirp.close()
        self.remove_later(sbx.directory)
        # Its processes die a moment after the kill: remove anything they wrote meanwhile,
        # then its cgroups (empty only once the init is reaped) and its slirp4netns.
        if sbx.spawner.exited:
            self._after_exit(sbx)
        else:
            sbx.spawner.on_exit = lambda: self._after_exit(sbx)
        return True

    def _after_exit(self, sbx: Sandbox) -> None:
        self.remove_later(sbx.directory)
        for job in (
            sbx.cgroup.remove if sbx.cgroup else None,
            sbx.slirp.reap if sbx.slirp else None,
        ):
            if job is not None:
                self._submit(job)

    def remove_later(self, directory: Path) -> None:
        """Delete ``directory`` (and all below it) on the cleanup thread."""
        self._submit(lambda: shutil.rmtree(directory, ignore_errors=True))

    def _submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the cleanup thread (here, once the thread is shut down)."""
        try:
            future = self._cleaner.submit(job)
        except RuntimeError:  # the executor was shut down (interpreter exit): do it here
            job()
            return
        with self._cleanups_lock:
            self._cleanups.add(future)
        future.add_done_callback(self._cleanup_done)

    def _cleanup_done(self, future: concurrent.futures.Future[None]) -> None:
        with self._cleanups_lock:
            self._cleanups.discard(future)

    @property
    def cleaning(self) -> int:
        """How many directory removals are queued or running."""
        with self._cleanups_lock:
            return len(self._cleanups)

    def wait_cleanups(self, timeout: float | None = None) -> bool:
        """Wait until every queued directory removal is done; False if ``timeout`` passed."""
        with self._cleanups_lock:
            pending = set(self._cleanups)
        _, not_done = concurrent.futures.wait(pending, timeout=timeout)
        return not not_done

    def reap(self) -> int:
        """Kill the sandboxes whose lifetime has ended; returns how many."""
        now = time.time()
        expired = [sid for sid, sbx in self.sandboxes.items() if sbx.end_at <= now]
        for sid in expired:
            self.kill(sid)
        return len(expired)

    async def reap_forever(self, interval: float = 0.5) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reap()

    def shutdown(self, wait_files: bool = True) -> None:
        """Kill every sandbox (server shutdown), and wait for their inits to end.

        ``wait_files``: also wait (up to two minutes) until their files are deleted; False on
        the event loop, which must stay free to close the open streams.
        """
        killed = list(self.sandboxes.values())
        for sbx in killed:
            self.kill(sbx.sandbox_id)
        for sbx in killed:
            sbx.spawner.reap(timeout=2.0)
        if wait_files:
            self.wait_cleanups(timeout=120.0)

    # -- processes -----------------------------------------------------------------------
    async def start(
        self,
        sbx: Sandbox,
        cmd: str,
        args: list[str],
        envs: dict[str, str],
        cwd: str | None,
        stdin: bool,
        tag: str | None = None,
    ) -> Process:
        """Start ``cmd args`` in the sandbox; output and exit arrive on ``Process.events``.

        InitError (an OSError) if the sandbox's init is gone or cannot start it.
        """
        cwd = cwd or SANDBOX_HOME
        tmpl = sbx.template
        home = SANDBOX_HOME if self.isolation.isolated else str(sbx.directory / "home")
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": home,
            "USER": "user",
            "LOGNAME": "user",
            "LANG": "C.UTF-8",
            "E2B_SANDBOX": "true",
            "E2B_SANDBOX_ID": sbx.sandbox_id,
            **tmpl.env,
            **sbx.envs,
            **envs,
        }
        host_cwd = cwd if self.isolation.isolated else self.isolation.host_path(sbx.directory, cwd)
        limits = self.isolation.limits(tmpl)
        if sbx.cgroup is not None and self.cgroups is not None and "pids" in self.cgroups.enforced:
            limits["nproc"] = 0  # the pids cgroup holds the whole sandbox, its init included
        return await sbx.spawner.run(
            [cmd, *args],
            env,
            str(host_cwd),
            limits,
            stdin,
            config={"cmd": cmd, "args": list(args), "envs": dict(envs), "cwd": cwd},
            tag=tag,
        )
