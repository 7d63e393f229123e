"""The pipeline flow tracking into a real MLflow tracking server (``infra/mlflow/start-server.sh``)
over HTTP: the REST store path of runs, metrics, artifacts and traces, which the SQLite tests
do not take (trace records then go one ``start_trace`` call each, spans through REST)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.flows.tests_flows_helpers import flow_state
from tests.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``http://127.0.0.1:<port>`` of the lean MLflow server the infra script starts."""
    data = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {
        **os.environ,
        "MLFLOW_DATA": str(data),
        "MLFLOW_PORT": str(port),
    }  # the script finds .venv/bin/mlflow
    log = open(data / "server.log", "w")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "mlflow" / "start-server.sh")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail(f"MLflow server did not start: {(data / 'server.log').read_text()[-2000:]}")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_pipeline_tracks_into_an_mlflow_server_and_a_rerun_adds_nothing(
    prefect_api, mlflow_server, tmp_path, conversations_file
):
    import mlflow

    from flows.params import CurationParams, RolloutParams, RunParams, TrackingParams
    from flows.pipeline import pipeline_flow

    cur = CurationParams(inputs=[conversations_file], pii="off")
    rol = RolloutParams(tasks=[], concurrency=4)
    tracking = TrackingParams(
        tracking_uri=mlflow_server, experiment="over-http", run_key="http-run-1"
    )
    run = RunParams(output_dir=str(tmp_path / "out"))
    state = pipeline_flow(cur, rol, tracking, run, return_state=True)
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert (
        summary["trajectories"] == 4
        and summary["traces_written"] == 4
        and summary["reward_mean"] == 1.0
    )

    client = mlflow.MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("over-http").experiment_id
    runs = client.search_runs([exp])
    stages = {r.data.tags.get("twinkle.stage"): r for r in runs}
    assert set(stages) == {None, "curation", "rollout"}
    assert stages["curation"].data.metrics["rows_in"] == 5
    assert stages["rollout"].data.metrics["reward.fidelity.mean"] == 1.0
    assert {a.path for a in client.list_artifacts(stages["rollout"].info.run_id, "data")} == {
        "data/examples.scored.jsonl"
    }
    traces = client.search_traces(locations=[exp], max_results=100)
    assert len(traces) == 4
    for trace in traces:
        assert [s.span_type for s in trace.data.spans].count("TOOL") == 2
        assert {a.name: a.value for a in trace.info.assessments} == {"fidelity": 1.0, "total": 1.0}
        assert trace.info.trace_metadata["mlflow.trace.session"] == "http-run-1"

    # The same run again, recomputed (no cache): the server already holds every trace.
    again = pipeline_flow(cur, rol, tracking, run.model_copy(update={"refresh_cache": True}))
    assert again["traces_written"] == 0 and again["trajectories"] == 4
    assert len(client.search_traces(locations=[exp], max_results=100)) == 4
    assert len(client.search_runs([exp])) == 3
