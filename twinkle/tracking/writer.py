"""``TraceWriterProcess``: MLflow trace writing and chart drawing in a helper process, off
the caller's GIL.

Writing a trace is CPU-bound SQLAlchemy work (a few ms per trace on SQLite), and drawing a
chart imports matplotlib (~0.5 s) and renders it (~0.1 s). Done in the process that runs
rollouts, both hold the GIL while other trajectories wait on sandboxes and the model; in a
helper process they run on another core, at a lower priority. The helper is a plain
``python -c`` subprocess running ``main`` speaking pickled requests over its
stdin/stdout (standard library ``subprocess`` + ``pickle``): unlike ``multiprocessing``
with spawn, it never re-imports the caller's ``__main__``, so a script without a
``__main__`` guard cannot run twice. If the helper cannot start or dies, each call falls
back to running in-process, so neither traces nor charts are lost to the optimisation.

Example:
    >>> proc = TraceWriterProcess()                                              # doctest: +SKIP
    >>> proc.write(uri, exp_id, 'session-1', trajectories, rewards, keys=None)   # doctest: +SKIP
    {'written': 2, 'existing': 0, 'unsampled': 0, 'spans': 9, 'seconds': 0.04}
    >>> proc.chart('reward_histogram', {'total': [1.0, 0.0]}, '/tmp/r.png')     # doctest: +SKIP
    '/tmp/r.png'
    >>> proc.close()                                                             # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
import zlib
from typing import Any, BinaryIO

from twinkle.tracking.spans import sampled

logger = logging.getLogger("twinkle.tracking")
#: Set in a helper's environment when it should lower its priority before its imports.
_NICE_FIRST = "TWINKLE_TRACE_WRITER_NICE_FIRST"


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
    """A helper process that runs ``write_trace_batch`` and ``render_chart`` calls one at a
    time (thread-safe).

    Args:
        python: interpreter for the helper (default: this one).
        nice_first: lower the helper's priority before its imports, not after (a helper
            that is not needed at once then takes only idle CPU to start).

    Example:
        >>> with TraceWriterProcess() as proc:  # doctest: +SKIP
        ...     report = proc.write('sqlite:////tmp/m.db', '1', 's', trajectories)
    """

    def __init__(self, python: str | None = None, *, nice_first: bool = False) -> None:
        self.python = python or sys.executable
        self.nice_first = nice_first
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
                # ``-c`` rather than ``-m``: the package imports this module first, and runpy
                # warns when it is then run as __main__.
                self._proc = subprocess.Popen(
                    [self.python, "-c", "from twinkle.tracking.writer import main; main()"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env={**os.environ, _NICE_FIRST: "1"} if self.nice_first else None,
                )
            except OSError as exc:
                logger.warning("trace writer process unavailable (%s); writing in-process", exc)
                self._broken = True
                return None
        return self._proc

    def write(
        self,
        tracking_uri: str,
        experiment_id: str,
        session: str,
        trajectories: Any,
        rewards: Any = None,
        keys: Any = None,
        **writer_kwargs: Any,
    ) -> dict[str, Any]:
        """Write one batch of traces; returns ``write_trace_batch``'s report."""
        return self._call(
            "write",
            (tracking_uri, experiment_id, session, list(trajectories), rewards, keys),
            writer_kwargs,
        )

    def chart(self, kind: str, data: Any, path: str) -> str:
        """Draw chart ``kind`` of ``data`` to ``path`` (``plots.render_chart``); returns
        ``path``."""
        return self._call("chart", (kind, data, path), {})

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self._lock:
            proc = self._ensure()
            if proc is not None:
                try:
                    _send(proc.stdin, (name, args, kwargs))
                    ok, value = _recv(proc.stdout)
                except (OSError, EOFError, pickle.PickleError) as exc:
                    logger.warning("tracking helper process failed (%s); running in-process", exc)
                    self._broken = True
                else:
                    if ok:
                        return value
                    raise RuntimeError(f"tracking helper process: {value}")
        return _calls()[name](*args, **kwargs)

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


