"""Curation flow: inputs -> dedup -> quality filters -> PII rewrite -> curated data, dropped log.

The chain runs as one task that streams (``twinkle.preprocessor.stream.curate_stream``):
rows go through the per-row steps ``batch_size`` at a time, so memory is bounded by the
batch and the dedup index, never by the input. Its work folder (under
``<output_dir>/.work``, named by the inputs' hash and the chain) keeps every finished shard
of ``shard_size`` rows, so a killed flow resumes at the first unfinished shard; the task's
result is cached on the same fingerprint plus the run's output paths, so a rerun with the
same inputs and settings finds it (state ``Cached``). With ``run.ray_address`` the chain
runs on that cluster with Ray Data instead (``twinkle.preprocessor.ray_backend.curate_ray``,
the same kept rows, resumable at the input chunk). The PII step
(``PIIPresidioFilter(all_fields=True)``, the chain's last step) runs when the ``pii`` extra
is installed; otherwise it is reported as skipped, with the reason, in the summary, the
Prefect artifact and MLflow.

Example:
    >>> from flows.curation import curation_flow
    >>> curation_flow.name
    'twinkle-curation'
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import (
    count_lines,
    files_fingerprint,
    fingerprint,
    flow_run_id,
    on_ray_if_asked,
    output_dir,
    stage_key,
    stage_task,
    work_path,
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

#: Rows per batch of the per-row steps (what the curation task holds besides the dedup index).
BATCH_SIZE = 1000


@task(name="curate-stream", task_run_name="curate-stream", cache_key_fn=stage_key)
def curate_data(
    inputs: list[str],
    names: list[str],
    params: dict[str, dict[str, Any]],
    input_format: str | None,
    curated_path: str,
    dropped_path: str,
    fp: str,
    work_dir: str,
    shard_rows: int,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """The chain ``names`` over ``inputs``, streamed: writes the curated file and the dropped
    log (``{step, reason, row}`` lines); returns the counts (no rows).

    Resumes from ``work_dir`` at the first unfinished shard (``curate_stream(resume=True)``).
    With ``ray_address`` the chain runs there on Ray Data (``curate_ray``), which resumes at
    the input chunk from its completion markers in ``<work_dir>.ray``.
    """
    if ray_address:
        from twinkle.preprocessor.ray_backend import curate_ray

        summary = curate_ray(
            inputs, curated_path, dropped_path, names, params=params, address=ray_address,
            batch_size=BATCH_SIZE, input_format=input_format, work_dir=f"{work_dir}.ray",
            resume=True,
        )  # fmt: skip
    else:
        from twinkle.preprocessor.stream import curate_stream

        summary = curate_stream(
            inputs, curated_path, dropped_path, names, params=params, batch_size=BATCH_SIZE,
            input_format=input_format, shard_rows=shard_rows, work_dir=work_dir, resume=True,
            progress=False,
        )  # fmt: skip
    if summary.shards_reused:
        stage_log(f"curation: resumed, {summary.shards_reused} of {summary.shards} shards done")
    return {
        "rows_in": summary.rows_in,
        "rows_out": summary.rows_out,
        "dropped": count_lines(dropped_path),
        "steps": summary.stats.as_dict()["steps"],
        "shards": summary.shards,
        "shards_reused": summary.shards_reused,
    }


def pii_available() -> str | None:
    """None when the PII step can run here, else why not."""
    if importlib.util.find_spec("twinkle.preprocessor.pii_presidio_filter") is None:
        return "no PII filter in twinkle.preprocessor"
    for module in ("presidio_analyzer", "presidio_anonymizer", "spacy"):
        if importlib.util.find_spec(module) is None:
            return str(MissingExtraError("the PII step", "pii", module=module))
    return None


def run_curation(
    params: CurationParams, run: RunParams, dest: Path | None = None
) -> dict[str, Any]:
    """The curation task of the current flow run; returns the stage summary (no rows).

    The chain is ``dedup``/``neardedup`` (as switched), ``params.filters``, then ``pii``
    (``all_fields=True``: ids and metadata too) when it runs. ``dest``: the run's own folder
    for the curated file and dropped log (default: the output folder); the stream's work
    folder and the task cache stay in the output folder, shared by every run.
    """
    started = time.perf_counter()
    out = output_dir(run.output_dir)
    dest = dest or out
    dedup_names = (["dedup"] if params.dedup else []) + (["neardedup"] if params.near_dedup else [])
    pii_reason = None if params.pii != "off" else "disabled (pii='off')"
    if pii_reason is None:
        pii_reason = pii_available()
        if pii_reason and params.pii == "on":
            raise RuntimeError(f"pii='on' but the PII step cannot run: {pii_reason}")
    names = dedup_names + list(params.filters) + (["pii"] if pii_reason is None else [])
    chain_params = {"pii": {"all_fields": True}} if pii_reason is None else {}
    # Folders and globs resolve to their files here, so the task and the cache key see the
    # same list; a save_to_disk folder stays one source.
    inputs = [str(p) for p in expand_sources(params.inputs)]
    fmt = params.input_format
    # The curated rows' identity (inputs' bytes, chain, format), not where a run writes
    # them: a later run (another folder) finds the rollout stages it feeds in the cache,
    # and the stream's finished shards in the work folder.
    fp = fingerprint("curate", files_fingerprint(inputs), names, chain_params, fmt)
    curated_path = str(dest / "curated" / f"{params.dataset}.jsonl")
    dropped_path = str(dest / "curated" / f"{params.dataset}.dropped.jsonl")
    backend = "ray" if run.ray_address else "stream"
    task_fp = fingerprint(backend, fp, curated_path, dropped_path)
    curate = stage_task(curate_data, out, run.refresh_cache, curated_path, dropped_path)
    if run.ray_address:
        curate = curate.with_options(name="curate-ray", task_run_name="curate-ray")
    written = curate(
        inputs,
        names,
        chain_params,
        None if fmt == "auto" else fmt,  # auto: rows in no known format reach the filters
        curated_path,
        dropped_path,
        task_fp,
        work_path(out, "curate", fp, ""),
        params.shard_size,
        run.ray_address,
    )
    return {
        "rows_in": written["rows_in"],
        "rows_out": written["rows_out"],
        "dropped": written["dropped"],
        "warning": empty_curation_warning(written),
        "steps": written["steps"],
        # A run in a new folder is not served from the task cache, but from the finished
        # shards of the work folder: a reuse the CLI lists too.
        "shards_reused": f"{written.get('shards_reused', 0)}/{written.get('shards', 0)}"
        if written.get("shards_reused")
        else None,
        "curated_path": curated_path,
        "dropped_path": dropped_path,
        "fingerprint": fp,
        "pii": "ran" if pii_reason is None else f"skipped: {pii_reason}",
        "settings": params.model_dump(),
        "seconds": time.perf_counter() - started,
    }


def empty_curation_warning(result: dict[str, Any]) -> str | None:
    """A warning when curation kept no row (the run then has nothing of its input to show),
    naming the commonest drop reasons; else None.

    Example:
        >>> steps = [{"step": "dedup", "dropped": {"malformed_messages": 3}}]
        >>> empty_curation_warning({"rows_in": 3, "rows_out": 0, "steps": steps})
        'curation kept 0 of 3 rows (dedup/malformed_messages: 3): nothing of the input goes on'
    """
    if result["rows_out"]:
        return None
    if not result["rows_in"]:
        return "curation read no rows from the inputs: nothing of the input goes on"
    drops = sorted(
        (
            (n, f"{st['step']}/{r}")
            for st in result["steps"]
            for r, n in (st.get("dropped") or {}).items()
        ),
        reverse=True,
    )
    reasons = ", ".join(f"{name}: {n}" for n, name in drops[:3])
    return f"curation kept 0 of {result['rows_in']} rows ({reasons}): nothing of the input goes on"


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
    warning = result.get("warning")
    if warning:
        stage_log(warning, warning=True)
    create_markdown_artifact(
        key="curation-summary",
        markdown="\n".join(
            [
                "# Curation",
                *([f"> **{warning}**", ""] if warning else []),
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
        summary = {
            k: v for k, v in result.items() if k not in ("steps", "settings", "shards_reused")
        }
        summary.update(mlflow_run_id=ctx.run_id, run_dir=str(dest), reused=reused_stages(result))
        finish_tracking(ctx, summary)
        point_latest(out, dest)
    return summary
