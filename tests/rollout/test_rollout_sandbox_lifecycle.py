"""RolloutRunner against the real local sandbox server through the real e2b SDK: each
trajectory's sandbox is created when it starts and killed when it ends, so live sandboxes
never outnumber the concurrency; a server that dies mid-rollout ends the trajectories it
holds as errors (no reward, counted as failed), never as tool results shown to the model."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from twinkle.rollout.runner import (
    RolloutConfig,
    RolloutRunner,
    RunFailedError,
    check_failure_rate,
)

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "conversations.jsonl"
API_KEY = "lifecycle-key"


def agent_rows(n: int, min_tool_turns: int = 1) -> list[dict]:
    """``n`` recorded agent conversations (the bundled examples, repeated with distinct ids)."""
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    agent = [
        r for r in rows if sum(1 for m in r["messages"] if m.get("tool_calls")) >= min_tool_turns
    ]
    assert agent, "the bundled examples have no agent rows"
    return [{**agent[k % len(agent)], "id": f"{agent[k % len(agent)]['id']}-{k}"} for k in range(n)]


def test_sandboxes_are_made_on_demand_and_never_outnumber_the_concurrency():
    from twinkle.sandbox import SandboxServer

    rows = agent_rows(320)
    with SandboxServer(port=0, api_key=API_KEY, max_sandboxes=64) as srv:
        assert srv.isolated, "needs bubblewrap: apt-get install -y bubblewrap"
        live = srv.manager.sandboxes  # what GET /sandboxes lists and max_sandboxes bounds
        peak, stop = [0], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], len(live))
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        runner = RolloutRunner(
            RolloutConfig(concurrency=16), {"api_url": srv.url, "api_key": API_KEY}
        )
        started = time.perf_counter()
        try:
            result = runner.run(rows)
        finally:
            stop.set()
            watcher.join()
        seconds = time.perf_counter() - started
        assert len(live) == 0  # every sandbox was released
    stats = result.stats
    assert (stats.trajectories, stats.failed, stats.errors) == (320, 0, []), stats
    assert stats.stop_reasons == {"stop": 320}
    assert 1 <= peak[0] <= 16, peak[0]
    assert all(t["rewards"] for t in result.trajectories)
    print(f"320 agent rows, concurrency 16, max_sandboxes 64: {seconds:.1f} s, peak {peak[0]}")


def test_a_sandbox_server_killed_mid_rollout_fails_its_trajectories_without_reward():
    from twinkle.sandbox.endpoint import LocalSandboxServer

    rows = agent_rows(60, min_tool_turns=2)
    server = LocalSandboxServer()  # `twinkle sandbox serve` in a child process, as flows run it
    try:
        endpoint = server.endpoint()
        assert "error" not in endpoint, f"no local sandbox server: {endpoint.get('error')}"

        def kill_after(done: int, total: int) -> None:
            if done == 12 and server.proc.poll() is None:
                server.proc.kill()  # SIGKILL: no goodbye to any client

        runner = RolloutRunner(RolloutConfig(concurrency=8), endpoint, on_progress=kill_after)
        result = runner.run(rows)
    finally:
        server.stop()
    stats = result.stats
    failed = [t for t in result.trajectories if t["stop_reason"] == "error"]
    assert stats.failed == len(failed) > 0 and stats.trajectories == 60
    assert set(stats.stop_reasons) <= {"stop", "error"}
    for t in failed:  # the cause, no reward
        assert t["error"].startswith("SandboxError: "), t["error"]
        assert t["rewards"] == {} and t["reward_outcome"] == "failed"
        assert t["reward_error"] == t["error"]
    # Once the server is found down, the rows after it fail at once, without retries.
    assert any("sandbox server down, trajectory not started" in t["error"] for t in failed)
    # Some died mid-rollout, at a tool call: that call got no result, the model saw nothing.
    midway = [t for t in failed if t["turns"] >= 1]
    assert midway, [t["error"][:80] for t in failed]
    for t in midway:
        assert t["messages"][-1]["role"] == "assistant" and t["messages"][-1].get("tool_calls")
        assert t["turn_log"][-1]["type"] == "tool" and t["turn_log"][-1]["error"] is True
    for t in result.trajectories:
        shown = " ".join(str(m.get("content")) for m in t["messages"] if m["role"] == "tool")
        assert "unreachable" not in shown and "could not be reached" not in shown
    # Scored ones kept their rewards; the verdict follows max_failure_rate.
    assert all(t["rewards"] for t in result.trajectories if t["stop_reason"] == "stop")
    warning = check_failure_rate(stats, 1.0)
    assert warning.startswith(f"rollout: {stats.failed} of 60 trajectories failed")
    assert "SandboxError: " in warning
    with pytest.raises(RunFailedError, match=r"sandbox endpoint http://127\.0\.0\.1:\d+: unreach"):
        check_failure_rate(stats, 0.0, sandbox_url=endpoint["api_url"])
