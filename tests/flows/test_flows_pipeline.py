"""The flows under a real Prefect API, with a real MLflow store, sandbox server and
OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client, task_states

pytestmark = pytest.mark.slow


def _params(tmp_path, conversations_file, **rollout):
    from flows.params import CurationParams, RolloutParams, RunParams

    cur = CurationParams(inputs=[conversations_file], pii="off")
    rol = RolloutParams(tasks=[], concurrency=4, **rollout)
    return cur, rol, RunParams(output_dir=str(tmp_path / "out"))


def test_pipeline_replays_in_sandboxes_and_tracks_everything(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    from flows.pipeline import pipeline_flow

    cur, rol, run = _params(tmp_path, conversations_file)
    state = pipeline_flow(cur, rol, tracking_params, run, return_state=True)
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert (summary["rows_in"], summary["rows_out"]) == (5, 4)
    assert summary["drops"] == {"DedupFilter/duplicate": 1}
    assert summary["pii"].startswith("skipped")
    assert summary["trajectories"] == 4 and summary["failed"] == 0
    assert summary["stop_reasons"] == {"stop": 4}
    assert summary["reward_mean"] == 1.0  # every recorded tool result reproduced live

    client, exp = mlflow_client(tracking_params)
    runs = client.search_runs([exp])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    stages = {r.data.tags["twinkle.stage"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    assert set(stages) == {"curation", "rollout"}
    assert stages["curation"].data.metrics["rows_in"] == 5
    assert stages["curation"].data.metrics["drops.DedupFilter.duplicate"] == 1
    assert stages["rollout"].data.metrics["reward.fidelity.mean"] == 1.0
    assert stages["rollout"].data.metrics["stop_reason.stop"] == 4
    traces = client.search_traces(locations=[exp])
    assert len(traces) == 4
    for trace in traces:
        assert len(trace.search_spans(span_type="AGENT")) == 1
        assert len(trace.search_spans(span_type="LLM")) == 3
        assert len(trace.search_spans(span_type="TOOL")) == 2
        assert {a.name: a.value for a in trace.info.assessments} == {"fidelity": 1.0, "total": 1.0}
        assert trace.info.trace_metadata["mlflow.trace.session"] == summary["run_key"]
    files = {a.path for a in client.list_artifacts(stages["rollout"].info.run_id, "data")}
    assert files == {"data/examples.scored.jsonl"}
    scored = [json.loads(line) for line in open(summary["scored_path"])]
    assert all(t["rewards"]["fidelity"] == 1.0 for t in scored)
    # The rollout's progress, as the Prefect UI shows it: a progress artifact of the flow run.
    progress = _progress_artifacts(state)
    assert [(a.data, a.description) for a in progress] == [(100.0, "rollout: 4/4 finished")]


def _progress_artifacts(state) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterType,
    )

    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id]),
                type=ArtifactFilterType(any_=["progress"]),
            )
        )


def test_rerun_with_the_same_key_resumes_cached_stages_without_duplicates(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    from flows.pipeline import pipeline_flow

    cur, rol, run = _params(tmp_path, conversations_file)
    tracking = tracking_params.model_copy(update={"run_key": "nightly-42"})
    first = pipeline_flow(cur, rol, tracking, run, return_state=True)
    second = pipeline_flow(cur, rol, tracking, run, return_state=True)
    assert flow_state(first) == flow_state(second) == "COMPLETED"
    states = task_states(second)
    assert states["run-rollouts-0"] == "Cached" and states["curate-stream"] == "Cached"
    client, exp = mlflow_client(tracking_params)
    assert len(client.search_runs([exp])) == 3  # one run + two stages, found again by key
    assert len(client.search_traces(locations=[exp])) == 4
    assert second.result()["traces_written"] == 0
    # Stages pass files, not rows: every persisted task result is a small summary.
    results = [p for p in (tmp_path / "out" / ".prefect-results").rglob("*") if p.is_file()]
    assert results and max(p.stat().st_size for p in results) < 20_000

    # Another run (new key) over the same outputs: stages cached, its own traces written from the
    # file.
    other = pipeline_flow(
        cur,
        rol,
        tracking_params.model_copy(update={"run_key": "nightly-43"}),
        run,
        return_state=True,
    )
    states = task_states(other)
    assert states["run-rollouts-0"] == "Cached" and states["trace-trajectories-0"] == "Completed"
    assert other.result()["traces_written"] == 4 and other.result()["reward_mean"] == 1.0
    assert (
        len(
            client.search_traces(
                locations=[exp], filter_string="tag.`twinkle.session` = 'nightly-43'"
            )
        )
        == 4
    )


def test_task_environments_with_a_live_policy_get_rewards_and_token_usage(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.integrations.rollout_bridge import trajectories_for
    from twinkle.testing.openai_server import OpenAIServer

    tasks = trajectories_for("math", [0, 1, 2])
    answers = {
        t["messages"][-1]["content"]: json.loads(dict(t["user_data"])["ground_truth"])
        for t in tasks
    }
    answers[tasks[2]["messages"][-1]["content"]] = "wrong"

    def respond(request):
        question = request["messages"][-1]["content"]
        return {"content": f"The answer is \\boxed{{{answers.get(question, '0')}}}."}

    with OpenAIServer(respond) as server:
        rollout = RolloutParams(
            conversations=[],
            tasks=["math"],
            tasks_limit=3,
            policy=PolicyParams(base_url=server.base_url, model="test-model"),
        )
        state = rollout_flow(
            rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
        )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 3 and summary["pass_rate"] == pytest.approx(2 / 3)
    client, exp = mlflow_client(tracking_params)
    traces = client.search_traces(locations=[exp])
    totals = sorted(float(t.info.tags["reward.total"]) for t in traces)
    assert totals == [0.0, 1.0, 1.0]
    llm = traces[0].search_spans(span_type="LLM")[0]
    assert llm.attributes["mlflow.chat.tokenUsage"]["input_tokens"] > 0


_KILLED_RUN = """
import sys
from flows.pipeline import pipeline_flow
from flows.params import CurationParams, PolicyParams, RolloutParams, RunParams, TrackingParams
pipeline_flow(CurationParams(inputs=[sys.argv[1]], pii="off"),
              RolloutParams(tasks=[], policy=PolicyParams(base_url=sys.argv[2], model="m")),
              TrackingParams(tracking_uri=sys.argv[3], run_key="killed"),
              RunParams(output_dir=sys.argv[4]))
