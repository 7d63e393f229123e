"""Sandboxes and their processes: create, run commands, kill, reap.

Everything here runs on the server's asyncio loop. A sandbox is a host directory (its
``home`` and ``tmp``) plus the processes started in it; each command is one bubblewrap
process started with :func:`asyncio.create_subprocess_exec` in its own process group, so
killing the group and letting the command's PID namespace collapse removes everything the
command started, including background and forked children.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinkle.sandbox.files import SandboxFiles
from twinkle.sandbox.isolation import SANDBOX_HOME, Isolation
from twinkle.sandbox.templates import Template, TemplateRegistry

#: The envd version reported to the SDK; 0.5.7 unlocks octet-stream uploads and stdin control.
ENVD_VERSION = "0.5.7"
_READ_CHUNK = 64 * 1024
_PROFILE = (
    'export PATH="$HOME/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
)


class SetupError(RuntimeError):
    """A template's setup command failed while creating a sandbox."""


@dataclass(eq=False)
class Process:
    """One command running in a sandbox; its output arrives on ``events``."""

    pid: int
    proc: asyncio.subprocess.Process
    config: dict[str, Any]
    tag: str | None
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    exit_code: int | None = None
    watcher: asyncio.Task[None] | None = None

    def signal(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the command's whole process group."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def _pump(self, stream: asyncio.StreamReader, name: str) -> None:
        while chunk := await stream.read(_READ_CHUNK):
            self.events.put_nowait((name, chunk))

    async def _watch(self, on_exit: Any) -> None:
        pumps = [
            asyncio.create_task(self._pump(s, n))
            for s, n in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr"))
            if s is not None
        ]
        code = await self.proc.wait()
        # The namespace is gone with its init, so the pipes close; the wait bounds stray writers.
        await asyncio.wait(pumps, timeout=2.0)
        for task in pumps:
            task.cancel()
        self.exit_code = code
        on_exit(self)
        self.events.put_nowait(("end", code))


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
    processes: dict[int, Process] = field(default_factory=dict)

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
        for proc in list(self.processes.values()):
            proc.signal(signal.SIGKILL)


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


class SandboxManager:
    """Creates, finds, kills and reaps sandboxes under one server directory.

    Args:
        templates: the template registry.
        isolation: how commands are started (bubblewrap, or unisolated).
        root: the directory holding one sub-directory per sandbox.
        max_sandboxes: refuse to create more than this many live sandboxes.

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
    ) -> None:
        self.templates = templates
        self.isolation = isolation
        self.root = root
        self.max_sandboxes = max_sandboxes
        self.sandboxes: dict[str, Sandbox] = {}
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
        self._make_dirs(directory)
        now = time.time()
        sbx = Sandbox(
            sandbox_id=sandbox_id,
            template=tmpl,
            directory=directory,
            access_token=secrets.token_urlsafe(24),
            envs=dict(envs),
            metadata=dict(metadata),
            network=tmpl.network and allow_internet is not False,
            started_at=now,
            end_at=now + timeout,
            files=SandboxFiles(directory, self.owner, hidden=(str(self.root), "/root", "/home")),
        )
        self.sandboxes[sandbox_id] = sbx
        try:
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
        while (event := await proc.events.get())[0] != "end":
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
        (home / ".profile").write_text(_PROFILE)
        if not self._has_python:  # hosts with python3 only: give the sandbox a `python`
            (home / ".local" / "bin").mkdir(parents=True)
            os.symlink(
                shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "/usr/bin/python3",
                home / ".local" / "bin" / "python",
            )
        for path in (home, tmp, *home.rglob("*")):
            os.chown(path, *self.owner, follow_symlinks=False)

    def get(self, sandbox_id: str) -> Sandbox:
        """The live sandbox with this id; KeyError if there is none (killed, expired or unknown)."""
        sbx = self.sandboxes.get(sandbox_id)
        if sbx is None or sbx.end_at <= time.time():
            if sbx is not None:
                self.kill(sandbox_id)
            raise KeyError(sandbox_id)
        return sbx

    def kill(self, sandbox_id: str) -> bool:
        """Kill every process of the sandbox and delete its files; False if it did not exist."""
        sbx = self.sandboxes.pop(sandbox_id, None)
        if sbx is None:
            return False
        sbx.kill_processes()
        shutil.rmtree(sbx.directory, ignore_errors=True)
        return True

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

    def shutdown(self) -> None:
        """Kill every sandbox (server shutdown)."""
        for sid in list(self.sandboxes):
            self.kill(sid)

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
        """Start ``cmd args`` in the sandbox; output and exit arrive on ``Process.events``."""
        cwd = cwd or SANDBOX_HOME
        tmpl = sbx.template
        if sbx.network != tmpl.network:
            from dataclasses import replace

            tmpl = replace(tmpl, network=sbx.network)
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
        argv = self.isolation.argv(tmpl, sbx.directory, cmd, args, cwd)
        host_cwd = None if self.isolation.isolated else self.isolation.host_path(sbx.directory, cwd)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=host_cwd,
            start_new_session=True,
            **self.isolation.spawn_kwargs(),
        )
        process = Process(
            pid=proc.pid,
            proc=proc,
            tag=tag,
            config={"cmd": cmd, "args": list(args), "envs": dict(envs), "cwd": cwd},
        )
        sbx.processes[proc.pid] = process
        process.watcher = asyncio.create_task(
            process._watch(lambda p: sbx.processes.pop(p.pid, None))
        )
        return process
