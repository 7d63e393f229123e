"""Pipeline flow: curation, then rollout and scoring of the curated conversations, in one run.

The flow body reads like the architecture diagram: curate (dedup, filters, PII rewrite),
then provision sandboxes, roll out, score and trace, each stage a set of small cached
tasks (``flows.curation``, ``flows.rollout``). The rollout re-runs the *curated* rows, so
what reaches MLflow traces has been through the PII rewrite. One MLflow run per flow run,
with a nested run per stage.

Example:
    >>> from flows.pipeline import pipeline_flow
    >>> pipeline_flow.name
    'twinkle-pipeline'
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.common import flow_run_id, on_ray_if_asked
from flows.curation import publish_curation, run_curation
from flows.params import CurationParams, RolloutParams, RunParams, TrackingParams
from flows.rollout import (
    SandboxEndpoint,
    publish_rollout,
    rollout_summary,
    run_rollout,
    sandbox_endpoint,
)
from flows.tracking import finish_tracking, log_curation, log_rollout, start_tracking


@flow(name="twinkle-pipeline", log_prints=True)
def pipeline_flow(
    curation: CurationParams | None = None,
    rollout: RolloutParams | None = None,
    tracking: TrackingParams | None = None,
    run: RunParams | None = None,
) -> dict[str, Any]:
    """Curate conversations, re-run them in sandboxes (plus task environments), score, trace."""
    curation, rollout = curation or CurationParams(), rollout or RolloutParams()
    tracking, run = tracking or TrackingParams(), run or RunParams()
    on_ray = on_ray_if_asked(pipeline_flow, run, tracking, curation=curation, rollout=rollout)
    if on_ray is not None:
        return on_ray
    with sandbox_endpoint(rollout.sandbox) as endpoint:  # first: see sandbox_endpoint
        return _pipeline(curation, rollout, tracking, run, endpoint)


def _pipeline(
    curation: CurationParams,
    rollout: RolloutParams,
    tracking: TrackingParams,
    run: RunParams,
    endpoint: SandboxEndpoint,
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

    curated = run_curation(curation, run)
    # Logging the curation stage overlaps the rollout stage (it waits on sandboxes and the model).
    curation_logged = log_curation.submit(ctx, curated)
    publish_curation(curated)

    rolled = run_rollout(
        rollout,
        run,
        endpoint,
        conversations=[curated["curated_path"]],
        ctx=ctx,
        tracking=tracking,
        conversations_fp=curated["fingerprint"],
    )
    endpoint.release()  # a local sandbox server shuts down while the results are logged
    tracked = log_rollout(ctx, rolled["stage_run_id"], rolled)
    curation_logged.result()
    publish_rollout(rolled, tracked)

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
    }
    finish_tracking(ctx, summary)
    return summary
