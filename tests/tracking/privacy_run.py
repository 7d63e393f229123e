"""The pipeline run both privacy tests search afterwards: the planted rows through curation
(PII step on), the rollout and MLflow tracking, with the dropped rows uploaded (so only after
their rewrite)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def run_planted(tmp: Path, rows: list[dict[str, Any]]) -> tuple[Any, Any]:
    """Run the pipeline flow over ``rows`` with its MLflow store in ``tmp``: its final state
    and its tracking parameters."""
    from flows.params import CurationParams, RolloutParams, RunParams, TrackingParams
    from flows.pipeline import pipeline_flow

    src = tmp / "planted.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    tracking = TrackingParams(
        tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}",
        artifact_location=str(tmp / "mlruns"),
        log_dropped_rows=True,  # uploaded, so only after the PII rewrite
    )
    # A password in a URL parameter is refused before any run exists (the parameter models,
    # tests/flows/test_flows_url_credentials.py); a URL without one is logged as it is.
    rollout = RolloutParams(tasks=[], concurrency=4, openenv_base_url="http://127.0.0.1:9/")
    state = pipeline_flow(
        CurationParams(inputs=[str(src)], pii="on"),
        rollout,
        tracking,
        RunParams(output_dir=str(tmp / "out")),
        return_state=True,
    )
    return state, tracking
