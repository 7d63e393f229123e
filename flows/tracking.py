"""Prefect tasks that log a flow run to MLflow through ``twinkle.tracking``.

Every task here retries (the tracking store is I/O) and is never cached: logging is
idempotent by design (runs found by key, metrics deduplicated, traces keyed per session),
so a resumed flow re-logs its cached stages into the same MLflow run without duplicates.

Example:
    >>> from flows.tracking import start_tracking
    >>> start_tracking.name
    'start-tracking'
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.common import Tracking, tracking_target
from flows.params import TrackingParams
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
_WRITER = None
_WRITER_LOCK = threading.Lock()


def trace_writer_process() -> Any:
    global _WRITER
    with _WRITER_LOCK:
        if _WRITER is None:
            from twinkle.tracking.writer import TraceWriterProcess

            _WRITER = TraceWriterProcess().start()
            atexit.register(_WRITER.close)
        return _WRITER


@task(name="start-tracking", task_run_name="start-tracking", **_IO)
def start_tracking(
    tracking: TrackingParams, run_key: str, flow_name: str, params: dict[str, Any]
) -> Tracking:
    """Find or create the MLflow run of this flow run (keyed, so retries reuse it)."""
    from twinkle.tracking import MLflowTracker

    uri, artifacts = tracking_target(tracking.tracking_uri, tracking.artifact_location)
    tracker = MLflowTracker(uri, experiment=tracking.experiment, artifact_location=artifacts)
    trace_writer_process()  # start the trace writer now; it imports MLflow while curation runs
    run_id = tracker.start_run(
        run_key, name=f"{flow_name}-{run_key[:8]}", params=params, tags={"twinkle.flow": flow_name}
    )
    return Tracking(tracker=tracker, run_id=run_id, run_key=run_key)


@task(name="finish-tracking", task_run_name="finish-tracking", **_IO)
def finish_tracking(tracking: Tracking, summary: dict[str, Any], status: str = "FINISHED") -> None:
    """Log the run's summary (metrics + JSON) and close it."""
    tracker = tracking.tracker
    tracker.log_metrics(
        tracking.run_id, {k: v for k, v in summary.items() if isinstance(v, (int, float))}
    )
    tracker.log_json(tracking.run_id, summary, "summary.json")
    tracker.end_run(tracking.run_id, status)


@task(name="log-curation", task_run_name="log-curation", **_IO)
def log_curation(tracking: Tracking, result: dict[str, Any]) -> str:
    """Curation stage: a nested run with rows in/out, drops, the chart and the curated files."""
    tracker = tracking.tracker
    stage = tracking.stage("curation")
    tracker.log_params(stage, result["settings"])
    tracker.log_curation(
        stage,
        result["steps"],
        result["rows_in"],
        result["rows_out"],
        render=trace_writer_process().chart,
    )  # drawn off this process's GIL
    tracker.set_tags(stage, {"pii": result["pii"]})
    for key in ("curated_path", "dropped_path"):
        if result.get(key):
            tracker.log_artifact(stage, result[key], "data")
    tracker.end_run(stage)
    return stage


@task(name="start-stage", task_run_name="start-stage-{name}", **_IO)
def start_stage(tracking: Tracking, name: str) -> str:
    """The nested MLflow run of stage ``name`` (found again by key on retries)."""
    return tracking.stage(name)


def trace_key(trajectory: dict[str, Any], index: int) -> str:
    """A trajectory's trace key: its position in the whole rollout + its id (unique even when
    ids repeat, stable for the same inputs, so a retry finds the traces it already wrote)."""
    return f"{index}:{trajectory_key(trajectory, index)}"


def _writer_options(trace: dict[str, Any]) -> dict[str, Any]:
    return {
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
    return TraceStream(
        trace_writer_process(),
        tracker.tracking_uri,
        tracker.experiment_id,
        trace["session"],
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
    tracker = trace["tracker"]
    return trace_writer_process().write(
        tracker.tracking_uri,
        tracker.experiment_id,
        trace["session"],
        trajectories,
        [t.get("rewards") for t in trajectories],
        [trace_key(t, offset + i) for i, t in enumerate(trajectories)],
        **_writer_options(trace),
    )


@task(name="log-rollout", task_run_name="log-rollout", **_IO)
def log_rollout(tracking: Tracking, stage: str, result: dict[str, Any]) -> dict[str, Any]:
    """Rollout + scoring stage: metrics, reward plots, the scored file, trace counts; closes the
    stage."""
    tracker = tracking.tracker
    from flows.common import read_rows_cached

    tracker.log_params(stage, result["settings"])
    trajectories = read_rows_cached([result["scored_path"]])
    summary = tracker.log_rollout(stage, trajectories)
    reward_metrics = tracker.log_rewards(
        stage, [t.get("rewards") for t in trajectories], render=trace_writer_process().chart
    )
    tracker.set_tags(stage, {f"skipped.{k}": v for k, v in result.get("skipped", {}).items()})
    if result.get("scored_path"):
        tracker.log_artifact(stage, result["scored_path"], "data")
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
