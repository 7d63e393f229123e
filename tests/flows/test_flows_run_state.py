"""A run's state tells the truth: a dead or failing endpoint fails the flow run in Prefect, the
run in MLflow and ``twinkle run``; errors are never rewards; a rerun closes what an earlier
attempt left RUNNING; each run writes to its own folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.flows.tests_flows_helpers import (
    flow_run_artifacts,
    flow_run_logs,
    flow_state,
    mlflow_client,
    task_states,
)
from tests.net import free_port

pytestmark = pytest.mark.slow


def _runs(tracking, key: str) -> list:
    client, exp = mlflow_client(tracking)
    return [r for r in client.search_runs([exp]) if r.data.tags.get("twinkle.run_key") == key]


def test_a_dead_endpoint_fails_the_cli_the_prefect_run_and_the_mlflow_run(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    from prefect.client.orchestration import get_client

    from twinkle.cli import main

    dead = f"http://127.0.0.1:{free_port()}/v1"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--input",
            conversations_file,
            "--output",
            str(tmp_path / "out"),
            "--tracking-uri",
            tracking_params.tracking_uri,
            "--base-url",
            dead,
            "--model",
            "x",
        ],
    )
    assert result.exit_code == 1, result.output
    assert f"policy endpoint {dead}/models: unreachable" in result.output
    assert "Traceback" not in result.output
    client, exp = mlflow_client(tracking_params)
    [run] = client.search_runs([exp])
    assert run.info.status == "FAILED"
    assert "unreachable" in run.data.tags["twinkle.error"]
    flow_run_id = run.data.tags["twinkle.run_key"]  # the CLI keys the MLflow run by the flow run
    with get_client(sync_client=True) as prefect:
        assert prefect.read_flow_run(flow_run_id).state.type.value == "FAILED"


def test_endpoint_errors_over_the_threshold_fail_the_run_and_are_never_rewards(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.rollout.runner import RunFailedError
    from twinkle.testing.openai_server import OpenAIServer, echo, failing_first

    run = RunParams(output_dir=str(tmp_path / "out"))
    with OpenAIServer(failing_first(10**6, status=500)) as server:  # /models answers, chat 500s
        rollout = RolloutParams(
            conversations=[conversations_file],
            tasks=["math"],
            tasks_limit=2,
            policy=PolicyParams(base_url=server.base_url, model="m", request_timeout_s=30),
        )
        failed = rollout_flow(
            rollout, tracking_params.model_copy(update={"run_key": "over"}), run, return_state=True
        )
        [parent] = _runs(tracking_params, "over")
        failed_status = parent.info.status
        tolerated = rollout_flow(
            rollout.model_copy(update={"max_failure_rate": 1.0}),
            tracking_params.model_copy(update={"run_key": "under"}),
            run,
            return_state=True,
        )
        # The endpoint is back: the failed rollout was not cached, so a rerun asks again.
        server.responder, asked = echo(), len(server.requests)
        healed = rollout_flow(
            rollout, tracking_params.model_copy(update={"run_key": "over"}), run, return_state=True
        )
        assert flow_state(healed) == "COMPLETED" and healed.result()["failed"] == 0
        assert len(server.requests) - asked == 7  # one answer per trajectory, no tool calls
        assert task_states(healed)["run-rollouts-0"] == "Completed"
    assert flow_state(failed) == "FAILED"
    error = failed.result(raise_on_failure=False)
    assert isinstance(error, RunFailedError)
    message = str(error)
    assert "7 of 7 trajectories failed" in message  # 5 conversations + 2 tasks
    assert f"policy endpoint {server.base_url}: HTTP 500" in message
    assert "first errors: " in message and "(endpoint " in message
    assert failed_status == "FAILED"
    client, exp = mlflow_client(tracking_params)
    healed_run = client.get_run(healed.result()["mlflow_run_id"])
    assert healed_run.info.run_id == parent.info.run_id  # the rerun of the key logs into it
    assert healed_run.info.status == "FINISHED"

    assert flow_state(tolerated) == "COMPLETED"
    summary = tolerated.result()
    assert summary["failed"] == 7 and summary["failure_rate"] == 1.0
    assert summary["warning"].startswith("rollout: 7 of 7 trajectories failed (100%, within")
    # The same warning in the Prefect run log and at the top of the rollout artifact.
    tolerated_id = tolerated.state_details.flow_run_id
    assert summary["warning"] in flow_run_logs(tolerated_id)
    assert f"> **{summary['warning']}**" in flow_run_artifacts(tolerated_id)["rollout-summary"].data
    assert summary["reward_mean"] is None  # nothing was scored: errors are not 0.0 rewards
    scored = [json.loads(line) for line in Path(summary["scored_path"]).read_text().splitlines()]
    assert all(t["rewards"] == {} and t["reward_outcome"] == "failed" for t in scored)
    [stage] = _runs(tracking_params, "under#stage")
    assert not any(k.startswith("reward.") for k in stage.data.metrics)
    traces = client.search_traces(locations=[exp], filter_string="tag.status = 'failed'")
    assert traces and all(not t.info.assessments for t in traces)  # no feedback from errors
    assert _runs(tracking_params, "under")[0].info.status == "FINISHED"


def test_a_missing_input_fails_before_work_and_leaves_no_mlflow_run(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import CurationParams, RolloutParams, RunParams
    from flows.pipeline import pipeline_flow
    from twinkle.preflight import PreflightError

    state = pipeline_flow(
        CurationParams(inputs=[str(tmp_path / "nope.jsonl")]),
        RolloutParams(tasks=[]),
        tracking_params,
        RunParams(output_dir=str(tmp_path / "out")),
        return_state=True,
    )
    assert flow_state(state) == "FAILED"
    error = state.result(raise_on_failure=False)
    assert isinstance(error, PreflightError) and "nope.jsonl does not exist" in str(error)
    assert not Path(tracking_params.tracking_uri[len("sqlite:///") :]).exists()


def test_a_rerun_closes_stale_runs_of_its_key_and_writes_its_own_folder(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    from flows.params import RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.tracking import MLflowTracker

    tracker = MLflowTracker(
        tracking_params.tracking_uri, artifact_location=tracking_params.artifact_location
    )
    parent = tracker.start_run("again")  # RUNNING, as a killed attempt leaves it
    stale = tracker.start_stage(parent, "again", "old-stage")
    out = tmp_path / "out"
    state = rollout_flow(
        RolloutParams(conversations=[conversations_file], tasks=[]),
        tracking_params.model_copy(update={"run_key": "again"}),
        RunParams(output_dir=str(out)),
        return_state=True,
    )
    assert flow_state(state) == "COMPLETED"
    client, _ = mlflow_client(tracking_params)
    assert client.get_run(stale).info.status == "KILLED"
    assert client.get_run(parent).info.status == "FINISHED"
    summary = state.result()
    assert Path(summary["scored_path"]).parent.parent == out / "again" == Path(summary["run_dir"])
    assert (out / "latest").resolve() == (out / "again").resolve()


_CRASHING_RUN = """
import sys
from flows.rollout import rollout_flow
from flows.params import PolicyParams, RolloutParams, RunParams, TrackingParams
rollout_flow(RolloutParams(conversations=[sys.argv[1]], tasks=[], concurrency=5,
                           policy=PolicyParams(base_url=sys.argv[2], model="m")),
             TrackingParams(tracking_uri=sys.argv[3], run_key="resume"),
             RunParams(output_dir=sys.argv[4]))
