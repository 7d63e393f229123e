"""Curation flow: load -> dedup -> quality filters -> PII rewrite -> curated data and dropped log.

Each task wraps one library call (``twinkle.io``, ``twinkle.preprocessor.chain``,
``PIIPresidioFilter``); the filters run per shard so a Ray task runner spreads them over a
cluster. Results are persisted and cached on their inputs (see ``flows.common``), so a
crashed run resumes from its last finished stage. The PII step runs when the ``pii`` extra
is installed; otherwise it is reported as skipped, with the reason, in the summary, the
Prefect artifact and MLflow.

Example:
    >>> from flows.curation import curation_flow
    >>> curation_flow.name
    'twinkle-curation'
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

from prefect import flow, task, unmapped
from prefect.utilities.annotations import quote
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.common import (
    STAGE_CACHE,
    chunks,
    files_fingerprint,
    fingerprint,
    flow_run_id,
    needs_ray_switch,
    output_dir,
    task_runner_for,
    with_storage,
)
from flows.params import CurationParams, RunParams, TrackingParams
from flows.tracking import finish_tracking, log_curation, start_tracking


def _work_log(out: Path, name: str) -> str:
    """A dropped-row log owned by one stage result; cleared before the stage (re)runs."""
    from twinkle.preprocessor.quality import truncate_dropped_logs

    path = out / ".work" / f"{name}.dropped.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    truncate_dropped_logs(str(path))
    return str(path)


@task(name="load-rows", task_run_name="load-rows", cache_policy=NO_CACHE, persist_result=False)
def load_rows(paths: list[str], source: str) -> dict[str, Any]:
    """Read the input files (JSONL/JSON/Parquet) into rows.

    Not cached: persisting a copy of the input would cost as much as reading it again, and
    ``source`` (the files' content hash) already keys every later stage.
    """
    from twinkle.io import read_rows_list

    rows = read_rows_list(paths)
    return {"rows": rows, "fingerprint": fingerprint("load", source), "rows_in": len(rows)}


@task(name="dedup-rows", task_run_name="dedup-rows", cache_policy=STAGE_CACHE)
def dedup_rows(rows: list[Any], upstream: str, names: list[str], out: str) -> dict[str, Any]:
    """Global dedup steps (they need every row at once)."""
    from twinkle.preprocessor.chain import build_pipeline, curate_rows

    fp = fingerprint("dedup", upstream, names)
    if not names:
        return {"rows": rows, "fingerprint": fp, "steps": [], "log": None}
    log = _work_log(Path(out), f"dedup-{fp}")
    kept, stats = curate_rows(rows, build_pipeline(names), dropped_log_path=log)
    return {"rows": kept, "fingerprint": fp, "steps": stats.as_dict()["steps"], "log": log}


@task(name="run-filters", task_run_name="run-filters-{shard}", cache_policy=STAGE_CACHE)
def run_filters(rows: list[Any], upstream: str, shard: int, names: list[str], out: str) -> dict[str, Any]:
    """The per-batch quality filters over one shard."""
    from twinkle.preprocessor.chain import build_pipeline, curate_rows

    fp = fingerprint("filters", upstream, shard, names)
    log = _work_log(Path(out), f"filters-{fp}")
    kept, stats = curate_rows(rows, build_pipeline(names), dropped_log_path=log)
    return {"rows": kept, "fingerprint": fp, "steps": stats.as_dict()["steps"], "log": log}


def pii_available() -> str | None:
    """None when the PII step can run here, else why not."""
    if importlib.util.find_spec("twinkle.preprocessor.pii_presidio_filter") is None:
        return "no PII filter in twinkle.preprocessor"
    for module in ("presidio_analyzer", "presidio_anonymizer", "spacy"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'twinkle[pii]')"
    return None


@task(name="rewrite-pii", task_run_name="rewrite-pii-{shard}", cache_policy=STAGE_CACHE)
def rewrite_pii(rows: list[Any], upstream: str, shard: int, out: str) -> dict[str, Any]:
    """PIIPresidioFilter over one shard: personal data rewritten before anything is traced."""
    from twinkle.preprocessor.chain import Stage, curate_rows
    from twinkle.preprocessor.pii_presidio_filter import PIIPresidioFilter

    fp = fingerprint("pii", upstream, shard)
    log = _work_log(Path(out), f"pii-{fp}")
    kept, stats = curate_rows(rows, [Stage("pii", PIIPresidioFilter(), False)], dropped_log_path=log)
    return {"rows": kept, "fingerprint": fp, "steps": stats.as_dict()["steps"], "log": log}


@task(name="write-curated", task_run_name="write-curated", cache_policy=STAGE_CACHE, retries=2, retry_delay_seconds=1)
def write_curated(rows: list[Any], upstream: str, logs: list[str], curated_path: str,
                  dropped_path: str) -> dict[str, Any]:
    """Write the curated rows and the merged dropped log (``{step, reason, row}`` lines)."""
    from twinkle.io import write_rows

    Path(curated_path).parent.mkdir(parents=True, exist_ok=True)
    n = write_rows(curated_path, rows)
    dropped = 0
    with open(dropped_path, "wb") as sink:
        for log in logs:
            if log and os.path.exists(log):
                with open(log, "rb") as src:
                    data = src.read()
                dropped += data.count(b"\n")
                sink.write(data)
    return {"fingerprint": fingerprint("write", upstream, curated_path), "rows_out": n, "dropped": dropped}


def merge_steps(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-step stats of several shards summed (``PipelineStats`` merge, by step name)."""
    from twinkle.preprocessor.quality import PipelineStats

    total = PipelineStats()
    for steps in parts:
        shard = PipelineStats()
        for st in steps:
            shard.record(st["step"], st["rows_in"], st["rows_out"], st.get("dropped") or {}, st.get("seconds", 0.0))
        total.merge(shard)
    return total.as_dict()["steps"]


def run_curation(params: CurationParams, run: RunParams) -> dict[str, Any]:
    """The curation stages as tasks of the current flow run; returns the stage summary."""
    started = time.perf_counter()
    out = output_dir(run.output_dir)
    store = dict(out=out, refresh=run.refresh_cache)
    dedup_names = (["dedup"] if params.dedup else []) + (["neardedup"] if params.near_dedup else [])
    loaded = load_rows(params.inputs, files_fingerprint(params.inputs))
    deduped = with_storage(dedup_rows, **store)(quote(loaded["rows"]), loaded["fingerprint"], dedup_names, str(out))
    shards = chunks(deduped["rows"], params.shard_size)
    filtered = [f.result() for f in with_storage(run_filters, **store).map(
        [quote(s) for s in shards], deduped["fingerprint"], range(len(shards)), unmapped(params.filters), str(out))]
    parts = [deduped["steps"]] + [f["steps"] for f in filtered]
    logs = [deduped["log"]] + [f["log"] for f in filtered]

    pii_reason = None if params.pii != "off" else "disabled (pii='off')"
    if pii_reason is None:
        pii_reason = pii_available()
        if pii_reason and params.pii == "on":
            raise RuntimeError(f"pii='on' but the PII step cannot run: {pii_reason}")
    if pii_reason is None:
        filtered = [f.result() for f in with_storage(rewrite_pii, **store).map(
            [quote(f["rows"]) for f in filtered], [f["fingerprint"] for f in filtered], range(len(filtered)), str(out))]
        parts += [f["steps"] for f in filtered]
        logs += [f["log"] for f in filtered]
    rows = [r for f in filtered for r in f["rows"]]
    upstream = fingerprint(*[f["fingerprint"] for f in filtered])
    curated_path = str(out / "curated" / f"{params.dataset}.jsonl")
    dropped_path = str(out / "curated" / f"{params.dataset}.dropped.jsonl")
    written = with_storage(write_curated, **store)(quote(rows), upstream, logs, curated_path, dropped_path)
    steps = merge_steps(parts)
    return {
        "rows_in": loaded["rows_in"], "rows_out": written["rows_out"], "dropped": written["dropped"],
        "steps": steps, "curated_path": curated_path, "dropped_path": dropped_path,
        "fingerprint": written["fingerprint"], "rows": rows,
        "pii": "ran" if pii_reason is None else f"skipped: {pii_reason}",
        "settings": params.model_dump(), "seconds": time.perf_counter() - started,
    }


def publish_curation(result: dict[str, Any]) -> None:
    """Prefect artifacts: the drop-reason table and a markdown summary (stable keys)."""
    table = [{"step": st["step"], "reason": reason, "rows": n}
             for st in result["steps"] for reason, n in sorted((st.get("dropped") or {}).items())]
    create_table_artifact(key="curation-drop-reasons", table=table or [{"step": "-", "reason": "none", "rows": 0}],
                          description="Rows dropped per curation step and reason.")
    create_markdown_artifact(key="curation-summary", markdown="\n".join([
        "# Curation",
        f"- rows in: **{result['rows_in']}**, rows out: **{result['rows_out']}**, dropped: **{result['dropped']}**",
        f"- PII step: {result['pii']}",
        f"- curated data: `{result['curated_path']}`",
        f"- dropped log: `{result['dropped_path']}`",
    ]), description="Curation summary.")


@flow(name="twinkle-curation", log_prints=True)
def curation_flow(curation: CurationParams | None = None, tracking: TrackingParams | None = None,
             run: RunParams | None = None) -> dict[str, Any]:
    """Curate conversation datasets and record the run in MLflow."""
    curation, tracking, run = curation or CurationParams(), tracking or TrackingParams(), run or RunParams()
    if needs_ray_switch(run.ray_address):
        return curation_flow.with_options(task_runner=task_runner_for(run.ray_address, run.workers))(
            curation, tracking, run)
    ctx = start_tracking(tracking, tracking.run_key or flow_run_id(), "twinkle-curation",
                         {"curation": curation.model_dump(), "run": run.model_dump()})
    result = run_curation(curation, run)
    log_curation(ctx, quote(result))
    publish_curation(result)
    summary = {k: v for k, v in result.items() if k not in ("rows", "steps", "settings")}
    finish_tracking(ctx, {**summary, "mlflow_run_id": ctx.run_id})
    return {**summary, "mlflow_run_id": ctx.run_id}
