"""The flows on a real Ray cluster (``RayTaskRunner`` via ``RunParams.ray_address``) under a
real Prefect API: the same results as the thread-pool runner, the curation chain on Ray Data
(``curate_ray``), the rollouts split into shard tasks that run in Ray worker processes, one
MLflow trace per trajectory.

The cluster is a separate ``ray start --head`` process (its own session, temp dir and ports),
so the flows connect to it by address as a deployment would. Its worker processes get the
Prefect API URL and the repository on ``PYTHONPATH`` from the head's environment.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import suppress
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client, task_states
from tests.net import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


@pytest.fixture(scope="module")
def ray_head(prefect_api):
    """``(address, worker_logs_dir)`` of a 2-CPU Ray head started for this module, stopped after
    it."""
    import ray
    from ray._private.authentication_test_utils import reset_auth_token_state

    assert not ray.is_initialized(), "a Ray runtime of another test is still up in this process"
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths live under it
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api,
        "RAY_USAGE_STATS_ENABLED": "0",
        # ``ray start`` turns token auth on when ~/.ray/auth_token exists, but a driver given an
        # explicit address does not: say "token" on both sides, and make sure the token exists.
        "RAY_AUTH_MODE": "token",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    subprocess.run(
        [*RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60
    )
    with open(Path(temp) / "head.log", "w") as log:  # the child keeps its own copy of the file
        proc = subprocess.Popen(
            [
                *RAY,
                "start",
                "--head",
                "--block",
                "--port=0",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--object-store-memory=200000000",
                f"--temp-dir={temp}",
                "--disable-usage-stats",
                f"--dashboard-port={free_port()}",
                f"--ray-client-server-port={free_port()}",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        address_file = Path(temp) / "ray_current_cluster"  # written once the head is up
        deadline = time.time() + 120
        while not address_file.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert address_file.exists(), (
            f"Ray head did not start: {(Path(temp) / 'head.log').read_text()[-2000:]}"
        )
        with pytest.MonkeyPatch.context() as mp:
            # The flows' driver connection, in this process: Ray reads the mode into its config
            # at import, so make it re-read it (Ray's own test helper), now and after the module.
            mp.setenv("RAY_AUTH_MODE", "token")
            reset_auth_token_state()
            yield address_file.read_text().strip(), Path(temp) / "session_latest" / "logs"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        reset_auth_token_state()
        proc.send_signal(signal.SIGTERM)  # the head stops every process it started
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        with suppress(ProcessLookupError):  # anything left in the head's own process group
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


def ray_tasks(state) -> dict[str, str]:
    """Task run name -> state name of the run that used Ray: a flow given ``ray_address`` runs
    itself again as a subflow with the Ray task runner, and its tasks belong to that subflow."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(
                    any_=[state.state_details.flow_run_id]
                )
            )
        )
    assert [c.state.type.value for c in children] == ["COMPLETED"]
    return task_states(SimpleNamespace(state_details=SimpleNamespace(flow_run_id=children[0].id)))


def worker_pids(logs: Path, task_names: list[str]) -> dict[str, set[int]]:
    """Task run name -> pids of the Ray worker processes whose own log files (stdout/stderr,
    ``worker-<id>-<job>-<pid>.err``) hold Prefect's line about that task run."""
    found: dict[str, set[int]] = {name: set() for name in task_names}
    for path in logs.glob("worker-*"):
        match = re.search(r"-(\d+)\.(out|err)$", path.name)
        if match is None:
            continue
        text = path.read_text(errors="replace")
        for name in task_names:
            if f"Task run '{name}' - Finished in state Completed()" in text:
                found[name].add(int(match.group(1)))
    return found


def assert_ran_in_ray_workers(logs: Path, names: list[str]) -> None:
    pids = worker_pids(logs, names)
    assert all(pids[name] for name in names), pids
    assert os.getpid() not in set().union(*pids.values())


def stage_metrics(tracking, stage: str) -> dict[str, dict[str, float]]:
    """MLflow run key -> metrics of its ``stage`` run, timings left out."""
    client, exp = mlflow_client(tracking)
    runs = client.search_runs([exp])
    keys = {r.info.run_id: r.data.tags.get("twinkle.run_key") for r in runs}
    return {
        keys[r.data.tags["mlflow.parentRunId"]]: {
            k: v for k, v in r.data.metrics.items() if not k.endswith("seconds")
        }
        for r in runs
        if r.data.tags.get("twinkle.stage") == stage
    }


def test_curation_on_ray_matches_the_thread_pool_run(
    prefect_api, ray_head, tmp_path, tracking_params
):
    from flows.curation import curation_flow
    from flows.params import CurationParams, RunParams

    address, logs = ray_head
    params = CurationParams(
        pii="off", shard_size=10
    )  # the bundled examples, 10 rows per filter task
    local = curation_flow(
        params,
        tracking_params.model_copy(update={"run_key": "threads"}),
        RunParams(output_dir=str(tmp_path / "threads")),
        return_state=True,
    )
    on_ray = curation_flow(
        params,
        tracking_params.model_copy(update={"run_key": "ray"}),
        RunParams(output_dir=str(tmp_path / "ray"), ray_address=address),
        return_state=True,
    )
    assert flow_state(local) == flow_state(on_ray) == "COMPLETED"
    a, b = local.result(), on_ray.result()
    assert (b["rows_in"], b["rows_out"], b["dropped"]) == (
        a["rows_in"],
        a["rows_out"],
        a["dropped"],
    )
    assert a["rows_out"] < a["rows_in"]  # the examples do lose rows to the filters
    assert (
        Path(b["curated_path"]).read_bytes() == Path(a["curated_path"]).read_bytes()
    )  # same rows, same order
    dropped = [  # the same {step, reason, row} records (the writers' JSON spacing differs)
        Counter(
            json.dumps(json.loads(line), sort_keys=True)
            for line in Path(s["dropped_path"]).read_text().splitlines()
        )
        for s in (a, b)
    ]
    assert dropped[0] == dropped[1] and sum(dropped[0].values()) == a["dropped"]

    # The per-step statistics merged over the shards reach MLflow as from the single task.
    metrics = stage_metrics(tracking_params, "curation")
    assert metrics["ray"] == metrics["threads"]

    # On Ray the chain runs on the cluster with Ray Data (curate_ray), driven by one task of
    # the Ray subflow; the thread-pool run streams it in one task, 10 rows a shard.
    assert ray_tasks(on_ray).get("curate-ray") == "Completed"
    states = task_states(local)
    assert states.get("curate-stream") == "Completed" and "curate-ray" not in states
    assert math.ceil(a["rows_in"] / 10) > 1  # more than one shard


