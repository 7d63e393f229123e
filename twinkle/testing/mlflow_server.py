"""A lean local MLflow tracking server (``mlflow server``) for tests and benchmarks.

The real server, started the way ``infra/mlflow/`` starts it for review: one worker, no job
runner (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``), on 127.0.0.1 and a free port, over a
SQLite store. It serves MLflow's REST API and its OTLP trace endpoint (``/v1/traces``), so
``http://`` tracking code paths (``twinkle.tracking.otlp``) run against the real thing.
Standard library only (``subprocess`` + ``urllib``): the server is a separate process, as a
user runs it.

Example:
    >>> store, artifacts = f"sqlite:///{tmp}/m.db", f"{tmp}/art"  # doctest: +SKIP
    >>> with MLflowServer(store, artifacts) as server:  # doctest: +SKIP
    ...     mlflow.set_tracking_uri(server.uri)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Self

__all__ = ["MLflowServer"]


class MLflowServer:
    """``mlflow server`` in a child process, ready (``/health`` answers) when entered.

    Args:
        backend_store_uri: the store (``sqlite:////abs/mlflow.db``).
        artifact_root: where new experiments keep artifacts.
        startup_timeout_s: how long to wait for ``/health``.
    """

    def __init__(
        self, backend_store_uri: str, artifact_root: str, startup_timeout_s: float = 120.0
    ) -> None:
        self.backend_store_uri = backend_store_uri
        self.artifact_root = artifact_root
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        """The tracking URI (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        mlflow_cli = str(Path(sys.executable).with_name("mlflow"))
        # Quiet unless it fails: its output goes to a file shown in the error.
        self._log = Path(self.artifact_root).with_suffix(".server.log")
        self._log.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                [mlflow_cli, "server", "--backend-store-uri", self.backend_store_uri]
                + ["--default-artifact-root", self.artifact_root, "--workers", "1"]
                + ["--host", "127.0.0.1", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends its children too
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                    return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    tail = self._log.read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(
                        f"mlflow server did not start at {self.uri}:\n{tail}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)  # the CLI and its uvicorn worker
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
