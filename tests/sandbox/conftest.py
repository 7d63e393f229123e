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