"""


def test_a_flow_killed_halfway_resumes_from_finished_stages(
    prefect_api, tmp_path, conversations_file, tracking_params
):
    from flows.params import RolloutParams, RunParams
    from flows.pipeline import pipeline_flow
    from twinkle.testing.openai_server import OpenAIServer, echo

    out = tmp_path / "out"
    curated = out / "killed" / "curated" / "examples.jsonl"  # the run key's own folder
    with OpenAIServer(echo(), delay_ms=60_000) as slow:  # the rollout stage hangs until killed
        env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(Path.cwd())}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _KILLED_RUN,
                conversations_file,
                slow.base_url,
                tracking_params.tracking_uri,
                str(out),
            ],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.time() + 120
            while not slow.requests and time.time() < deadline and proc.poll() is None:
                time.sleep(0.2)
            assert slow.requests, "the killed run never reached the rollout stage"
            assert curated.exists()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    cur, _, run = _params(tmp_path, conversations_file)
    rerun = pipeline_flow(
        cur,
        RolloutParams(tasks=[], concurrency=4),
        tracking_params.model_copy(update={"run_key": "killed"}),
        RunParams(output_dir=str(out)),
        return_state=True,
    )
    assert flow_state(rerun) == "COMPLETED"
    states = task_states(rerun)
    assert states["curate-stream"] == "Cached"  # the curation task, found by fingerprint
    assert states["run-rollouts-0"] == "Completed"  # new policy settings: this stage runs again
    assert rerun.result()["reward_mean"] == 1.0
    client, exp = mlflow_client(tracking_params)
    assert (
        len(
            [r for r in client.search_runs([exp]) if r.data.tags.get("twinkle.run_key") == "killed"]
        )
        == 1
    )
