"""One MLflow trace per trajectory: an AGENT root span, LLM spans per model call, TOOL spans per
tool call.

MLflow (imported lazily) is the tracing backend; the MLflow UI shows each trace as a tree
with inputs, outputs, timings, tags, and each reward as a feedback assessment (with its
rationale: the scoring outcome, the extracted answer, why a reward is missing), and groups
the traces of one flow run into a session (trace metadata ``mlflow.trace.session``).

Only MLflow's public APIs are used, so MLflow can be upgraded freely. Into a store (a
``sqlite:`` file): ``mlflow.start_span_no_context`` builds each trace's span tree with the
timings the rollout recorded (``start_time_ns``/``end_time_ns``), tags and metadata on the
root span, MLflow exports it in the background (its batch span processor and async export
queue), and the batch waits until it is stored. Into an MLflow server (``http(s)://``):
the batch goes as one request to the server's documented OTLP endpoint
(``twinkle.tracking.otlp``), stored when it is answered, at about a third of the server's
work per trace. Then one ``mlflow.log_feedback`` per reward. twinkle runs this in a helper
process (``twinkle.tracking.writer``) so it never shares the rollout's GIL. MLflow's
tracking URI is process-global: a batch sets it for its duration (and restores it, outside
the helper), one batch at a time per process.

Guarantees:
* secrets are scrubbed from every payload, tag and attribute (``scrub_secrets``);
* ``sample_rate`` keeps a deterministic share of trajectories (hash of the trace key, so a
  retried task makes the same choice), ``max_spans`` and ``max_payload_chars`` /
  ``max_trace_chars`` bound a trace's size; an LLM span's inputs are the messages the model
  was sent, the most recent that fit the payload cap (``omitted_messages`` counts the rest);
* idempotent: each trace carries its session and trajectory key as tags, and keys already
  stored for the session are skipped, so a retried task never duplicates one.

The span tree of a trajectory comes from ``twinkle.tracking.spans`` (timings from the
rollout's ``turn_log``), its payloads are scrubbed and capped by ``twinkle.tracking.payloads``
and its rewards become feedback through ``twinkle.tracking.feedback``; the names those
modules export that callers use are importable from here too.

Example:
    >>> writer = TraceWriter('sqlite:////tmp/mlflow.db', experiment_id='1', session='run-1',
    ...                      dataset='examples')                      # doctest: +SKIP
    >>> writer.write(trajectories, rewards=[{'fidelity': 1.0}, ...])  # doctest: +SKIP
    TraceReport(written=2, skipped_existing=0, unsampled=0, trace_ids=[...])
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinkle.tracking import otlp
from twinkle.tracking.feedback import log_feedback, rationale, summarize_rewards
from twinkle.tracking.scrub import scrub_secrets, scrub_text
from twinkle.tracking.spans import SpanRecord, build_spans, is_failed, sampled, trajectory_key

__all__ = [
    "HELPER_PROCESS",
    "STORE_TIMEOUT_S",
    "SpanRecord",
    "TraceReport",
    "TraceWriter",
    "build_spans",
    "is_failed",
    "rationale",
    "sampled",
    "summarize_rewards",
    "trajectory_key",
    "warm_up",
    "write_trace_batch",
]


# One batch at a time per process: MLflow's tracing destination (the tracking URI) is global.
_WRITE_LOCK = threading.Lock()
_LOCKS_GUARD = threading.Lock()
#: Trace keys known per (tracking URI, experiment, session) in this process; see write_trace_batch.
_KNOWN_KEYS: dict[tuple[str, str, str], set[str]] = {}
#: Servers found to have no OTLP endpoint: their traces go through MLflow's client instead.
_NO_OTLP: set[str] = set()
logger = logging.getLogger("twinkle.tracking")
#: Set in the trace writer's helper process (``twinkle.tracking.writer``), which traces to
#: one store with MLflow's export tuned for it: the tracking URI a batch sets is kept, not
#: restored (restoring resets MLflow's tracer each batch), and a batch waits for its traces
#: by looking them up rather than through ``mlflow.flush_trace_async_logging`` (whose export
#: queue takes 1-2 s to stop and restart, per batch).
HELPER_PROCESS = False
#: How long a batch waits for MLflow's background export to store its traces.
STORE_TIMEOUT_S = 120.0


@dataclass(slots=True)
class TraceReport:
    """What one ``TraceWriter.write`` call did; ``trace_ids`` aligns with its input (the MLflow
    trace id; None = not written by this call: not sampled, or already there)."""

    written: int = 0
    skipped_existing: int = 0
    unsampled: int = 0
    spans: int = 0
    seconds: float = 0.0
    trace_ids: list[str | None] = field(default_factory=list)


class TraceWriter:
    """Writes trajectories as MLflow traces, with rewards as feedback, grouped in a session.

    Args:
        tracking_uri: MLflow tracking URI (``sqlite:////abs/mlflow.db`` or ``http://...``).
        experiment_id: experiment that holds the traces.
        session: groups the traces of one flow run (``mlflow.trace.session``); with the
            trajectory key, a trace's identity, so the same session never gets a trace twice.
        run_id: MLflow run the traces are linked to (shown in the run's Traces tab).
        dataset: value of the ``dataset`` tag on every trace.
        sample_rate: share of trajectories traced (deterministic per trajectory key).
        max_spans: spans per trace, root included; later spans are counted, not written.
        max_payload_chars: characters kept per span input or output.
        max_trace_chars: characters kept over all payloads of one trace.
        transport: ``otlp`` (one request per batch to an MLflow server's OTLP endpoint, see
            ``twinkle.tracking.otlp``; the default for an ``http(s)`` URI, unless
            ``TWINKLE_TRACE_TRANSPORT=store``) or ``store`` (MLflow's client export).

    Example:
        >>> w = TraceWriter(uri, experiment_id=eid, session='flow-run-42',  # doctest: +SKIP
        ...                 dataset='examples')
        >>> rewards = [{'fidelity': 1.0, 'total': 1.0}]
        >>> report = w.write(trajectories, rewards=rewards)  # doctest: +SKIP
        >>> report.written, report.trace_ids[0]  # doctest: +SKIP
        (1, 'tr-5d41402abc4b2a76b9719d911017c592')
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment_id: str,
        session: str,
        *,
        run_id: str | None = None,
        dataset: str | None = None,
        sample_rate: float = 1.0,
        max_spans: int = 64,
        max_payload_chars: int = 4000,
        max_trace_chars: int = 64000,
        transport: str | None = None,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be within [0, 1], got {sample_rate!r}")
        if max_spans < 1:
            raise ValueError(f"max_spans must be >= 1, got {max_spans!r}")
        if not session:
            raise ValueError("session must be a non-empty string (the flow run's identity)")
        self.tracking_uri = tracking_uri
        self.experiment_id = str(experiment_id)
        self.session = session
        self.run_id = run_id
        self.dataset = dataset
        self.sample_rate = sample_rate
        self.max_spans = max_spans
        self.max_payload_chars = max_payload_chars
        self.max_trace_chars = max_trace_chars
        #: ``otlp``: spans to the server's OTLP endpoint, stored once (``twinkle.tracking.otlp``)
        self.transport = transport or otlp.transport_for(tracking_uri)
        if self.transport not in (otlp.OTLP, otlp.STORE):
            raise ValueError(f"transport must be 'otlp' or 'store', got {self.transport!r}")
        if self.transport == otlp.OTLP and not tracking_uri.startswith(("http://", "https://")):
            raise ValueError("the otlp transport sends to an MLflow server: give its http(s) URI")

    def existing_keys(self) -> set[str]:
        """Trajectory keys this session already traced (one search query)."""
        from mlflow import MlflowClient

        client = MlflowClient(self.tracking_uri)
        found: set[str] = set()
        page_token = None
        while True:
            page = client.search_traces(
                locations=[self.experiment_id],
                filter_string=f"tag.`twinkle.session` = '{_quote(self.session)}'",
                include_spans=False,
                max_results=500,
                page_token=page_token,
            )
            found.update(t.info.tags.get("twinkle.trace_key", "") for t in page)
            page_token = getattr(page, "token", None)
            if not page_token:
                return found

    def write(
        self,
        trajectories: Sequence[Mapping[str, Any]],
        rewards: Sequence[Mapping[str, Any] | None] | None = None,
        keys: Sequence[str] | None = None,
        existing: set[str] | None = None,
    ) -> TraceReport:
        """Trace each trajectory once; ``rewards[i]`` maps reward name -> value (or None).

        ``existing``: keys this session is known to hold already (skips the search query,
        which grows with the session); updated in place with the keys written here, so a
        caller streaming batches keeps one set instead of searching per batch.
        ``TraceReport.trace_ids``: the MLflow id of each trace written here (None: not
        sampled, or already there).
        """
        started = time.perf_counter()
        report = TraceReport()
        if existing is None:
            existing = self.existing_keys()
        pending: list[_Pending] = []
        slots: list[int] = []
        seen: set[str] = set()
        for i, traj in enumerate(trajectories):
            key = keys[i] if keys is not None else trajectory_key(traj, i)
            if key in seen:  # repeated ids in one batch: the position keeps keys unique and stable
                key = f"{key}~{i}"
            seen.add(key)
            report.trace_ids.append(None)
            if not sampled(f"{self.session}/{key}", self.sample_rate):
                report.unsampled += 1
                continue
            if key in existing:
                report.skipped_existing += 1
                continue
            spans = build_spans(
                traj,
                max_spans=self.max_spans,
                max_payload_chars=self.max_payload_chars,
                max_trace_chars=self.max_trace_chars,
            )
            reward = dict(rewards[i] or {}) if rewards is not None and i < len(rewards) else {}
            pending.append(_Pending(key, traj, spans, reward))
            slots.append(i)
            report.spans += len(spans)
        with _WRITE_LOCK:
            trace_ids = self._store(pending)
        for i, trace_id in zip(slots, trace_ids):
            report.trace_ids[i] = trace_id
        existing.update(p.key for p in pending)  # only once stored: a failed batch is retried
        report.written = len(pending)
        report.seconds = time.perf_counter() - started
        return report

    # -- what a trace carries ----------------------------------------------------------
    def _tags(self, p: _Pending, batch: str) -> dict[str, str]:
        traj = p.trajectory
        tags = {
            "twinkle.session": self.session,
            "twinkle.trace_key": p.key,
            "row_id": _row_id(traj, p.key),
            "status": "failed" if is_failed(traj) else "ok",
            "stop_reason": str(traj.get("stop_reason")),
        }
        if self.dataset:
            tags["dataset"] = self.dataset
        if traj.get("error"):
            tags["error"] = str(traj["error"])[:500]
        for name, value in p.reward.items():
            tags[f"reward.{name}"] = "null" if value is None else str(value)
        # Values only: names like ``twinkle.trace_key`` are twinkle's own, not secrets; the
        # batch id (a uuid, searched for as it is) is added after.
        return {**{k: scrub_text(v) for k, v in tags.items()}, "twinkle.batch": batch}

    def _metadata(self) -> dict[str, str]:
        metadata = {"mlflow.trace.session": self.session}
        if self.run_id:
            metadata["mlflow.sourceRun"] = self.run_id
        return metadata

    # -- writing, through MLflow's public tracing API ----------------------------------
    def _store(self, pending: list[_Pending]) -> list[str]:
        """Write ``pending`` (span trees, then feedback); returns their MLflow trace ids."""
        if not pending:
            return []
        import mlflow

        batch = uuid.uuid4().hex
        with _tracing_to(self.tracking_uri):
            trace_ids = None
            if self.transport == otlp.OTLP and self.tracking_uri not in _NO_OTLP:
                try:
                    trace_ids = self._send(pending, batch)
                except otlp.OTLPUnsupported as exc:
                    logger.warning("%s; writing traces through MLflow's client instead", exc)
                    _NO_OTLP.add(self.tracking_uri)
            if trace_ids is None:
                trace_ids = [self._trace(mlflow, p, batch) for p in pending]
                # Spans are exported in the background; a trace must be stored before
                # feedback can be attached to it.
                self._wait_stored(mlflow, batch, scrub_text(pending[-1].key), len(pending))
            for trace_id, p in zip(trace_ids, pending):
                self._feedback(mlflow, trace_id, p.trajectory, p.reward)
        return trace_ids

    def _send(self, pending: list[_Pending], batch: str) -> list[str]:
        """The batch as one OTLP request to the server (``twinkle.tracking.otlp``): tags and
        session as root span attributes, the run in a header; stored when it returns. A
        request too large for the server (or a proxy before it) goes again in halves."""
        traces = []
        for p in pending:
            tags = {**self._tags(p, batch), "mlflow.traceName": p.spans[0].name}
            root = {otlp.TRACE_TAG + k: v for k, v in tags.items()}
            root["session.id"] = self.session
            root["mlflow.experimentId"] = self.experiment_id  # as MLflow's client puts it
            records = [
                dataclasses.replace(rec, attributes=_attributes(rec), error=_error(rec))
                for rec in p.spans
            ]
            traces.append((records, root))
        # Ids from the trace's identity: a batch sent again after a lost answer overwrites.
        identities = [f"{self.experiment_id}/{self.session}/{p.key}" for p in pending]
        return self._post(traces, identities)

    def _post(self, traces: list[Any], identities: list[str]) -> list[str]:
        body, trace_ids = otlp.encode(traces, identities)
        try:
            otlp.send(self.tracking_uri, self.experiment_id, body, run_id=self.run_id)
        except otlp.OTLPTooLarge:
            if len(traces) == 1:
                raise
            half = len(traces) // 2
            return self._post(traces[:half], identities[:half]) + self._post(
                traces[half:], identities[half:]
            )
        return trace_ids

    def _wait_stored(self, mlflow: Any, batch: str, last_key: str, n: int) -> None:
        """Until the ``n`` traces of ``batch`` are in the store. In the helper process (whose
        span batches export every 50 ms, in order, by one thread): look up the batch's last
        trace alone (a one-row query) until it is there, then check the whole batch once;
        elsewhere flush at once. Late past ``STORE_TIMEOUT_S``:
        ``mlflow.flush_trace_async_logging``."""
        if not HELPER_PROCESS:
            mlflow.flush_trace_async_logging()
            return
        from mlflow import MlflowClient

        client = MlflowClient(self.tracking_uri)
        started = time.monotonic()
        deadline = started + STORE_TIMEOUT_S
        in_batch = f"tag.`twinkle.batch` = '{batch}'"
        last = f"{in_batch} AND tag.`twinkle.trace_key` = '{_quote(last_key)}'"
        time.sleep(min(0.5, 0.004 * n))  # about the least that exporting them takes
        for query, want in ((last, 1), (in_batch, n)):
            while True:
                found = client.search_traces(
                    locations=[self.experiment_id],
                    filter_string=query,
                    include_spans=False,
                    max_results=max(want, 1),
                )
                if len(found) >= want:
                    break
                if time.monotonic() > deadline:
                    mlflow.flush_trace_async_logging()  # feedback then fails for one not stored
                    return
                # Each look-up is a query that takes the GIL from the export thread: look up
                # less often the longer it takes (at most ~10% late, 0.2 s at most).
                time.sleep(min(0.2, max(0.02, 0.1 * (time.monotonic() - started))))

    def _trace(self, mlflow: Any, p: _Pending, batch: str) -> str:
        from mlflow.entities import NoOpSpan

        root_rec, *children = p.spans
        tags = self._tags(p, batch)
        attributes = _attributes(root_rec)
        metadata = self._metadata()
        root = mlflow.start_span_no_context(
            root_rec.name,
            span_type=root_rec.span_type,
            inputs=root_rec.inputs,
            attributes=attributes,
            tags=tags,
            metadata=metadata,
            experiment_id=self.experiment_id,
            start_time_ns=root_rec.start_ns,
        )
        if isinstance(root, NoOpSpan):
            raise RuntimeError(
                "MLflow tracing is disabled in this process (mlflow.tracing.disable() or "
                "MLFLOW_TRACING_ENABLED=false): no trace can be written"
            )
        for rec in children:
            span = mlflow.start_span_no_context(
                rec.name,
                span_type=rec.span_type,
                parent_span=root,
                inputs=rec.inputs,
                attributes=_attributes(rec),
                start_time_ns=rec.start_ns,
            )
            span.end(outputs=rec.outputs, status=_status(rec), end_time_ns=rec.end_ns)
        root.end(outputs=root_rec.outputs, status=_status(root_rec), end_time_ns=root_rec.end_ns)
        return root.trace_id

    def _feedback(
        self, mlflow: Any, trace_id: str, traj: Mapping[str, Any], reward: Mapping[str, Any]
    ) -> None:
        log_feedback(mlflow, trace_id, traj, reward)


@dataclass(slots=True)
class _Pending:
    key: str
    trajectory: Mapping[str, Any]
    spans: list[SpanRecord]
    reward: dict[str, Any]


def _attributes(rec: SpanRecord) -> dict[str, Any]:
    return {k: scrub_secrets(v) for k, v in rec.attributes.items()}


def _error(rec: SpanRecord) -> str | None:
    """The span's error as a trace shows it: secrets scrubbed, 500 characters at most."""
    return str(scrub_secrets(rec.error))[:500] if rec.error else None


def _status(rec: SpanRecord) -> Any:
    if not rec.error:
        return "OK"
    from mlflow.entities import SpanStatus, SpanStatusCode

    return SpanStatus(SpanStatusCode.ERROR, description=_error(rec))


@contextlib.contextmanager
def _tracing_to(uri: str) -> Any:
    """MLflow's (process-global) tracking URI set to ``uri`` for a batch; restored after,
    unless this is the trace writer's helper process (``HELPER_PROCESS``)."""
    import mlflow

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    if previous != uri:
        mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        if previous != uri and not HELPER_PROCESS:
            mlflow.set_tracking_uri(previous)


def _row_id(traj: Mapping[str, Any], key: str) -> str:
    row = trajectory_key(traj, -1)
    return key if row == "#-1" else row


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


def write_trace_batch(
    tracking_uri: str,
    experiment_id: str,
    session: str,
    trajectories: Sequence[Mapping[str, Any]],
    rewards: Sequence[Mapping[str, Any] | None] | None = None,
    keys: Sequence[str] | None = None,
    **writer_kwargs: Any,
) -> dict[str, Any]:
    """``TraceWriter(...).write(...)`` as one picklable call returning a plain dict.

    What ``twinkle.tracking.writer.TraceWriterProcess`` runs in its helper process, so that
    trace writing (CPU-bound span export and store writes) does not share the GIL with
    rollouts.
    """
    writer = TraceWriter(tracking_uri, experiment_id, session, **writer_kwargs)
    # Keys traced per session, kept for the life of this process: batches streamed from a
    # rollout search the store once, not once per batch. Another process (a retry after a
    # crash, a Ray worker with its own keys) starts with a fresh search.
    ident = (tracking_uri, str(experiment_id), session)
    with _LOCKS_GUARD:
        known = _KNOWN_KEYS.get(ident)
    if known is None:
        known = writer.existing_keys()
        with _LOCKS_GUARD:
            known = _KNOWN_KEYS.setdefault(ident, known)
    report = writer.write(trajectories, rewards, keys=keys, existing=known)
    return {
        "written": report.written,
        "existing": report.skipped_existing,
        "unsampled": report.unsampled,
        "spans": report.spans,
        "seconds": report.seconds,
    }


def warm_up() -> bool:
    """Import what trace writing needs (run first in a writer process, off the critical path)."""
    import mlflow.entities  # noqa: F401
    import mlflow.tracing  # noqa: F401
    from mlflow import MlflowClient  # noqa: F401

    return True
