"""A real sandbox server on 127.0.0.1 (port 0) under bubblewrap, shared by the sandbox tests."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from twinkle.sandbox import SandboxServer, Template, TemplateRegistry

API_KEY = "test-key"


def templates() -> TemplateRegistry:
    return TemplateRegistry(
        templates={
            "net": Template(name="net", network=True),
            "small": Template(name="small", memory_mb=256, cpu_seconds=2, max_processes=48),
            # More memory than disk: filling a disk ends with ENOSPC, not the OOM killer.
            "little-disk": Template(name="little-disk", memory_mb=512, disk_mb=64),
            "with-env": Template(
                name="with-env",
                env={"TEMPLATE_VAR": "from-template"},
                setup=("echo ready > /home/user/setup.txt",),
            ),
        }
    )


@pytest.fixture(scope="session")
def server() -> Iterator[SandboxServer]:
    with SandboxServer(port=0, api_key=API_KEY, templates=templates()) as srv:
        assert srv.isolated, "these tests need bubblewrap (apt-get install bubblewrap)"
        yield srv


@pytest.fixture()
def sdk(server: SandboxServer) -> dict[str, str]:
    """Keyword arguments for e2b.Sandbox.create/connect that target the test server."""
    return server.sdk_kwargs()


def sandbox_pids(sandbox_id: str) -> list[int]:
    """Host pids of processes whose environment marks them as this sandbox's."""
    marker = f"E2B_SANDBOX_ID={sandbox_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def host_view(server: SandboxServer, sandbox_id: str) -> Path:
    """``/proc/<pid>`` of the sandbox's init on the host: its ``root`` is the sandbox's ``/``."""
    pid, _ = server.manager.sandboxes[sandbox_id].spawner.root_process()
    return Path(f"/proc/{pid}")


def wait_until(predicate, timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes (for asynchronous cleanup)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture(autouse=True)
def _no_e2b_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every test passes its connection explicitly; a developer's E2B settings must not leak in.
    for name in list(os.environ):
        if name.startswith("E2B_"):
            monkeypatch.delenv(name)
