"""The sandbox API a rollout talks to: a given URL, or a local server in a child process.

``sandbox_endpoint`` yields a ``SandboxEndpoint``: called, it gives ``{'api_url', 'api_key'}``
(or ``{'error'}`` when no server could be had), waiting for a local server started with the
block if it is not up yet; ``release()`` lets a local server shut down early while the caller
goes on (logging results, say); the block's end stops it.

The local server is ``twinkle sandbox serve`` in a child process rather than
``SandboxServer`` in this one: its request handling then does not share the GIL with the
rollout's event loop, its start-up overlaps whatever the caller does first (curation), and
starting uvicorn in the caller's process would reconfigure the caller's logging (under
Prefect: a flush of Prefect's API log handler under logging's global lock, a 5 s stall,
and seen deadlocked against Prefect's event threads).

Example:
    >>> with sandbox_endpoint(api_url='http://127.0.0.1:9', api_key='k') as endpoint:
    ...     endpoint()
    {'api_url': 'http://127.0.0.1:9', 'api_key': 'k'}
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["LocalSandboxServer", "SandboxEndpoint", "sandbox_endpoint"]


class LocalSandboxServer:
    """``twinkle sandbox serve`` in a child process, started now and waited for on first use.

    Example:
        >>> server = LocalSandboxServer()  # doctest: +SKIP
        >>> server.endpoint()['api_url']  # doctest: +SKIP
        'http://127.0.0.1:41234'
        >>> server.stop()  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.api_key = secrets.token_urlsafe(24)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from twinkle.cli import main; main()",
                "sandbox",
                "serve",
                "--port",
                "0",
                # It stops when this process dies, even by SIGKILL (no orphaned sandboxes).
                "--parent-pid",
                str(os.getpid()),
            ],
            env={**os.environ, "E2B_API_KEY": self.api_key},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._endpoint: dict[str, Any] | None = None

    def endpoint(self, timeout: float = 120.0) -> dict[str, Any]:
        """``{'api_url', 'api_key'}`` once the server accepts connections, else ``{'error'}``."""
        import select

        if self._endpoint is None:
            # poll, not select: a long-lived process (a Prefect worker) may hold descriptors
            # numbered past 1024, which select refuses.
            poller = select.poll()
            poller.register(self.proc.stdout, select.POLLIN)
            ready = poller.poll(timeout * 1000)
            url = self.proc.stdout.readline().strip() if ready else ""
            if url.startswith("http"):
                self._endpoint = {"api_url": url, "api_key": self.api_key}
            else:
                self.stop()
                why = (self.proc.stderr.read() or "").strip().splitlines()[-1:] or [
                    f"no URL within {timeout:.0f} s"
                ]
                self._endpoint = {"error": f"local sandbox server unavailable: {why[0]}"}
        return self._endpoint

    def release(self) -> None:
        """Ask the server to stop (SIGTERM) without waiting: it kills its sandboxes and removes
        their files while the caller goes on; ``stop`` then finds it gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop the server and wait for it (killed after 15 s)."""
        self.release()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SandboxEndpoint:
    """The sandbox API of a run: call it for ``{'api_url', 'api_key'}`` (or ``{'error'}``),
    waiting for a local server started with the run if it is not up yet; ``release()`` once
    no sandbox is needed any more lets a local server shut down while the run goes on.

    Example:
        >>> SandboxEndpoint({'api_url': 'http://127.0.0.1:9', 'api_key': 'k'})()['api_url']
        'http://127.0.0.1:9'
    """

    def __init__(
        self, fixed: dict[str, Any] | None = None, server: LocalSandboxServer | None = None
    ) -> None:
        self._fixed, self._server = fixed, server

    def __call__(self) -> dict[str, Any]:
        return self._fixed if self._server is None else self._server.endpoint()

    @property
    def local(self) -> bool:
        """True when the run started its own server (nothing to check before it is up)."""
        return self._server is not None

    def release(self) -> None:
        if self._server is not None:
            self._server.release()


@contextlib.contextmanager
def sandbox_endpoint(
    api_url: str | None = None, api_key: str | None = None, api_key_env: str = "E2B_API_KEY"
) -> Iterator[SandboxEndpoint]:
    """The sandbox API for the block: ``api_url``, else ``E2B_API_URL``, else a local sandbox
    server started in a child process and stopped at the block's end. Open it first: the
    server starts while the caller does other work.

    Args:
        api_url: an E2B-compatible API (local sandbox server, AgentENV, E2B).
        api_key: its key; default: the value of ``api_key_env``, else ``'local'``.
        api_key_env: the environment variable holding the key.
    """
    api_url = api_url or os.environ.get("E2B_API_URL")
    if api_url:
        key = api_key or os.environ.get(api_key_env) or "local"
        yield SandboxEndpoint({"api_url": api_url, "api_key": key})
        return
    server = LocalSandboxServer()
    try:
        yield SandboxEndpoint(server=server)
    finally:
        server.stop()