def test_rollout_on_ray_scores_and_traces_each_trajectory_once(
    prefect_api, ray_head, tmp_path, conversations_file, tracking_params
):
    from flows.params import RolloutParams, RunParams
    from flows.rollout import rollout_flow

    address, logs = ray_head
    rollout = RolloutParams(
        conversations=[conversations_file], tasks=[], concurrency=2, shard_size=2
    )
    state = rollout_flow(
        rollout,
        tracking_params,
        RunParams(output_dir=str(tmp_path / "out"), ray_address=address),
        return_state=True,
    )  # the flow starts its own local sandbox server
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 5 and summary["failed"] == 0  # the duplicate conversation too
    assert summary["stop_reasons"] == {"stop": 5} and summary["reward_mean"] == 1.0
    inputs = [json.loads(line) for line in Path(conversations_file).read_text().splitlines()]
    scored = [json.loads(line) for line in Path(summary["scored_path"]).read_text().splitlines()]
    assert [t["id"] for t in scored] == [r["id"] for r in inputs]  # shards concatenated in order
    assert all(t["rewards"]["fidelity"] == 1.0 for t in scored)

    tasks = ray_tasks(state)
    shards = [f"run-rollouts-{k}" for k in range(3)]  # 5 trajectories, 2 per task
    assert sorted(n for n in tasks if n.startswith("run-rollouts-")) == shards
    assert {tasks[n] for n in shards} == {"Completed"}
    assert_ran_in_ray_workers(logs, shards)

    # Each shard streamed its traces from its worker: one per trajectory, none twice.
    client, exp = mlflow_client(tracking_params)
    traces = client.search_traces(locations=[exp])
    assert sorted(t.info.tags["twinkle.trace_key"] for t in traces) == sorted(
        f"{i}:{r['id']}" for i, r in enumerate(inputs)
    )
    assert {t.info.tags["reward.total"] for t in traces} == {"1.0"}
    assert summary["traces_written"] == 5
    # With no run_key, the MLflow run and trace session are keyed by the flow run that was
    # started (the one a retry of it would reuse), not by the Ray subflow inside it.
    started = str(state.state_details.flow_run_id)
    assert {t.info.tags["twinkle.session"] for t in traces} == {started}
    runs = client.search_runs([exp], filter_string=f"tags.`twinkle.run_key` = '{started}'")
    assert len(runs) == 1 and runs[0].info.run_id == summary["mlflow_run_id"]


def test_pipeline_on_ray_and_its_rerun_from_cache(
    prefect_api, ray_head, tmp_path, conversations_file, tracking_params
):
    from flows.params import CurationParams, RolloutParams, RunParams
    from flows.pipeline import pipeline_flow

    address, logs = ray_head
    cur = CurationParams(inputs=[conversations_file], pii="off", shard_size=2)
    rol = RolloutParams(tasks=[], concurrency=2, shard_size=2)
    run = RunParams(output_dir=str(tmp_path / "out"), ray_address=address)
    tracking = tracking_params.model_copy(update={"run_key": "ray-pipeline"})
    first = pipeline_flow(cur, rol, tracking, run, return_state=True)
    assert flow_state(first) == "COMPLETED"
    summary = first.result()
    assert (summary["rows_in"], summary["rows_out"]) == (5, 4)
    assert summary["drops"] == {"DedupFilter/duplicate": 1}
    assert summary["trajectories"] == 4 and summary["failed"] == 0 and summary["reward_mean"] == 1.0
    tasks = ray_tasks(first)
    shards = ["run-rollouts-0", "run-rollouts-1"]
    assert tasks.get("curate-ray") == "Completed"  # the chain on Ray Data (curate_ray)
    assert {n: tasks.get(n) for n in shards} == dict.fromkeys(shards, "Completed")
    assert_ran_in_ray_workers(logs, shards)

    # The same run again: every shard found in the cache (results persisted by the workers),
    # and the MLflow run found by key, with no trace written twice.
    second = pipeline_flow(cur, rol, tracking, run, return_state=True)
    assert flow_state(second) == "COMPLETED"
    tasks = ray_tasks(second)
    assert {n: tasks.get(n) for n in [*shards, "curate-ray"]} == dict.fromkeys(
        [*shards, "curate-ray"], "Cached"
    )
    assert second.result()["traces_written"] == 0 and second.result()["reward_mean"] == 1.0
    client, exp = mlflow_client(tracking_params)
    assert len(client.search_runs([exp])) == 3  # one run + two stages
    assert len(client.search_traces(locations=[exp])) == 4
