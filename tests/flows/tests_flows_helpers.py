"""Helpers shared by the flow tests: Prefect states and the MLflow store of a test."""

from __future__ import annotations

from typing import Any


def flow_state(state: Any) -> str:
    """The flow run's state type as stored by the Prefect API (not just the local object)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(state.state_details.flow_run_id).state.type.value


def task_states(state: Any) -> dict[str, str]:
    """Task run name -> state name for the flow run behind ``state``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
            )
        )
    return {r.name: r.state.name for r in runs}


def mlflow_client(tracking: Any) -> tuple[Any, str]:
    import mlflow

    client = mlflow.MlflowClient(tracking.tracking_uri)
    return client, client.get_experiment_by_name(tracking.experiment).experiment_id


def prefect_db_files() -> list[str]:
    """The files of the test Prefect API's SQLite database (journals included), once the
    run logs still queued in this process have been sent."""
    import glob

    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    APILogHandler().flush()

    path = PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1]
    return sorted(glob.glob(path + "*"))


def files_holding(secret: str, *places: Any) -> list[str]:
    """Files (given, or under the folders given) whose bytes contain ``secret``."""
    from pathlib import Path

    files: list[Path] = []
    for place in places:
        p = Path(place)
        files += [f for f in p.rglob("*") if f.is_file()] if p.is_dir() else [p]
    return [str(f) for f in files if f.exists() and secret.encode() in f.read_bytes()]


def flow_run_logs(flow_run_id: Any) -> str:
    """The Prefect run log of a flow run (its task runs' lines too), one line per entry."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # the run's lines still queued in this process
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
        )
    return "\n".join(entry.message for entry in logs)


def flow_run_artifacts(flow_run_id: Any) -> dict[str, Any]:
    """Key -> artifact, for the keyed artifacts of a flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {a.key: a for a in artifacts if a.key}
