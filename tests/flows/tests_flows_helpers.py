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