class TraceStream:
    """Traces trajectories while a rollout still runs: ``put`` each one as it finishes.

    A background thread per writer gathers what arrives into batches (``batch_size``, or
    whatever came within ``max_wait_s``) and hands each batch to its writer (a
    ``TraceWriterProcess``), so the rollout never waits on MLflow and trace writing
    overlaps it instead of following it. ``close`` flushes the rest and returns the summed
    report; a batch that failed raises there (the caller's task retries; trace keys keep
    retries idempotent).

    Why more than one writer: trajectories rolled out at high concurrency finish together,
    so the last wave's traces are written after the rollout ends, while its process sits
    idle (``tail_s``). MLflow's store costs ~20 ms of CPU per trace, all of it in the
    writer; two writer processes split that last wave over both cores (SQLite serialises
    only the commits, not the SQLAlchemy work around them). Each trace key always goes to
    the same writer (a stable hash of the key): a writer skips the keys it knows are
    stored, and it knows those it wrote itself, not those another process wrote after
    it last searched the store, so a retry must reach the writer that wrote the key.

    Args:
        writer: ``TraceWriterProcess`` (or anything with its ``write`` signature), or a
            sequence of them: one queue and batching thread each, keys spread by hash.
        tracking_uri, experiment_id, session: where the traces go (see ``TraceWriter``).
        batch_size: trajectories per write at most.
        max_wait_s: how long a finished trajectory waits for its batch to fill.
        writer_kwargs: ``TraceWriter`` options (``run_id``, ``dataset``, ``sample_rate``...).

    Example:
        >>> proc = TraceWriterProcess().start()  # doctest: +SKIP
        >>> stream = TraceStream(proc, uri, exp_id, 'run-7')  # doctest: +SKIP
        >>> stream.put(trajectory, {'total': 1.0}, key='0:conv-0')  # doctest: +SKIP
        >>> stream.close()['written']  # doctest: +SKIP
        1
    """

    def __init__(
        self,
        writer: Any,
        tracking_uri: str,
        experiment_id: str,
        session: str,
        *,
        batch_size: int = 32,
        max_wait_s: float = 1.0,
        **writer_kwargs: Any,
    ) -> None:
        writers = list(writer) if isinstance(writer, (list, tuple)) else [writer]
        if not writers:
            raise ValueError("TraceStream needs at least one writer")
        self._target = (tracking_uri, experiment_id, session)
        self._kwargs = writer_kwargs
        self._sample_rate = writer_kwargs.get("sample_rate", 1.0)
        self.batch_size, self.max_wait_s = max(1, batch_size), max_wait_s
        self._queues: list[queue.Queue[Any]] = [queue.Queue() for _ in writers]
        self.report = {"written": 0, "existing": 0, "unsampled": 0, "spans": 0, "seconds": 0.0}
        self._report_lock = threading.Lock()
        self._error: BaseException | None = None
        self._threads = [
            threading.Thread(
                target=self._loop, args=(w, q), name=f"twinkle-trace-stream-{k}", daemon=True
            )
            for k, (w, q) in enumerate(zip(writers, self._queues))
        ]
        for thread in self._threads:
            thread.start()

    def put(self, trajectory: Any, rewards: Any, key: str) -> None:
        """Queue one finished trajectory (with its rewards, recorded as trace feedback). One
        the sample rate leaves out is counted here, never pickled to a writer: the writer
        would make the same choice (``sampled`` hashes the session and the key)."""
        rate = self._sample_rate
        if rate < 1.0 and not sampled(f"{self._target[2]}/{key}", rate):
            with self._report_lock:
                self.report["unsampled"] += 1
            return
        lane = zlib.crc32(key.encode()) % len(self._queues) if len(self._queues) > 1 else 0
        self._queues[lane].put((trajectory, rewards, key))

    def _loop(self, writer: Any, lane: queue.Queue[Any]) -> None:
        done = False
        while not done:
            batch = [lane.get()]
            deadline = time.monotonic() + self.max_wait_s
            while len(batch) < self.batch_size and batch[-1] is not None:  # close() flushes at once
                try:
                    batch.append(lane.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            if batch[-1] is None:
                batch.pop()
                done = True
            if batch and self._error is None:
                try:
                    got = writer.write(
                        *self._target,
                        [b[0] for b in batch],
                        [b[1] for b in batch],
                        [b[2] for b in batch],
                        **self._kwargs,
                    )
                except Exception as exc:  # noqa: BLE001 - close() re-raises it to the caller
                    self._error = exc
                else:
                    with self._report_lock:
                        for k in self.report:
                            self.report[k] += got.get(k, 0)

    def close(self) -> dict[str, Any]:
        """Write what is still queued, stop the thread, return the summed report, with
        ``tail_s``: how long this call waited for the writer (tracing's cost after the last
        trajectory, what the caller sees of it)."""
        started = time.perf_counter()
        for lane in self._queues:  # the end mark: each thread flushes its batch and stops
            lane.put(None)
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise self._error
        return {**self.report, "tail_s": time.perf_counter() - started}


#: MLflow's background trace export in the helper (documented settings): spans of a whole
#: batch in one ``log_spans`` call rather than 5 at a time, sent 50 ms after they end rather
#: than 5 s (a batch waits for its traces: see ``traces.HELPER_PROCESS``), by one export
#: thread rather than ten, which on a SQLite store only wait on each other's write lock
#: (measured: 14 ms per trace record with one thread, 44 ms with two).
HELPER_MLFLOW_SETTINGS = {
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "512",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_INTERVAL_MILLIS": "50",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS": "1",
}


def _calls() -> dict[str, Any]:
    """What a request may name: the helper runs these and nothing else."""
    from twinkle.tracking.plots import render_chart
    from twinkle.tracking.traces import write_trace_batch

    return {"write": write_trace_batch, "chart": render_chart}


def _lower_priority() -> None:
    with contextlib.suppress(OSError, ValueError):
        os.nice(int(os.environ.get("TWINKLE_TRACE_WRITER_NICE", "10")))


def main() -> None:
    """The helper's loop: read a request, run it, answer ``(ok, result | error)``."""
    for name, value in HELPER_MLFLOW_SETTINGS.items():  # the user's own values win
        os.environ.setdefault(name, value)
    from twinkle.tracking import plots, traces
    from twinkle.tracking.traces import warm_up

    traces.HELPER_PROCESS = True  # one store, MLflow's export tuned for it: see there

    # Imports first, at normal priority: the helper starts with the flow, and curation leaves
    # a core idle, so they are done before the rollout (at a low priority they crawled into it,
    # and the first traces then waited). Then tracing is background work: at a lower priority
    # the helper takes the CPU the rollout leaves idle instead of competing with it
    # (``TWINKLE_TRACE_WRITER_NICE``, default 10: on a machine busy with other work a niced
    # helper falls behind, 0 keeps it level with the rest).
    nice_first = os.environ.get(_NICE_FIRST) == "1"
    if nice_first:
        _lower_priority()
    warm_up()
    with contextlib.suppress(
        ImportError
    ):  # charts are drawn here too; a missing matplotlib says so later
        plots.warm_up()
    if not nice_first:
        _lower_priority()
    calls = _calls()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the answer pipe
    while True:
        try:
            name, args, kwargs = _recv(stdin)
        except EOFError:
            return
        try:
            answer = (True, calls[name](*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, whose task retries
            answer = (False, f"{type(exc).__name__}: {exc}")
        _send(stdout, answer)


if __name__ == "__main__":
    main()
