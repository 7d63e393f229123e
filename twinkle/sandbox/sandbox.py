"""Sandboxes: create, run commands, kill, reap.

Everything here runs on the server's asyncio loop. A sandbox is a host directory (its
``home`` and ``tmp``) plus one long-lived init process (:mod:`twinkle.sandbox.processes`)
started under bubblewrap at create time; every command is forked by that init inside the
sandbox's namespaces, so commands share processes, network and files as on one machine.
Killing the init's process group collapses the sandbox's PID namespace, which removes
everything its commands started, including background and forked children.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle.sandbox.files import SandboxFiles
from twinkle.sandbox.isolation import SANDBOX_HOME, Isolation, IsolationError
from twinkle.sandbox.processes import Process, Spawner
from twinkle.sandbox.templates import Template, TemplateRegistry

#: The envd version reported to the SDK; 0.5.7 unlocks octet-stream uploads and stdin control.
ENVD_VERSION = "0.5.7"
_PROFILE = (
    'export PATH="$HOME/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
)


class SetupError(RuntimeError):
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
    ) -> None:
        self.templates = templates
        self._token_key = token_key or secrets.token_bytes(32)
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
        network = tmpl.network and allow_internet is not False
        try:
            init = self.isolation.init_argv(tmpl, directory, network)
        except IsolationError as exc:
            raise SetupError(str(exc)) from exc
        self._make_dirs(directory)
        spawner = Spawner(init, self.isolation.spawn_kwargs(), self.isolation.isolated)
        try:
            spawner.start()  # the init boots while the client gets its answer
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
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
            files=SandboxFiles(directory, self.owner, hidden=(str(self.root), "/root", "/home")),
            spawner=spawner,
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
        """Kill every process of the sandbox and delete its files; False if it did not exist."""
        sbx = self.sandboxes.pop(sandbox_id, None)
        if sbx is None:
            return False
        sbx.kill_processes()
        shutil.rmtree(sbx.directory, ignore_errors=True)
        # Its processes die a moment after the kill: remove anything they wrote meanwhile.
        sbx.spawner.on_exit = lambda: shutil.rmtree(sbx.directory, ignore_errors=True)
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
        """Kill every sandbox (server shutdown), and wait for their inits to end."""
        killed = list(self.sandboxes.values())
        for sbx in killed:
            self.kill(sbx.sandbox_id)
        for sbx in killed:
            sbx.spawner.reap(timeout=2.0)

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
        return await sbx.spawner.run(
            [cmd, *args],
            env,
            str(host_cwd),
            self.isolation.limits(tmpl),
            stdin,
            config={"cmd": cmd, "args": list(args), "envs": dict(envs), "cwd": cwd},
            tag=tag,
        )
