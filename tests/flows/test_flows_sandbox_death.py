"""A sandbox server that dies mid-rollout is an infrastructure failure, not a model failure:
the trajectories it held end as errors with the cause, get no reward, and the flow's
summary, Prefect artifacts and MLflow runs show them as failed; the run warns under
``max_failure_rate`` and fails over it, naming the sandbox endpoint."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "conversations.jsonl"
KEY_ENV = "TWINKLE_TEST_DYING_SANDBOX_KEY"
# The server SIGKILLs itself as it starts its KILL_AT-th command: some trajectory is then in
# the middle of a tool call (after a model turn), so the death is mid-rollout by construction,
# not by racing a timer against sandbox creation on a loaded machine.
KILL_AT = 12
SERVER = (
    "import os, signal, sys; from twinkle.sandbox import SandboxServer; "
    "from twinkle.sandbox.sandbox import SandboxManager; "
    "start, seen = SandboxManager.start, [0]\n"
    "async def dying_start(self, *a, **kw):\n"
    "    seen[0] += 1\n"
    "    if seen[0] >= int(sys.argv[2]): os.kill(os.getpid(), signal.SIGKILL)\n"
    "    return await start(self, *a, **kw)\n"
    "SandboxManager.start = dying_start\n"
    "s = SandboxServer(port=0, api_key=sys.argv[1]).start(); "
    "print(s.url, flush=True); s.serve_forever()"
)


class DyingServer:
    """The local sandbox server in a child process that ``kill()`` ends with SIGKILL."""

    def __init__(self, key: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, key, str(KILL_AT)], stdout=subprocess.PIPE, text=True
        )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.close()
            raise AssertionError("the sandbox server did not start (is bubblewrap installed?)")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _agent_rows(path: Path, n: int) -> str:
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    agent = [r for r in rows if sum(1 for m in r["messages"] if m.get("tool_calls")) >= 2]
    out = [{**agent[k % len(agent)], "id": f"dying-{k}"} for k in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return str(path)


def _run(tmp_path, tracking_params, monkeypatch, key: str, run_key: str, **rollout_kw):
    """A rollout flow over 40 agent rows whose sandbox server SIGKILLs itself mid-rollout."""
    from flows import rollout as flows_rollout
    from flows.params import RolloutParams, RunParams, SandboxParams

    server = DyingServer(key)
    try:
        rollout = RolloutParams(
            conversations=[_agent_rows(tmp_path / f"{run_key}.jsonl", 40)],
            tasks=[],
            concurrency=4,
            sandbox=SandboxParams(api_url=server.url, api_key_env=KEY_ENV),
            **rollout_kw,
        )
        return flows_rollout.rollout_flow(
            rollout,
            tracking_params.model_copy(update={"run_key": run_key}),
            RunParams(output_dir=str(tmp_path / "out")),
            return_state=True,
        )
    finally:
        server.close()


def test_a_sandbox_server_dying_mid_rollout_shows_as_errors_never_as_rewards(
    prefect_api, tmp_path, tracking_params, monkeypatch
):
    from prefect.client.orchestration import get_client

    from twinkle.rollout.runner import RunFailedError

    key = secrets.token_urlsafe(16)
    monkeypatch.setenv(KEY_ENV, key)

    tolerated = _run(tmp_path, tracking_params, monkeypatch, key, "tolerated", max_failure_rate=1.0)
    assert flow_state(tolerated) == "COMPLETED"
    summary = tolerated.result()
    assert summary["trajectories"] == 40 and summary["failed"] > 0
    assert summary["failed"] == summary["stop_reasons"].get("error")
    assert summary["warning"].startswith(f"rollout: {summary['failed']} of 40 trajectories")
    assert all(e.startswith("SandboxError: ") for e in summary["errors"]), summary["errors"]
    scored = [json.loads(line) for line in Path(summary["scored_path"]).read_text().splitlines()]
    failed = [t for t in scored if t["stop_reason"] == "error"]
    assert len(failed) == summary["failed"]
    assert all(t["rewards"] == {} and t["reward_outcome"] == "failed" for t in failed)
    assert any(t["turns"] >= 1 for t in failed)  # died mid-rollout, not only at creation
    for t in scored:  # no infrastructure failure was shown to the model as a tool result
        shown = " ".join(str(m.get("content")) for m in t["messages"] if m["role"] == "tool")
        assert "unreachable" not in shown and "could not be reached" not in shown

    # MLflow: the stage run counts them as failed and scores only the others.
    client, exp = mlflow_client(tracking_params)
    [stage] = [
        r
        for r in client.search_runs([exp])
        if r.data.tags.get("twinkle.run_key") == "tolerated#stage"
    ]
    metrics = stage.data.metrics
    assert metrics["failed"] == summary["failed"]
    assert metrics["stop_reason.error"] == summary["failed"]
    assert metrics.get("scored", 0) == 40 - summary["failed"]
    # Prefect: the summary artifact shows the failures and the warning.
    with get_client(sync_client=True) as prefect:
        artifacts = {a.key: a for a in prefect.read_latest_artifacts()}
    markdown = str(artifacts["rollout-summary"].data)
    assert f"failed: **{summary['failed']}**" in markdown and "error=" in markdown
    assert "within max_failure_rate" in markdown

    over = _run(tmp_path, tracking_params, monkeypatch, key, "over")  # default max_failure_rate 0.5
    assert flow_state(over) == "FAILED"
    error = over.result(raise_on_failure=False)
    assert isinstance(error, RunFailedError)
    assert "sandbox endpoint http://127.0.0.1:" in str(error) and ": unreachable" in str(error)