"""


def test_a_crashed_rollout_resumes_at_the_trajectory(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    import os
    import signal
    import subprocess
    import sys
    import time

    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.testing.openai_server import OpenAIServer, Reply, echo

    answer = echo()

    def hang_on_21(request):  # conversation 3 ("Write the number 21 ...") never gets an answer
        text = json.dumps(request.get("messages"))
        return (
            Reply(body={"error": "late"}, status=500, delay_s=600)
            if "21" in text
            else answer(request)
        )

    out = tmp_path / "out"
    with OpenAIServer(hang_on_21) as server:
        env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(Path.cwd())}
        args = [conversations_file, server.base_url, tracking_params.tracking_uri, str(out)]
        proc = subprocess.Popen(
            [sys.executable, "-c", _CRASHING_RUN, *args],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline, done = time.time() + 120, 0
            while time.time() < deadline and proc.poll() is None and done < 4:
                time.sleep(0.2)
                partial = list((out / ".work").glob("rollout-*.partial.jsonl"))
                done = len(partial[0].read_text().splitlines()) if partial else 0
            assert done == 4, "the crashing run never finished its four quick trajectories"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

        server.responder = answer
        asked = len(server.requests)
        state = rollout_flow(
            RolloutParams(
                conversations=[conversations_file],
                tasks=[],
                concurrency=5,
                policy=PolicyParams(base_url=server.base_url, model="m"),
            ),
            tracking_params.model_copy(update={"run_key": "resume"}),
            RunParams(output_dir=str(out)),
            return_state=True,
        )
        assert flow_state(state) == "COMPLETED"
        assert len(server.requests) - asked == 1  # only the unfinished trajectory is re-requested
    summary = state.result()
    assert summary["trajectories"] == 5 and summary["failed"] == 0
    assert not list((out / ".work").glob("rollout-*.partial.jsonl"))  # removed once written


def test_twinkle_run_stopped_by_sigterm_ends_its_mlflow_run_killed(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    import os
    import signal
    import subprocess
    import sys
    import time

    from twinkle.testing.openai_server import OpenAIServer, echo

    # Slow answers: the rollout (60 task trajectories, 8 at a time) is still going when stopped.
    with OpenAIServer(echo(), delay_ms=2_000) as slow:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "twinkle",
                "run",
                "--input",
                conversations_file,
                "--output",
                str(tmp_path / "out"),
                "--tracking-uri",
                tracking_params.tracking_uri,
                "--base-url",
                slow.base_url,
                "--model",
                "m",
            ],
            env={**os.environ, "PREFECT_API_URL": prefect_api},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.time() + 180
            while not slow.requests and time.time() < deadline and proc.poll() is None:
                time.sleep(0.2)
            assert slow.requests, "the run never reached the rollout stage"
            proc.send_signal(signal.SIGTERM)  # a closed terminal, `kill`
            output, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, output[-3000:]
    assert "interrupted; the MLflow run is marked KILLED" in output
    # The rollout was cancelled at once, not left running while the flow tore down its
    # sandbox server, where every trajectory still to start failed ("56 of 64 trajectories
    # failed; first: SandboxError: ... Connection refused") before the process could exit.
    assert "trajectories failed" not in output, output[-3000:]
    client, exp = mlflow_client(tracking_params)
    status = {r.data.tags.get("twinkle.stage"): r.info.status for r in client.search_runs([exp])}
    # The curation had finished; the run and its rollout stage had not.
    assert status == {None: "KILLED", "curation": "FINISHED", "rollout": "KILLED"}
