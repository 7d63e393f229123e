"""Curation flow: load -> dedup -> quality filters -> PII rewrite -> curated data and dropped log.

Each task wraps one library call (``twinkle.io``, ``twinkle.preprocessor.chain``,
``PIIPresidioFilter``) and passes its output to the next as a file (see ``flows.common``);
under a Ray task runner the filters run per shard, spread over the cluster. Results are
persisted and cached on the input files' hash + settings, so a crashed run resumes from
its last finished stage. The PII step runs when the ``pii`` extra
is installed; otherwise it is reported as skipped, with the reason, in the summary, the
Prefect artifact and MLflow.

Example:
    >>> from flows.curation import curation_flow
    >>> curation_flow.name
    'twinkle-curation'
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import (
    concat_files,
    count_lines,
    files_fingerprint,
    fingerprint,
    flow_run_id,
    on_ray_if_asked,
    output_dir,
    read_rows_cached,
    spans,
    stage_key,
    stage_task,
    work_path,
    write_work_rows,
)
from flows.lifecycle import (
    check_before_work,
    links_markdown,
    point_latest,
    quiet_third_party,
    reused_stages,
    run_folder,
    run_guard,
    run_name,
    stage_log,
)
from flows.params import CurationParams, RunParams, TrackingParams
from flows.tracking import finish_tracking, log_curation, start_tracking
from twinkle.errors import MissingExtraError
from twinkle.io_formats import expand_sources


def _dropped_log(path: str) -> str:
    """A dropped-row log owned by one stage result; cleared before the stage (re)runs."""
    from twinkle.preprocessor.quality import truncate_dropped_logs

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    truncate_dropped_logs(path)
    return path


@task(name="dedup-rows", task_run_name="dedup-rows", cache_key_fn=stage_key)
def dedup_rows(
    inputs: list[str], names: list[str], fp: str, out: str, input_format: str = "auto"
) -> dict[str, Any]:
    """Global dedup steps over the input files (they need every row at once).

    Writes the positions of the kept rows (a small JSON list), not the rows: the next
    stage reads the input files itself, from memory when it runs in this process.
    """
    from twinkle.preprocessor.chain import build_pipeline, curate_rows

    rows = read_rows_cached(inputs, input_format)
    keep, log, steps = list(range(len(rows))), None, []
    if names:
        log = _dropped_log(work_path(out, "dedup", fp, ".dropped.jsonl"))
        kept, stats = curate_rows(rows, build_pipeline(names), dropped_log_path=log)
        position = {id(r): i for i, r in enumerate(rows)}
        if any(
            id(r) not in position for r in kept
        ):  # a dedup step that copies rows breaks positions
            raise RuntimeError(
                f"dedup steps {names} returned new row objects; positions need the originals"
            )
        keep, steps = [position[id(r)] for r in kept], stats.as_dict()["steps"]
    path = work_path(out, "dedup", fp, ".json")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(keep))
    return {
        "path": path,
        "fingerprint": fp,
        "rows_in": len(rows),
        "rows": len(keep),
        "steps": steps,
        "log": log,
    }


@task(name="run-filters", task_run_name="run-filters-{shard}", cache_key_fn=stage_key)
def run_filters(
    inputs: list[str],
    kept_path: str,
    start: int,
    end: int,
    shard: int,
    names: list[str],
    fp: str,
    out: str,
    input_format: str = "auto",
) -> dict[str, Any]:
    """The per-batch quality filters over rows ``[start, end)`` of the deduplicated rows."""
    from twinkle.preprocessor.chain import build_pipeline, curate_rows

    rows = read_rows_cached(inputs, input_format)
    keep = json.loads(Path(kept_path).read_text())[start:end]
    log = _dropped_log(work_path(out, "filters", fp, ".dropped.jsonl"))
    kept, stats = curate_rows([rows[i] for i in keep], build_pipeline(names), dropped_log_path=log)
    path = work_path(out, "filters", fp)
    n = write_work_rows(path, kept)
    return {
        "path": path,
        "fingerprint": fp,
        "rows": n,
        "steps": stats.as_dict()["steps"],
        "log": log,
    }


def pii_available() -> str | None:
    """None when the PII step can run here, else why not."""
    if importlib.util.find_spec("twinkle.preprocessor.pii_presidio_filter") is None:
        return "no PII filter in twinkle.preprocessor"
    for module in ("presidio_analyzer", "presidio_anonymizer", "spacy"):
        if importlib.util.find_spec(module) is None:
            return str(MissingExtraError("the PII step", "pii", module=module))
    return None


@task(name="rewrite-pii", task_run_name="rewrite-pii-{shard}", cache_key_fn=stage_key)
def rewrite_pii(source: str, shard: int, fp: str, out: str) -> dict[str, Any]:
    """PIIPresidioFilter over one filtered shard: personal data rewritten before anything is
    traced."""
    from twinkle.preprocessor.chain import Stage, curate_rows
    from twinkle.preprocessor.pii_presidio_filter import PIIPresidioFilter

    log = _dropped_log(work_path(out, "pii", fp, ".dropped.jsonl"))
    kept, stats = curate_rows(
        read_rows_cached([source]),
        [Stage("pii", PIIPresidioFilter(all_fields=True), False)],  # ids, metadata too
        dropped_log_path=log,
    )
    path = work_path(out, "pii", fp)
    n = write_work_rows(path, kept)
    return {
        "path": path,
        "fingerprint": fp,
        "rows": n,
        "steps": stats.as_dict()["steps"],
        "log": log,
    }


@task(
    name="write-curated",
    task_run_name="write-curated",
    cache_key_fn=stage_key,
    retries=2,
    retry_delay_seconds=1,
)
def write_curated(
    shards: list[str], logs: list[str], curated_path: str, dropped_path: str, fp: str
) -> dict[str, Any]:
    """The curated file (the shards' rows, in order) and the merged dropped log
    (``{step, reason, row}`` lines)."""
    from twinkle.io import write_rows

    if curated_path.endswith(".jsonl"):
        concat_files(shards, curated_path)  # JSONL shards: bytes appended, nothing parsed
        rows_out = count_lines(curated_path)
    else:
        rows_out = write_rows(curated_path, read_rows_cached(shards))
    concat_files([log for log in logs if log], dropped_path)
    dropped = count_lines(dropped_path)
    return {"fingerprint": fp, "rows_out": rows_out, "dropped": dropped}


def merge_steps(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per-step stats of several shards summed (``PipelineStats`` merge, by step name)."""
    from twinkle.preprocessor.quality import PipelineStats

    total = PipelineStats()
    for steps in parts:
        shard = PipelineStats()
        for st in steps:
            shard.record(
                st["step"],
                st["rows_in"],
                st["rows_out"],
                st.get("dropped") or {},
                st.get("seconds", 0.0),
                st.get("tags"),
            )
        total.merge(shard)
    return total.as_dict()["steps"]


def run_curation(
    params: CurationParams, run: RunParams, dest: Path | None = None
) -> dict[str, Any]:
    """The curation stages as tasks of the current flow run; returns the stage summary (no rows).

    Filters and PII run as one task per ``shard_size`` rows under a Ray task runner (each
    shard on its own worker); under the thread-pool runner as one task, since threads share
    one interpreter and shards would only add file writes. ``dest``: the run's own folder
    for the curated file and dropped log (default: the output folder); stage caches stay in
    the output folder, shared by every run.
    """
    started = time.perf_counter()
    out = output_dir(run.output_dir)
    dest = dest or out
    o, refresh = str(out), run.refresh_cache
    dedup_names = (["dedup"] if params.dedup else []) + (["neardedup"] if params.near_dedup else [])
    # Folders and globs resolve to their files here, so every stage and the cache key see
    # the same list; a save_to_disk folder stays one source.
    inputs = [str(p) for p in expand_sources(params.inputs)]
    fmt = params.input_format
    source = files_fingerprint(inputs)
    fp = fingerprint("dedup", source, dedup_names, *([] if fmt == "auto" else [fmt]))
    deduped = stage_task(dedup_rows, out, refresh, work_path(o, "dedup", fp, ".json"))(
        inputs, dedup_names, fp, o, fmt
    )
    ranges = spans(deduped["rows"], params.shard_size if run.ray_address else None)
    fps = [fingerprint("filters", fp, a, b, params.filters) for a, b in ranges]
    futures = [
        stage_task(run_filters, out, refresh, work_path(o, "filters", fps[k])).submit(
            inputs, deduped["path"], a, b, k, params.filters, fps[k], o, fmt
        )
        for k, (a, b) in enumerate(ranges)
    ]
    filtered = [f.result() for f in futures]
    parts = [deduped["steps"]] + [f["steps"] for f in filtered]
    logs = [deduped["log"]] + [f["log"] for f in filtered]

    pii_reason = None if params.pii != "off" else "disabled (pii='off')"
    if pii_reason is None:
        pii_reason = pii_available()
        if pii_reason and params.pii == "on":
            raise RuntimeError(f"pii='on' but the PII step cannot run: {pii_reason}")
    if pii_reason is None:
        fps = [fingerprint("pii", f["fingerprint"], "all_fields") for f in filtered]
        futures = [
            stage_task(rewrite_pii, out, refresh, work_path(o, "pii", fps[k])).submit(
                f["path"], k, fps[k], o
            )
            for k, f in enumerate(filtered)
        ]
        filtered = [f.result() for f in futures]
        parts += [f["steps"] for f in filtered]
        logs += [f["log"] for f in filtered]
    curated_path = str(dest / "curated" / f"{params.dataset}.jsonl")
    dropped_path = str(dest / "curated" / f"{params.dataset}.dropped.jsonl")
    wfp = fingerprint("write", [f["fingerprint"] for f in filtered], curated_path, dropped_path)
    written = stage_task(write_curated, out, refresh, curated_path, dropped_path)(
        [f["path"] for f in filtered], logs, curated_path, dropped_path, wfp
    )
    return {
        "rows_in": deduped["rows_in"],
        "rows_out": written["rows_out"],
        "dropped": written["dropped"],
        "steps": merge_steps(parts),
        "curated_path": curated_path,
        "dropped_path": dropped_path,
        # The curated rows' identity, not where this run wrote them: a later run (another
        # folder) finds the rollout stages it feeds in the cache.
        "fingerprint": fingerprint("curated", [f["fingerprint"] for f in filtered]),
        "pii": "ran" if pii_reason is None else f"skipped: {pii_reason}",
        "settings": params.model_dump(),
        "seconds": time.perf_counter() - started,
    }


def publish_curation(result: dict[str, Any], ctx: Any = None) -> None:
    """Prefect artifacts: the drop-reason table and a markdown summary (stable keys), linked
    to the MLflow run ``ctx`` when given."""
    table = [
        {"step": st["step"], "reason": reason, "rows": n}
        for st in result["steps"]
        for reason, n in sorted((st.get("dropped") or {}).items())
    ]
    create_table_artifact(
        key="curation-drop-reasons",
        table=table or [{"step": "-", "reason": "none", "rows": 0}],
        description="Rows dropped per curation step and reason."
        + (f" MLflow run: {ctx.run_id}." if ctx is not None else ""),
    )
    stage_log(
        f"curation: {result['rows_in']} rows in, {result['rows_out']} out, "
        f"{result['dropped']} dropped; PII step {result['pii']}"
    )
    create_markdown_artifact(
        key="curation-summary",
        markdown="\n".join(
            [
                "# Curation",
                *([links_markdown(ctx)] if ctx is not None else []),
                f"- rows in: **{result['rows_in']}**, rows out: **{result['rows_out']}**, "
                f"dropped: **{result['dropped']}**",
                f"- PII step: {result['pii']}",
                *[
                    f"- {st['step']} tags: "
                    + ", ".join(f"{t}={n}" for t, n in sorted(st["tags"].items()))
                    for st in result["steps"]
                    if st.get("tags")
                ],
                f"- curated data: `{result['curated_path']}`",
                f"- dropped log: `{result['dropped_path']}`",
            ]
        ),
        description="Curation summary.",
    )


@flow(name="twinkle-curation", log_prints=True)
def curation_flow(
    curation: CurationParams | None = None,
    tracking: TrackingParams | None = None,
    run: RunParams | None = None,
) -> dict[str, Any]:
    """Curate conversation datasets and record the run in MLflow."""
    curation, tracking, run = (
        curation or CurationParams(),
        tracking or TrackingParams(),
        run or RunParams(),
    )
    on_ray = on_ray_if_asked(curation_flow, run, tracking, curation=curation)
    if on_ray is not None:
        return on_ray
    quiet_third_party()
    check_before_work(curation.inputs, None, tracking)
    ctx = start_tracking(
        tracking,
        tracking.run_key or flow_run_id(),
        "twinkle-curation",
        {"curation": curation.model_dump(), "run": run.model_dump()},
    )
    with run_guard(ctx):
        out = output_dir(run.output_dir)
        dest = run_folder(out, run_name(tracking))
        result = run_curation(curation, run, dest)
        log_curation(ctx, result)
        publish_curation(result, ctx)
        summary = {k: v for k, v in result.items() if k not in ("steps", "settings")}
        summary.update(mlflow_run_id=ctx.run_id, run_dir=str(dest), reused=reused_stages())
        finish_tracking(ctx, summary)
        point_latest(out, dest)
    return summary
