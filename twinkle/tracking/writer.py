"""``TraceWriterProcess``: MLflow trace writing in a helper process, off the caller's GIL.

Writing a trace is CPU-bound SQLAlchemy work (~15 ms per trace on SQLite). Done in the
process that runs rollouts, it holds the GIL while other trajectories wait on sandboxes
and the model; in a helper process it runs on another core. The helper is a plain
``python -m twinkle.tracking.writer`` subprocess speaking pickled requests over its
stdin/stdout (standard library ``subprocess`` + ``pickle``): unlike ``multiprocessing``
with spawn, it never re-imports the caller's ``__main__``, so a script without a
``__main__`` guard cannot run twice. If the helper cannot start or dies, ``write`` falls
back to writing in-process, so traces are never lost to the optimisation.

Example:
    >>> proc = TraceWriterProcess()                                              # doctest: +SKIP
    >>> proc.write(uri, exp_id, 'session-1', trajectories, rewards, keys=None)   # doctest: +SKIP
    {'written': 2, 'existing': 0, 'unsampled': 0, 'spans': 9, 'seconds': 0.04}
    >>> proc.close()                                                             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import pickle
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO

logger = logging.getLogger("twinkle.tracking")


def _send(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">Q", len(data)) + data)
    stream.flush()


def _recv(stream: BinaryIO) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("trace writer process closed its pipe")
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))


class TraceWriterProcess:
    """A helper process that runs ``write_trace_batch`` calls one at a time (thread-safe).

    Args:
        python: interpreter for the helper (default: this one).

    Example:
        >>> with TraceWriterProcess() as proc:                                        # doctest: +SKIP
        ...     report = proc.write('sqlite:////tmp/m.db', '1', 's', trajectories)
    """

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._broken = False

    def start(self) -> TraceWriterProcess:
        """Start the helper (it imports MLflow right away, in parallel with the caller's work)."""
        with self._lock:
            self._ensure()
        return self

    def _ensure(self) -> subprocess.Popen[bytes] | None:
        if self._broken:
            return None
        if self._proc is None or self._proc.poll() is not None:
            try:
                self._proc = subprocess.Popen([self.python, "-m", "twinkle.tracking.writer"],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            except OSError as exc:
                logger.warning("trace writer process unavailable (%s); writing in-process", exc)
                self._broken = True
                return None
        return self._proc

    def write(self, tracking_uri: str, experiment_id: str, session: str, trajectories: Any,
              rewards: Any = None, keys: Any = None, **writer_kwargs: Any) -> dict[str, Any]:
        """Write one batch of traces; returns ``write_trace_batch``'s report."""
        from twinkle.tracking.traces import write_trace_batch

        args = (tracking_uri, experiment_id, session, list(trajectories), rewards, keys)
        with self._lock:
            proc = self._ensure()
            if proc is not None:
                try:
                    _send(proc.stdin, (args, writer_kwargs))
                    ok, value = _recv(proc.stdout)
                except (OSError, EOFError, pickle.PickleError) as exc:
                    logger.warning("trace writer process failed (%s); writing in-process", exc)
                    self._broken = True
                else:
                    if ok:
                        return value
                    raise RuntimeError(f"trace writer process: {value}")
        return write_trace_batch(*args, **writer_kwargs)

    def close(self) -> None:
        """Stop the helper (closing its stdin ends its loop)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> TraceWriterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    """The helper's loop: read a request, write the traces, answer ``(ok, report | error)``."""
    from twinkle.tracking.traces import warm_up, write_trace_batch

    warm_up()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the answer pipe
    while True:
        try:
            args, kwargs = _recv(stdin)
        except EOFError:
            return
        try:
            answer = (True, write_trace_batch(*args, **kwargs))
        except Exception as exc:  # reported to the caller, whose task retries
            answer = (False, f"{type(exc).__name__}: {exc}")
        _send(stdout, answer)


if __name__ == "__main__":
    main()
