"""MLflow runs for twinkle flows: one run per flow run, one nested run per stage.

MLflow (imported lazily, ~1 s) is the tracking store: users review params, metrics, plots,
artifacts and traces in ``mlflow ui``. Everything goes through ``MlflowClient`` with explicit
run ids rather than MLflow's process-global "active run", because Prefect runs tasks in
threads (or Ray workers) where a global run would be shared or missing. The tracker holds
only strings, so it pickles to any worker. A SQLite store is switched to write-ahead-log
mode when the tracker first opens it (``sqlite_wal``): the trace writer's many small
transactions then cost one log sync each and never block the flow's readers.

Idempotent on retries:
* runs are found by tag before they are created (``twinkle.run_key``; stages by
  ``twinkle.stage_key``), so a retried flow or task logs into the same runs;
* metrics are logged at step 0 with the run's start time as timestamp: MLflow drops exact
  duplicates, so logging the same figures twice stores them once;
* artifacts are overwritten in place; traces are keyed per session (``TraceWriter``).

Secrets never reach MLflow: parameters, tags, run names and JSON artifacts go through
``redact`` (credentials in URLs included).

Example:
    >>> t = MLflowTracker('sqlite:////tmp/x/mlflow.db',  # doctest: +SKIP
    ...                   artifact_location='/tmp/x/artifacts')
    >>> run = t.start_run('flow-run-1', name='pipeline', params={'max_turns': 4})  # doctest: +SKIP
    >>> stage = t.start_stage(run, 'flow-run-1', 'curation')  # doctest: +SKIP
    >>> t.log_metrics(stage, {'rows_in': 10, 'rows_out': 8})  # doctest: +SKIP
    >>> t.end_run(stage)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import statistics
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twinkle.tracking.scrub import redact
from twinkle.tracking.traces import TraceWriter, is_failed, summarize_rewards

_KEY_RE = re.compile(r"[^\w.\-/ ]+")
_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def metric_key(*parts: str) -> str:
    """A valid MLflow metric name from free-form parts (drop reasons may hold ':' or quotes)."""
    return ".".join(_KEY_RE.sub("_", str(p)) for p in parts if p not in (None, ""))


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{'a': {'b': 1}}`` -> ``{'a.b': 1}``; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def _quote(value: str) -> str:
    return value.replace("'", "\\'")


class MLflowTracker:
    """Runs, stages, params, metrics, plots, artifacts and traces of twinkle flows in MLflow.

    Args:
        tracking_uri: e.g. ``sqlite:////abs/path/mlflow.db`` or ``http://127.0.0.1:5000``.
        experiment: experiment name, created on first use.
        artifact_location: absolute directory (or URI) for a new experiment's artifacts; a
            SQLite store otherwise puts them under the working directory of the first run.
        log_dropped_rows: whether the flows upload the rows curation dropped (after their
            PII rewrite); off, only their counts reach MLflow.

    Example:
        >>> t = MLflowTracker(f'sqlite:///{tmp}/mlflow.db',  # doctest: +SKIP
        ...                   artifact_location=f'{tmp}/artifacts')
        >>> run = t.start_run('key-1', name='twinkle-pipeline')  # doctest: +SKIP
        >>> t.log_rewards(run, [{'total': 1.0}, {'total': 0.0}])  # doctest: +SKIP
        >>> t.end_run(run)  # doctest: +SKIP
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment: str = "twinkle",
        artifact_location: str | None = None,
        *,
        log_dropped_rows: bool = False,
    ) -> None:
        if not tracking_uri:
            raise ValueError("tracking_uri is required (e.g. sqlite:////abs/path/mlflow.db)")
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.artifact_location = artifact_location
        self.log_dropped_rows = log_dropped_rows
        self._experiment_id: str | None = None
        self._start_times: dict[str, int] = {}

    @property
    def client(self):
        from mlflow import MlflowClient

        return MlflowClient(self.tracking_uri)

    @property
    def experiment_id(self) -> str:
        """Get-or-create the experiment, with an absolute artifact location when given."""
        if self._experiment_id is None:
            client = self.client
            exp = client.get_experiment_by_name(self.experiment)
            if exp is None:
                location = self.artifact_location
                if location and "://" not in location:
                    location = os.path.abspath(location)
                    os.makedirs(location, exist_ok=True)
                try:
                    self._experiment_id = client.create_experiment(
                        self.experiment, artifact_location=location
                    )
                except Exception:
                    # Another process created it between our lookup and create.
                    exp = client.get_experiment_by_name(self.experiment)
                    if exp is None:
                        raise
                    self._experiment_id = exp.experiment_id
            else:
                self._experiment_id = exp.experiment_id
            sqlite_wal(self.tracking_uri)
        return self._experiment_id

    # -- runs --------------------------------------------------------------------------
    def _find(self, tag: str, value: str) -> str | None:
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{tag}` = '{_quote(value)}'", max_results=1
        )
        return runs[0].info.run_id if runs else None

    def start_run(
        self,
        run_key: str,
        *,
        name: str | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """The run of flow run ``run_key``: found by tag, else created; set RUNNING.

        ``name`` (the flow run's name, so both UIs show one name) and ``tags`` (the flow
        run's id and UI address, ...) are set on a run found again too: a rerun of the key
        points at its latest flow run.
        """
        # The key tag is twinkle's own identity, not a secret: only user tags are scrubbed.
        tags = {**redact(dict(tags or {})), "twinkle.run_key": run_key}
        name = redact(name) if name else None
        run_id = self._find("twinkle.run_key", run_key)
        client = self.client
        if run_id is None:
            run_id = client.create_run(
                self.experiment_id, run_name=name or run_key, tags=tags
            ).info.run_id
        else:
            client.update_run(run_id, status="RUNNING", name=name)
            self.set_tags(run_id, {k: v for k, v in tags.items() if k != "twinkle.run_key"})
        if params:
            self.log_params(run_id, params)
        return run_id

    def start_stage(
        self,
        parent_run_id: str,
        run_key: str,
        stage: str,
        params: Mapping[str, Any] | None = None,
        *,
        start_time: float | None = None,
    ) -> str:
        """The nested run of ``stage`` under ``parent_run_id`` (found by tag, else created).

        ``start_time`` (seconds since the epoch): when the stage began, for a stage logged
        after it ran (its run's duration is then the stage's, not the logging's)."""
        key = f"{run_key}/{stage}"
        run_id = self._find("twinkle.stage_key", key)
        client = self.client
        if run_id is None:
            run_id = client.create_run(
                self.experiment_id,
                start_time=int(start_time * 1000) if start_time is not None else None,
                run_name=stage,
                tags={
                    "mlflow.parentRunId": parent_run_id,
                    "twinkle.stage_key": key,
                    "twinkle.stage": stage,
                    "twinkle.run_key": f"{run_key}#stage",
                },
            ).info.run_id
        else:
            client.update_run(run_id, status="RUNNING")
        if params:
            self.log_params(run_id, params)
        return run_id

    def end_run(self, run_id: str, status: str = "FINISHED", end_time: float | None = None) -> None:
        """Mark a run FINISHED, FAILED or KILLED; ``end_time`` (seconds since the epoch): when
        its work ended, if not now."""
        self.client.set_terminated(
            run_id, status=status, end_time=int(end_time * 1000) if end_time is not None else None
        )

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(
            run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in redact(dict(tags)).items()]
        )

    # -- params and metrics --------------------------------------------------------------
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Flattened, scrubbed params; values JSON-encoded and cut to MLflow's size limit."""
        from mlflow.entities import Param

        flat = flatten(redact(dict(params)))
        existing = self.client.get_run(run_id).data.params
        batch = []
        for k, v in flat.items():
            text = v if isinstance(v, str) else json.dumps(v, default=str)
            text = text[:_MAX_PARAM_CHARS]
            if existing.get(k) == text:
                continue
            if k in existing:  # params are immutable in MLflow; keep the first value, say so
                k = f"{k}.retry"
            batch.append(Param(k, text))
        for i in range(0, len(batch), 100):
            self.client.log_batch(run_id, params=batch[i : i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
        """Numeric metrics at ``step``, timestamped at the run's start so retries dedupe."""
        from mlflow.entities import Metric

        ts = self._start_times.get(run_id)
        if ts is None:
            ts = self._start_times[run_id] = self.client.get_run(run_id).info.start_time
        batch = [
            Metric(metric_key(k), float(v), ts, step)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        ]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(run_id, metrics=batch[i : i + 1000])

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None:
        """Upload a file (overwrites the same path on retry)."""
        self.client.log_artifact(run_id, path, artifact_path)

    def log_dataset(
        self,
        run_id: str,
        path: str,
        *,
        context: str,
        name: str | None = None,
        digest: str | None = None,
    ) -> dict[str, str]:
        """Log the file at ``path`` as a dataset input of the run (``mlflow.data``: a
        ``MetaDataset`` with the file as its source and ``digest``, by default the first 16
        hex digits of the file's SHA-256); ``context`` says its role (``input``, ``curated``).
        Shown in the run's Datasets column and its inputs. Returns the logged fields."""
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.sources import LocalArtifactDatasetSource
        from mlflow.entities import Dataset, DatasetInput, InputTag

        if digest is None:
            digest = file_digest(path)
        source = LocalArtifactDatasetSource(os.path.abspath(path))
        dataset = MetaDataset(source, name=name or os.path.basename(path), digest=digest[:36])
        fields = dataset.to_dict()
        entity = Dataset(
            name=fields["name"],
            digest=fields["digest"],
            source_type=fields["source_type"],
            source=fields["source"],
            schema=fields.get("schema"),
        )
        tags = [InputTag("mlflow.data.context", context)]
        self.client.log_inputs(run_id, datasets=[DatasetInput(entity, tags=tags)])
        return fields

    def log_json(self, run_id: str, obj: Any, artifact_file: str) -> None:
        self.client.log_dict(run_id, redact(obj), artifact_file)

    # -- stage summaries -------------------------------------------------------------------
    def log_curation(
        self,
        run_id: str,
        steps: Sequence[Mapping[str, Any]],
        rows_in: int,
        rows_out: int,
        render: Callable[[str, Any, str], str] | None = None,
    ) -> dict[str, int]:
        """Rows in/out, drops per step and reason (``drops.<step>.<reason>``, once each),
        seconds per step, and a drop-reason chart.

        ``steps`` are per-step dicts ``{'step', 'rows_in', 'rows_out', 'dropped': {reason: n},
        'seconds'}`` (``PipelineStats`` / ``StepStats.as_dict()``). Returns the drop counts
        keyed ``step/reason``. ``render`` draws the chart (``plots.render_chart``'s signature;
        default: in this process).
        """
        metrics: dict[str, float] = {
            "rows_in": rows_in,
            "rows_out": rows_out,
            "rows_dropped": rows_in - rows_out,
        }
        drops: dict[str, int] = {}
        for st in steps:
            name = st.get("step", "?")
            metrics[metric_key("step", name, "rows_in")] = st.get("rows_in", 0)
            metrics[metric_key("step", name, "rows_out")] = st.get("rows_out", 0)
            metrics[metric_key("step", name, "seconds")] = st.get("seconds", 0.0)
            for reason, n in (st.get("dropped") or {}).items():
                metrics[metric_key("drops", name, reason)] = n
                drops[f"{name}/{reason}"] = drops.get(f"{name}/{reason}", 0) + int(n)
            # Tagging steps (IntentClassifier) keep every row: their counts are the signal.
            for tag, n in (st.get("tags") or {}).items():
                metrics[metric_key("tags", name, tag)] = n
        self.log_metrics(run_id, metrics)
        self._log_chart(run_id, render, "drop_reasons", drops, "drop_reasons.png")
        return drops

    def log_rollout(self, run_id: str, trajectories: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Stop reasons, failures, turns, tokens and model/tool latency of a rollout batch."""
        stops = Counter(str(t.get("stop_reason")) for t in trajectories)
        latencies, tool_latencies, tool_errors, prompt_tokens, completion_tokens = [], [], 0, 0, 0
        for traj in trajectories:
            for entry in traj.get("turn_log") or []:
                if not isinstance(entry, dict) or not isinstance(
                    entry.get("latency_s"), (int, float)
                ):
                    continue
                if entry.get("type") == "llm":
                    latencies.append(entry["latency_s"])
                    prompt_tokens += int(entry.get("prompt_tokens") or 0)
                    completion_tokens += int(entry.get("completion_tokens") or 0)
                elif entry.get("type") == "tool":
                    tool_latencies.append(entry["latency_s"])
                    tool_errors += bool(entry.get("error"))
        turns = [t.get("turns") for t in trajectories if isinstance(t.get("turns"), int)]
        summary: dict[str, Any] = {
            "trajectories": len(trajectories),
            "failed": sum(1 for t in trajectories if is_failed(t)),
            "turns_mean": statistics.fmean(turns) if turns else 0.0,
            "tokens.prompt": prompt_tokens,
            "tokens.completion": completion_tokens,
            "latency.model_mean_s": statistics.fmean(latencies) if latencies else 0.0,
            "latency.model_p95_s": _quantile(latencies, 0.95),
            "latency.tool_mean_s": statistics.fmean(tool_latencies) if tool_latencies else 0.0,
            "model_calls": len(latencies),
            "tool_calls": len(tool_latencies),
            "tool_errors": tool_errors,
        }
        summary.update({metric_key("stop_reason", k): v for k, v in stops.items()})
        self.log_metrics(run_id, summary)
        return {**summary, "stop_reasons": dict(stops)}

    def log_rewards(
        self,
        run_id: str,
        rewards: Sequence[Mapping[str, Any] | None],
        pass_threshold: float = 1.0,
        render: Callable[[str, Any, str], str] | None = None,
    ) -> dict[str, Any]:
        """Mean, distribution and pass rate per reward name, plus a histogram PNG.

        Pass rate: share of trajectories whose ``total`` reward (the only reward when there is
        one) reaches ``pass_threshold``; missing rewards count as not passed. ``render`` as in
        ``log_curation``.
        """
        values = summarize_rewards(rewards)
        metrics: dict[str, float] = {"scored": sum(1 for r in rewards if r)}
        for name, vals in values.items():
            metrics[metric_key("reward", name, "mean")] = statistics.fmean(vals)
            metrics[metric_key("reward", name, "min")] = min(vals)
            metrics[metric_key("reward", name, "max")] = max(vals)
            metrics[metric_key("reward", name, "p50")] = _quantile(vals, 0.5)
            metrics[metric_key("reward", name, "std")] = (
                statistics.pstdev(vals) if len(vals) > 1 else 0.0
            )
            metrics[metric_key("reward", name, "count")] = len(vals)
        main = "total" if "total" in values else (next(iter(values)) if len(values) == 1 else None)
        if main and rewards:
            passed = sum(
                1
                for r in rewards
                if r and isinstance(r.get(main), (int, float)) and r[main] >= pass_threshold
            )
            metrics["pass_rate"] = passed / len(rewards)
        self.log_metrics(run_id, metrics)
        self._log_chart(run_id, render, "reward_histogram", values, "reward_histogram.png")
        return metrics

    def _log_chart(
        self,
        run_id: str,
        render: Callable[[str, Any, str], str] | None,
        kind: str,
        data: Any,
        name: str,
    ) -> None:
        """Draw chart ``kind`` with ``render`` (default: in this process) and log it under
        ``plots/``."""
        if render is None:
            from twinkle.tracking.plots import render_chart as render
        with tempfile.TemporaryDirectory() as tmp:
            self.log_artifact(run_id, render(kind, data, os.path.join(tmp, name)), "plots")

    def trace_writer(self, run_id: str, session: str, **kwargs: Any) -> TraceWriter:
        """A ``TraceWriter`` whose traces link to ``run_id`` and group under ``session``."""
        return TraceWriter(self.tracking_uri, self.experiment_id, session, run_id=run_id, **kwargs)


def sqlite_wal(tracking_uri: str) -> bool:
    """Put a SQLite tracking store in write-ahead-log mode (``PRAGMA journal_mode=WAL``, kept
    in the file; standard library ``sqlite3``). Traces are many small transactions (a trace,
    its spans, one per feedback) from a helper process while the flow logs runs: in WAL mode
    a commit syncs the log once instead of the journal and the database, and readers no
    longer wait on the writer. Off with ``TWINKLE_SQLITE_WAL=0``; any other store, or a file
    that cannot switch (read-only, locked), is left as it is. Returns whether WAL is on.

    Example:
        >>> sqlite_wal('http://127.0.0.1:5000')
        False
    """
    if not tracking_uri.startswith("sqlite:///") or os.environ.get("TWINKLE_SQLITE_WAL") == "0":
        return False
    import sqlite3

    path = tracking_uri[len("sqlite:///") :].split("?", 1)[0]
    if not path or path == ":memory:" or not os.path.isfile(path):
        return False
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=5)) as db:
            return db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    except sqlite3.Error:
        return False


def file_digest(path: str) -> str:
    """The first 16 hex digits of the SHA-256 of the file at ``path`` (a dataset's digest)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _quantile(values: Iterable[float], q: float) -> float:
    data = sorted(values)
    if not data:
        return 0.0
    return data[min(len(data) - 1, int(q * len(data)))]
