"""Serve an ASGI app with uvicorn on a background thread, for in-process servers.

The sandbox server, the environment container server and the OpenAI-compatible test server
all run the same way: bind first (so port 0 yields a real port before anyone connects),
serve on a daemon thread, return only once uvicorn accepts connections, stop by asking
uvicorn to exit. uvicorn rather than hand-written asyncio because it is the server every
FastAPI deployment of these apps uses anyway.

Example:
    >>> from starlette.applications import Starlette
    >>> with ThreadedServer(Starlette(), name='demo') as server:
    ...     server.url.startswith('http://127.0.0.1:')
    True
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A bound TCP socket. ``IPPROTO_TCP`` matters: asyncio only sets TCP_NODELAY on such
    sockets, and without it small responses stall ~40 ms on delayed ACKs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class ThreadedServer:
    """``app`` served by uvicorn on a daemon thread; ``config`` goes to ``uvicorn.Config``."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "twinkle-server",
        **config: Any,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        # log_config=None: uvicorn would otherwise dictConfig the whole process's logging, which
        # flushes (and can deadlock on) handlers of the host program, Prefect's API logger included.
        self.config = {"log_level": "warning", "access_log": False, "log_config": None, **config}
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 20.0) -> ThreadedServer:
        """Bind, serve, and return once connections are accepted (RuntimeError otherwise)."""
        import uvicorn

        if self._thread is not None:
            return self
        sock = bind_socket(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(self.app, **self.config))
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"{self.name}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop(timeout=1)
                sock.close()
                raise RuntimeError(f"{self.name} did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit and wait for the thread. Safe to call twice."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._server = self._thread = None

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
