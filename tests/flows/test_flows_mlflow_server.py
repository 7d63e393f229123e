"""The pipeline flow tracking into a real MLflow tracking server (``infra/mlflow/start-server.sh``)
over HTTP: the REST store path of runs, metrics, artifacts and traces, which the SQLite tests
do not take (trace records then go one ``start_trace`` call each, spans through REST); and
``twinkle run`` given the server's URL with a user and password in it, which end up in
neither the Prefect database nor the MLflow store."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.flows.tests_flows_helpers import files_holding, flow_state, prefect_db_files
from tests.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlflow_server_data(tmp_path_factory):
    """The folder of the MLflow server's store (its database and artifacts)."""
    return tmp_path_factory.mktemp("mlflow-server")


@pytest.fixture(scope="module")
def mlflow_server(mlflow_server_data):
    """``http://127.0.0.1:<port>`` of the lean MLflow server the infra script starts."""
    data = mlflow_server_data
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


def test_twinkle_run_moves_a_tracking_password_out_of_the_url(
    prefect_api, mlflow_server, mlflow_server_data, tmp_path, conversations_file
):
    import uuid

    import mlflow
    from click.testing import CliRunner

    from twinkle.cli import main

    secret = f"Pw{uuid.uuid4().hex[:12]}"
    host = mlflow_server.split("://", 1)[1]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--input",
            conversations_file,
            "--output",
            str(out),
            "--tracking-uri",
            f"http://twinkle:{secret}@{host}",
            "--experiment",
            "with-credentials",
            "--log-dropped-rows",
        ],
    )
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    # MLflow had them for the run only (its basic-auth variables), not after.
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ

    client = mlflow.MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("with-credentials").experiment_id
    runs = client.search_runs([exp])
    stages = {r.data.tags.get("twinkle.stage"): r for r in runs}
    assert set(stages) == {None, "curation", "rollout"}
    assert stages[None].info.status == "FINISHED"
    # --log-dropped-rows: the dropped log went up, after the PII rewrite.
    dropped = stages["curation"].data.tags["dropped_rows"]
    assert dropped.startswith("logged after the PII rewrite"), dropped
    assert "data/examples.dropped.jsonl" in {
        a.path for a in client.list_artifacts(stages["curation"].info.run_id, "data")
    }
    flow_run_id = stages[None].data.tags["prefect.flow_run_id"]
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as prefect:
        stored = prefect.read_flow_run(flow_run_id).parameters
    assert stored["tracking"]["tracking_uri"] == mlflow_server
    assert files_holding(secret, *prefect_db_files(), mlflow_server_data, out) == []
    # The report names the run's page on the server; MLflow's own link lines stay out.
    page = f"{mlflow_server}/#/experiments/{exp}/runs/{stages[None].info.run_id}"
    assert page in result.output and "View run" not in result.output


def test_twinkle_run_json_output_stays_json_with_a_server(
    prefect_api, mlflow_server, tmp_path, conversations_file
):
    import json

    from click.testing import CliRunner

    from twinkle.cli import main

    args = ["run", "--input", conversations_file, "--output", str(tmp_path / "out"), "--json"]
    args += ["--tracking-uri", mlflow_server, "--experiment", "json-out"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # one JSON object, nothing printed around it
    assert summary["traces_written"] == summary["trajectories"] > 0
