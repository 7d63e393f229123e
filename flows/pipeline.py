"""Pipeline flow: curation, then rollout and scoring of the curated conversations, in one run.

The flow body reads like the architecture diagram: curate (dedup, filters, PII rewrite),
then provision sandboxes, roll out, score and trace, each stage a set of small cached
tasks (``flows.curation``, ``flows.rollout``). The rollout re-runs the *curated* rows, so
what reaches MLflow traces has been through the PII rewrite. One MLflow run per flow run,
with a nested run per stage.

The run's state tells the truth: inputs, endpoint URLs and the tracking URI are checked
before any work (one line per problem), endpoints are probed once the MLflow run exists, a
rollout whose failed share exceeds ``rollout.max_failure_rate`` ends the flow run Failed
and its MLflow run FAILED, and any error or interruption ends the MLflow run FAILED or
KILLED (``flows.lifecycle``). Outputs go to ``<output_dir>/<run name>/`` with ``latest``
pointing at the newest finished run.

Example:
    >>> from flows.pipeline import pipeline_flow
    >>> pipeline_flow.name
    'twinkle-pipeline'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import flow

from flows.common import flow_run_id, on_ray_if_asked, output_dir
from flows.curation import publish_curation, run_curation
from flows.lifecycle import (
    check_before_work,
    point_latest,
    probe_endpoints,
    quiet_third_party,
    reused_stages,
    run_folder,
    run_guard,
    run_name,
)
from flows.params import CurationParams, RolloutParams, RunParams, TrackingParams
from flows.rollout import (
    SandboxEndpoint,
    close_run,
    rollout_summary,
    run_rollout,
    sandbox_endpoint,
)
from flows.tracking import log_curation, log_rollout, start_tracking


@flow(name="twinkle-pipeline", log_prints=True)
def pipeline_flow(
    curation: CurationParams | None = None,
    rollout: RolloutParams | None = None,
    tracking: TrackingParams | None = None,
    run: RunParams | None = None,
    progress: Callable[[str, int, int], Any] | None = None,
) -> dict[str, Any]:
    """Curate conversations, re-run them in sandboxes (plus task environments), score, trace.

    ``progress``: ``callable(stage, done, total)`` for a caller in this process (a CLI bar).
    """
    curation, rollout = curation or CurationParams(), rollout or RolloutParams()
    tracking, run = tracking or TrackingParams(), run or RunParams()
    on_ray = on_ray_if_asked(pipeline_flow, run, tracking, curation=curation, rollout=rollout)
    if on_ray is not None:
        return on_ray
    quiet_third_party()
    check_before_work(curation.inputs, rollout, tracking)
    with sandbox_endpoint(rollout.sandbox) as endpoint:  # first: see sandbox_endpoint
        return _pipeline(curation, rollout, tracking, run, endpoint, progress)


def _pipeline(
    curation: CurationParams,
    rollout: RolloutParams,
    tracking: TrackingParams,
    run: RunParams,
    endpoint: SandboxEndpoint,
    progress: Callable[[str, int, int], Any] | None = None,
) -> dict[str, Any]:
    ctx = start_tracking(
        tracking,
        tracking.run_key or flow_run_id(),
        "twinkle-pipeline",
        {
            "curation": curation.model_dump(),
            "rollout": rollout.model_dump(),
            "run": run.model_dump(),
        },
    )
    with run_guard(ctx):
        probe_endpoints(rollout, endpoint)
        out = output_dir(run.output_dir)
        dest = run_folder(out, run_name(tracking))
        curated = run_curation(curation, run, dest)
        # Logging the curation stage overlaps the rollout stage (it waits on sandboxes and
        # the model).
        curation_logged = log_curation.submit(ctx, curated)
        publish_curation(curated, ctx)

        rolled = run_rollout(
            rollout,
            run,
            endpoint,
            conversations=[curated["curated_path"]],
            ctx=ctx,
            tracking=tracking,
            conversations_fp=curated["fingerprint"],
            dest=dest,
            progress=progress,
        )
        endpoint.release()  # a local sandbox server shuts down while the results are logged
        tracked = log_rollout(ctx, rolled["stage_run_id"], rolled)
        curation_logged.result()

        summary = {
            "rows_in": curated["rows_in"],
            "rows_out": curated["rows_out"],
            "dropped": curated["dropped"],
            "drops": {
                f"{st['step']}/{r}": n
                for st in curated["steps"]
                for r, n in (st.get("dropped") or {}).items()
            },
            "pii": curated["pii"],
            "curated_path": curated["curated_path"],
            "dropped_path": curated["dropped_path"],
            "curation_s": curated["seconds"],
            **rollout_summary(rolled, tracked),
            "mlflow_run_id": ctx.run_id,
            "tracking_uri": ctx.tracker.tracking_uri,
            "experiment_id": ctx.tracker.experiment_id,
            "run_key": ctx.run_key,
            "run_dir": str(dest),
            "reused": reused_stages(curated),
            **({"warning": curated["warning"]} if curated.get("warning") else {}),
        }
        close_run(ctx, rolled, tracked, rollout, summary)
        point_latest(out, dest)
    return summary
