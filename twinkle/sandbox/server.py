"""``SandboxServer``: the local E2B-compatible server, run by uvicorn in a background thread.

uvicorn serves the ASGI app on one loopback port; the thread owns the event loop that all
sandbox processes belong to. ``stop()`` (or leaving the ``with`` block) shuts uvicorn down,
which kills every sandbox's process group and deletes its files; an ``atexit`` hook does
the same if the interpreter exits first.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from secrets import token_hex
from typing import Any

from twinkle.sandbox.app import SandboxApp
from twinkle.sandbox.isolation import ETC_PROFILE, Isolation, IsolationError, find_bwrap
from twinkle.sandbox.sandbox import SandboxManager
from twinkle.sandbox.templates import TemplateRegistry
from twinkle.utils.serving import ThreadedServer


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

    Raises:
        IsolationError: bubblewrap is not usable and ``unisolated`` is False.

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
    ) -> None:
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
        self.root = Path(root or Path(tempfile.gettempdir(), f"twinkle-sandboxes-{token_hex(6)}"))
        bwrap, drop = found if found is not None else (None, False)
        self.isolation = Isolation(bwrap=bwrap, server_root=self.root, drop_privileges=drop)
        self.manager = SandboxManager(
            self.templates,
            self.isolation,
            self.root,
            max_sandboxes=max_sandboxes,
            token_key=self.api_key.encode(),
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

    def start(self, timeout: float = 30.0) -> SandboxServer:
        """Create the sandbox root, bind, serve in a daemon thread; returns once it accepts."""
        if self._http is not None:
            return self
        try:
            self._serve(timeout)
        except BaseException:
            self.stop()  # leaves no directory or thread behind
            raise
        return self

    def _serve(self, timeout: float) -> None:
        self.root.mkdir(parents=True, exist_ok=not self._own_root)
        os.chmod(self.root, 0o711)  # sandboxes running as another uid must reach their own dirs
        self.isolation.check_root()
        (self.root / ".etc-profile").write_text(ETC_PROFILE)
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
            loop.call_soon_threadsafe(lambda: (self.manager.shutdown(), done.set()))
            done.wait(timeout)
        if self._http is not None:
            self._http.stop(timeout)
            self._http = None
        self.manager.shutdown()  # also covers a loop that died without its shutdown hook
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)

    def serve_forever(self) -> None:
        """Start and block until interrupted (the CLI's ``twinkle sandbox serve``)."""
        self.start()
        try:
            while self._http is not None and self._http.running:
                time.sleep(0.5)
        finally:
            self.stop()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
