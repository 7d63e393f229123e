"""prefect.yaml for real: `prefect server start`, a process work pool, `prefect deploy --all`, a
worker, a triggered deployment run that completes, then the infra scripts stop worker and server."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.net import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra" / "prefect"


def _sh(script: str, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        ["bash", str(INFRA / script)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _create_flow_run(api: str, deployment_id: str, params: dict) -> dict:
    """POST create_flow_run as a client of a busy server should: 5xx (SQLite locked while the
    worker and the deploy write) is retried for a while; anything else fails with the body."""
    deadline = time.time() + 60
    while True:
        response = httpx.post(
            f"{api}/deployments/{deployment_id}/create_flow_run",
            json={"parameters": params},
            timeout=30,
        )
        if response.status_code < 500 or time.time() > deadline:
            break
        time.sleep(1)
    assert response.status_code in (200, 201), (
        f"create_flow_run: {response.status_code} {response.text[:2000]}"
    )
    return response.json()


def test_deploy_prefect_yaml_and_run_a_deployment_on_a_worker(tmp_path, conversations_file):
    port = free_port()
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_PORT=str(port),
        TWINKLE_RUN_DIR=str(run_dir),
        PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_WORKER_PREFETCH_SECONDS="5",
        STOP_WAIT_SECONDS="5",
    )
    api = env["PREFECT_API_URL"]
    try:
        assert "Prefect server up" in _sh("start-server.sh", env)
        _sh("deploy.sh", env)
        deployments = httpx.post(f"{api}/deployments/filter", json={}).json()
        names = {d["name"] for d in deployments}
        assert names == {"nightly-curation", "rollout-scoring", "full-pipeline"}
        # Each refuses a run whose parameters break the schema (credentials in a URL) before
        # storing it.
        assert all(d["enforce_parameter_schema"] for d in deployments)
        nightly = next(d for d in deployments if d["name"] == "nightly-curation")
        schedules = httpx.get(f"{api}/deployments/{nightly['id']}/schedules").json()
        assert (
            schedules[0]["schedule"]["cron"] == "0 2 * * *"
            and schedules[0]["schedule"]["timezone"] == "UTC"
        )

        _sh("start-worker.sh", env)
        worker_pid = int((run_dir / "worker.pid").read_text())
        params = {
            "curation": {"inputs": [conversations_file], "pii": "off"},
            "tracking": {
                "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                "artifact_location": str(tmp_path / "mlruns"),
            },
            "run": {"output_dir": str(tmp_path / "out")},
        }
        created = _create_flow_run(api, nightly["id"], params)
        state = None
        deadline = time.time() + 240
        while time.time() < deadline:
            polled = httpx.get(f"{api}/flow_runs/{created['id']}", timeout=30)
            if polled.status_code != 200:  # a busy server's 5xx: ask again
                time.sleep(1)
                continue
            state = polled.json()["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            time.sleep(1)
        log = (run_dir / "worker.log").read_text()
        assert state == "COMPLETED", f"flow run ended {state}; worker log:\n{log[-3000:]}"
        curated = [
            json.loads(line)
            for line in open(tmp_path / "out" / "latest" / "curated" / "examples.jsonl")
        ]
        assert len(curated) == 4
    finally:
        stopped = _sh("stop-worker.sh", env) if (run_dir / "worker.pid").exists() else ""
        _sh("stop-server.sh", env)
    assert "prefect worker: stopped" in stopped
    assert not _pid_alive(worker_pid)
    assert not (run_dir / "server.pid").exists()
