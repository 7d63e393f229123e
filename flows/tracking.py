"""Prefect tasks that log a flow run to MLflow through ``twinkle.tracking``.

Every task here retries (the tracking store is I/O) and is never cached: logging is
idempotent by design (runs found by key, metrics deduplicated, traces keyed per session),
so a resumed flow re-logs its cached stages into the same MLflow run without duplicates.

The MLflow run carries the Prefect flow run's name and, as tags, its id and UI address
(``prefect.flow_run_*``). Nothing private is uploaded: params and tags go through
``twinkle.tracking.redact``, the scored rows are uploaded with credentials redacted from
every string, and the rows curation dropped (raw, from before the PII step) are uploaded
only with ``TrackingParams.log_dropped_rows``, and then after their PII rewrite.

Example:
    >>> from flows.tracking import start_tracking
    >>> start_tracking.name
    'start-tracking'
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.common import Tracking, tracking_target
from flows.params import TrackingParams
from twinkle.data_format.outcome import is_failed
from twinkle.tracking.traces import trajectory_key

_IO = {
    "retries": 2,
    "retry_delay_seconds": [1, 5],
    "cache_policy": NO_CACHE,
    "persist_result": False,
}

# Traces are written, and charts drawn, by one helper process per flow-run process
# (``TraceWriterProcess``): CPU-bound SQLAlchemy and matplotlib work that would otherwise
# hold the GIL while the rollout's event loop waits on sandboxes and the model. Started
# when tracking starts, so its imports overlap curation; closed when the process exits.
# A rollout's trace stream gets more writers (``TWINKLE_TRACE_WRITERS``, default: 2 where
# there are 2 cores or more): the last wave of trajectories finishes together and its traces
# are written after the rollout, on an idle machine, so a second process halves that tail.
_WRITERS: list[Any] = []
_WRITER_LOCK = threading.Lock()


def _writer_processes(n: int) -> list[Any]:
    """The first ``n`` trace writer processes of this process, started on first use. The
    first also draws charts; the others start at a low priority from their first
    instruction, so their imports take only idle CPU (they matter at the rollout's end)."""
    with _WRITER_LOCK:
        while len(_WRITERS) < n:
            from twinkle.tracking.writer import TraceWriterProcess

            proc = TraceWriterProcess(nice_first=bool(_WRITERS)).start()
            atexit.register(proc.close)
            _WRITERS.append(proc)
        return _WRITERS[:n]


def trace_writer_process() -> Any:
    """This process's main trace writer (also the chart drawer)."""
    return _writer_processes(1)[0]


def stream_writer_count() -> int:
    """How many trace writer processes a rollout's trace stream uses (at least 1)."""
    raw = os.environ.get("TWINKLE_TRACE_WRITERS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            raise ValueError(
                f"TWINKLE_TRACE_WRITERS must be a whole number of processes, got {raw!r}"
            ) from None
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def stream_writer_processes() -> list[Any]:
    """The trace writer processes of this flow-run process's trace streams (the main one
    first, ``stream_writer_count()`` in all)."""
    return _writer_processes(stream_writer_count())


@task(name="start-tracking", task_run_name="start-tracking", **_IO)
def start_tracking(
    tracking: TrackingParams, run_key: str, flow_name: str, params: dict[str, Any]
) -> Tracking:
    """Find or create the MLflow run of this flow run (keyed, so retries reuse it)."""
    from twinkle.tracking import MLflowTracker

    uri, artifacts = tracking_target(tracking.tracking_uri, tracking.artifact_location)
    tracker = MLflowTracker(
        uri,
        experiment=tracking.experiment,
        artifact_location=artifacts,
        log_dropped_rows=tracking.log_dropped_rows,
    )
    stream_writer_processes()  # start the trace writers now; they import MLflow during curation
    name, tags = flow_run_link()
    run_id = tracker.start_run(
        run_key,
        name=name or f"{flow_name}-{run_key[:8]}",
        params=params,
        tags={"twinkle.flow": flow_name, **tags},
    )
    return Tracking(tracker=tracker, run_id=run_id, run_key=run_key)


def flow_run_link() -> tuple[str | None, dict[str, str]]:
    """The Prefect flow run this code runs in: its name (the MLflow run's name too) and the
    tags that lead from the MLflow run to it (``prefect.flow_run_id``, ``..._name``,
    ``..._url``); ``(None, {})`` outside a flow run."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    if not run_id:
        return None, {}
    tags = {"prefect.flow_run_id": str(run_id)}
    if flow_run.name:
        tags["prefect.flow_run_name"] = str(flow_run.name)
    url = _flow_run_url(str(run_id))
    if url:
        tags["prefect.flow_run_url"] = url
    return flow_run.name, tags


def _flow_run_url(run_id: str) -> str | None:
    """The flow run's page in the Prefect UI (Prefect's ``url_for``: ``PREFECT_UI_URL``, or
    the API's address); None when neither is known (an ephemeral API)."""
    from prefect.utilities.urls import url_for

    try:
        return url_for("flow-run", obj_id=run_id)
    except Exception:  # noqa: BLE001 - a missing link must not fail tracking
        return None


@task(name="finish-tracking", task_run_name="finish-tracking", **_IO)
def finish_tracking(
    tracking: Tracking,
    summary: dict[str, Any],
    status: str = "FINISHED",
    failed_stages: list[str] | None = None,
) -> None:
    """Log the run's summary (metrics + JSON) and close it; ``failed_stages``: stage runs
    that ended before the run's verdict failed them (the rollout over ``max_failure_rate``),
    marked FAILED with their own end time kept."""
    tracker = tracking.tracker
    for stage in failed_stages or []:
        ended = tracker.client.get_run(stage).info.end_time
        tracker.end_run(stage, "FAILED", end_time=ended / 1000 if ended else None)
    tracker.log_metrics(
        tracking.run_id, {k: v for k, v in summary.items() if isinstance(v, (int, float))}
    )
    tracker.log_json(tracking.run_id, summary, "summary.json")
    tracker.end_run(tracking.run_id, status)


@task(name="log-curation", task_run_name="log-curation", **_IO)
def log_curation(tracking: Tracking, result: dict[str, Any]) -> str:
    """Curation stage: a nested run (timed as the stage ran) with rows in/out, drops, the
    chart, the curated file, and the input and curated datasets (``mlflow.data``, on the
    flow's run too). The dropped rows are uploaded only when asked
    (``TrackingParams.log_dropped_rows``), and then only after their PII rewrite."""
    tracker = tracking.tracker
    ended = time.time()  # logged as soon as the stage returns: it ended about now
    stage = tracker.start_stage(
        tracking.run_id,
        tracking.run_key,
        "curation",
        start_time=ended - float(result.get("seconds") or 0.0),
    )
    tracker.log_params(stage, result["settings"])
    tracker.log_curation(
        stage,
        result["steps"],
        result["rows_in"],
        result["rows_out"],
        render=trace_writer_process().chart,
    )  # drawn off this process's GIL
    tags = {"pii": result["pii"]}
    from twinkle.tracking.tracker import file_digest

    datasets = [(p, "input") for p in result["settings"].get("inputs") or []]
    datasets.append((result.get("curated_path"), "curated"))
    datasets = [(p, c, file_digest(p)) for p, c in datasets if p and os.path.isfile(p)]
    for run in (tracking.run_id, stage):
        for path, context, digest in datasets:
            tracker.log_dataset(run, path, context=context, digest=digest)
    if result.get("curated_path"):
        tracker.log_artifact(stage, result["curated_path"], "data")
    if result.get("dropped_path"):
        tags["dropped_rows"] = _log_dropped(tracker, stage, result)
    tracker.set_tags(stage, tags)
    tracker.end_run(stage, end_time=ended)
    return stage


_INDEX = "__twinkle_dropped_index"  # an int: the PII rewrite leaves it as it is


def _log_dropped(tracker: Any, stage: str, result: dict[str, Any]) -> str:
    """Upload the dropped-row log with every row through the PII rewrite, when the tracker is
    asked to and the PII step ran; returns what was done (the stage's ``dropped_rows`` tag)."""
    if not tracker.log_dropped_rows:
        return "not logged (log_dropped_rows is off)"
    if result["pii"] != "ran":
        return f"not logged: the PII step did not run ({result['pii']})"
    import json
    import tempfile

    from twinkle.preprocessor.pii_presidio_filter import PIIPresidioFilter

    with open(result["dropped_path"], encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    rows = [{**e["row"], _INDEX: i} for i, e in enumerate(lines) if isinstance(e.get("row"), dict)]
    kept, _ = PIIPresidioFilter(all_fields=True)(rows)  # a row it cannot rewrite stays out
    out = []
    for row in kept:
        entry = lines[row.pop(_INDEX)]
        out.append({"step": entry.get("step"), "reason": entry.get("reason"), "row": row})
    name = os.path.basename(result["dropped_path"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in out)
        tracker.log_artifact(stage, path, "data")
    return f"logged after the PII rewrite ({len(out)} of {len(lines)} rows)"


def _log_redacted_rows(tracker: Any, stage: str, path: str, rows: list[dict[str, Any]]) -> None:
    """Upload ``rows`` (read from ``path``) under ``data/`` with credentials redacted from
    every string (an endpoint error may quote a URL with its password); JSONL keeps the
    name, another format is uploaded as JSONL beside its name."""
    import json
    import tempfile

    from twinkle.tracking.scrub import scrub_text

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return scrub_text(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    name = os.path.basename(path)
    if not name.endswith(".jsonl"):
        name = os.path.splitext(name)[0] + ".jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, name)
        with open(out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(clean(r), ensure_ascii=False) + "\n" for r in rows)
        tracker.log_artifact(stage, out, "data")


@task(name="start-stage", task_run_name="start-stage-{name}", **_IO)
def start_stage(tracking: Tracking, name: str) -> str:
    """The nested MLflow run of stage ``name`` (found again by key on retries)."""
    return tracking.stage(name)


def trace_key(trajectory: dict[str, Any], index: int) -> str:
    """A trajectory's trace key: its position in the whole rollout + its id (unique even when
    ids repeat, stable for the same inputs, so a retry finds the traces it already wrote)."""
    return f"{index}:{trajectory_key(trajectory, index)}"


def _writer_options(trace: dict[str, Any]) -> dict[str, Any]:
    from twinkle.tracking.otlp import transport_for

    return {
        # Read here, in the flow's process: the writer processes outlive one flow run's env.
        "transport": transport_for(trace["tracker"].tracking_uri),
        "run_id": trace["run_id"],
        "dataset": trace["dataset"],
        "sample_rate": trace["sample_rate"],
        "max_spans": trace["max_spans"],
        "max_payload_chars": trace["max_payload_chars"],
    }


def open_trace_stream(trace: dict[str, Any]) -> Any:
    """A ``TraceStream`` into this process's trace writer, for trajectories as they finish."""
    from twinkle.tracking.writer import TraceStream

    tracker = trace["tracker"]
    writers = stream_writer_processes()
    return TraceStream(
        writers,
        tracker.tracking_uri,
        tracker.experiment_id,
        trace["session"],
        # Smaller batches with more writers: the last wave then splits between them.
        batch_size=max(8, 32 // len(writers)),
        **_writer_options(trace),
    )


@task(name="trace-trajectories", task_run_name="trace-trajectories-{shard}", **_IO)
def trace_file(trace: dict[str, Any], path: str, offset: int, shard: int) -> dict[str, Any]:
    """Trace the scored trajectories of a file (a rollout found in the cache), rewards as feedback.

    Idempotent per session: traces already there are skipped, so a rollout cached from a
    run in the same session writes nothing, and one from another session is traced anew.
    """
    from flows.common import read_rows_cached

    trajectories = read_rows_cached([path])
    # Through a stream over the same writers as the rollout's: each key reaches the writer
    # that may have written it, so one already there is skipped, never written twice.
    stream = open_trace_stream(trace)
    for i, t in enumerate(trajectories):
        stream.put(t, t.get("rewards"), trace_key(t, offset + i))
    report = stream.close()
    report.pop("tail_s", None)
    return report


@task(name="log-rollout", task_run_name="log-rollout", **_IO)
def log_rollout(tracking: Tracking, stage: str, result: dict[str, Any]) -> dict[str, Any]:
    """Rollout + scoring stage: metrics, reward plots, the scored file, trace counts; closes the
    stage."""
    tracker = tracking.tracker
    from flows.common import read_rows_cached

    tracker.log_params(stage, result["settings"])
    trajectories = read_rows_cached([result["scored_path"]])
    summary = tracker.log_rollout(stage, trajectories)
    # Failed trajectories (endpoint, sandbox or environment broke) are not rewards: they are
    # counted by log_rollout and kept out of every reward figure, pass rate included.
    reward_metrics = tracker.log_rewards(
        stage,
        [t.get("rewards") for t in trajectories if not is_failed(t)],
        render=trace_writer_process().chart,
    )
    tracker.set_tags(stage, {f"skipped.{k}": v for k, v in result.get("skipped", {}).items()})
    if result.get("scored_path"):
        _log_redacted_rows(tracker, stage, result["scored_path"], trajectories)
    traces = result.get("traces", {})
    tracker.log_metrics(stage, {f"traces.{k}": v for k, v in traces.items()})
    tracker.end_run(stage)
    return {
        **summary,
        **reward_metrics,
        "traces_written": traces.get("written", 0),
        "traces_existing": traces.get("existing", 0),
        "traces_unsampled": traces.get("unsampled", 0),
    }
