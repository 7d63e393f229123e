"""twinkle.rollout.runner without services: failed trajectories are never rewards, stats merge
across shards, the failure threshold names the failing endpoint; endpoint errors name the URL."""

from __future__ import annotations

import asyncio
import json

import pytest

from twinkle.protocol.base import APICallError
from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle.rollout.base import endpoint_label
from twinkle.rollout.runner import (
    PolicyConfig,
    RolloutConfig,
    RolloutStats,
    RunFailedError,
    check_failure_rate,
    score,
    score_episode,
)


def _task(stop_reason: str, error: str | None = None) -> dict:
    from twinkle.integrations.rollout_bridge import trajectories_for

    traj = trajectories_for("math", [0])[0]
    out = {**traj, "stop_reason": stop_reason, "turns": 1}
    if error:
        out["error"] = error
    return out


@pytest.mark.parametrize(
    ("stop_reason", "error"),
    [("api_error", "APICallError: connection after 3 attempts"), ("error", "SandboxError: down")],
)
def test_a_failed_trajectory_gets_no_rewards_and_counts_as_failed(stop_reason, error):
    scored = score({}, _task(stop_reason, error), replay=False)
    assert scored["rewards"] == {} and scored["reward_outcome"] == "failed"
    assert scored["reward_error"] == error
    assert RolloutStats.of([scored]).failed == 1


def test_a_finished_task_is_still_scored():
    traj = _task("stop")
    traj["messages"] = [*traj["messages"], {"role": "assistant", "content": "\\boxed{18}"}]
    scored = score({}, traj, replay=False)
    assert scored["rewards"]["total"] == 1.0 and scored["reward_outcome"] == "correct"


def test_a_failed_episode_gets_no_reward_even_with_a_partial_one():
    failed = score_episode({"stop_reason": "api_error", "error": "E: x"}, 0.5)
    assert failed["rewards"] == {} and failed["reward_outcome"] == "failed"
    assert score_episode({"stop_reason": "stop"}, 1.0)["rewards"]["total"] == 1.0


def test_stats_merge_sums_counts_keeps_the_first_errors_and_adds_trace_counts():
    a = RolloutStats.of([{"stop_reason": "stop"}] * 3, rollout_s=1.0, traces={"written": 3})
    b = RolloutStats.of(
        [{"stop_reason": "api_error", "error": f"E{i}"} for i in range(7)],
        rollout_s=2.0,
        traces={"written": 7},
    )
    m = RolloutStats.merged([a, b])
    assert (m.trajectories, m.failed, m.rollout_s) == (10, 7, 3.0)
    assert m.stop_reasons == {"stop": 3, "api_error": 7}
    assert m.errors == ["E0", "E1", "E2", "E3", "E4"] and m.traces == {"written": 10}
    assert m.as_dict()["failure_rate"] == pytest.approx(0.7)


def test_failures_under_the_threshold_are_a_warning_over_it_an_error_naming_the_endpoint():
    config = RolloutConfig(policy=PolicyConfig(base_url="http://u:pw@127.0.0.1:9/v1", model="m"))
    error = (
        "APICallError: server (HTTP 500) after 3 attempts: InternalServerError: boom "
        "(endpoint http://u:***@127.0.0.1:9/v1)"
    )
    half = RolloutStats.of([{"stop_reason": "stop"}, {"stop_reason": "api_error", "error": error}])
    assert check_failure_rate(RolloutStats.of([{"stop_reason": "stop"}]), 0.5) is None
    warning = check_failure_rate(half, 0.5, config=config)
    assert warning.startswith("rollout: 1 of 2 trajectories failed (50%, within")
    with pytest.raises(RunFailedError) as exc:
        check_failure_rate(half, 0.4, config=config)
    message = str(exc.value)
    assert "policy endpoint http://u:***@127.0.0.1:9/v1: HTTP 500" in message
    assert "first errors: APICallError: server (HTTP 500)" in message
    assert "pw" not in message and exc.value.stats["failed"] == 1


def test_sandbox_failures_name_the_sandbox_endpoint():
    stats = RolloutStats.of([{"stop_reason": "error", "error": "SandboxError: ConnectError: x"}])
    with pytest.raises(RunFailedError, match=r"sandbox endpoint http://127.0.0.1:7: unreachable"):
        check_failure_rate(stats, 0.0, sandbox_url="http://127.0.0.1:7")


def test_endpoint_label_hides_a_password_only():
    assert endpoint_label("http://a:b@h:1/v1") == "http://a:***@h:1/v1"
    assert endpoint_label("http://h:1/v1") == "http://h:1/v1"
    assert endpoint_label(None) == ""


class _API:
    base_url = "http://127.0.0.1:9/v1"

    def __init__(self, fail: Exception | None = None, sleep_s: float = 0.0) -> None:
        self.fail, self.sleep_s = fail, sleep_s

    async def acomplete(self, *args, **kwargs):
        await asyncio.sleep(self.sleep_s)
        raise self.fail


def _one(api: _API, timeout: float | None = None) -> dict:
    rollout = APIMultiTurnRollout(api, max_turns=1, request_timeout_s=timeout)
    return rollout([{"messages": [{"role": "user", "content": "hi"}]}], tool_manager=[None])[0]


def test_a_connection_error_names_the_endpoint():
    err = APICallError("connection", "APIConnectionError: Connection error.", attempts=3)
    out = _one(_API(fail=err))
    assert out["stop_reason"] == "api_error"
    assert "Connection error." in out["error"] and "http://127.0.0.1:9/v1" in out["error"]


def test_a_hang_ends_as_a_timeout_with_a_message():
    out = _one(_API(fail=RuntimeError("never"), sleep_s=5.0), timeout=0.05)
    assert out["stop_reason"] == "api_error"
    assert out["error"].startswith("TimeoutError: no reply from http://127.0.0.1:9/v1 within")


def test_a_crashed_batch_resumes_at_the_trajectory(tmp_path):
    """Finished trajectories in the checkpoint are kept (traced and counted again, never
    re-requested); the rest are rolled out: here they fail, as no sandbox endpoint is given,
    and a failed one is not kept for the next attempt."""
    from twinkle.rollout.runner import RolloutRunner

    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(3)]
    finished = {**rows[1], "stop_reason": "stop", "rewards": {"total": 1.0}}
    checkpoint = tmp_path / "rollout.partial.jsonl"
    checkpoint.write_text(
        json.dumps({"index": 1, "trajectory": finished})
        + "\n"
        + json.dumps({"index": 2, "trajectory": {**rows[0], "stop_reason": "stop"}})  # wrong id
        + "\n"
        + '{"index": 0, "traj'  # the line being written when the run died
    )
    seen = []
    runner = RolloutRunner(RolloutConfig(), None, on_done=lambda i, t: seen.append(i))
    result = runner.run(rows, checkpoint=str(checkpoint))
    assert result.trajectories[1] == finished and sorted(seen) == [0, 1, 2]
    assert [t["stop_reason"] for t in result.trajectories] == ["error", "stop", "error"]
    assert result.stats.failed == 2
    kept = [json.loads(line) for line in checkpoint.read_text().splitlines()[:2]]
    assert [k["index"] for k in kept] == [1, 2]  # nothing failed was added
    assert len(checkpoint.read_text().splitlines()) == 3


class _Box:
    """A fake sandbox env: ``run_command`` echoes; counts live instances; can die."""

    live, peak, closed = 0, 0, 0

    def __init__(self, dies_at: int | None = None) -> None:
        self.steps, self.dies_at = 0, dies_at
        type(self).live += 1
        type(self).peak = max(type(self).peak, type(self).live)

    def tools(self):
        return [
            {
                "type": "function",
                "function": {"name": "run_command", "parameters": {"type": "object"}},
            }
        ]

    def step(self, tool_name, arguments):
        from twinkle.envs.base import ENV_FAILED, StepResult

        self.steps += 1
        if self.dies_at is not None and self.steps >= self.dies_at:
            cause = "SandboxError: sandbox server unreachable: refused"
            return StepResult(
                "Error: sandbox server unreachable", done=True, info={ENV_FAILED: cause}
            )
        return StepResult(observation=str(arguments.get("command")))

    def close(self) -> None:
        type(self).live -= 1
        type(self).closed += 1


def _agent_row(i: int, calls: int = 2) -> dict:
    messages = [{"role": "user", "content": f"task {i}"}]
    for k in range(calls):
        call = {
            "id": f"c{i}-{k}",
            "type": "function",
            "function": {"name": "run_command", "arguments": json.dumps({"command": f"echo {k}"})},
        }
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": str(k)},
        ]
    messages.append({"role": "assistant", "content": "done"})
    return {"id": f"row-{i}", "messages": messages}


def test_environments_are_made_on_demand_and_released_so_live_ones_never_pass_concurrency(
    monkeypatch,
):
    from twinkle.rollout.runner import RolloutRunner

    monkeypatch.setattr(_Box, "live", 0)
    monkeypatch.setattr(_Box, "peak", 0)
    monkeypatch.setattr(_Box, "closed", 0)
    monkeypatch.setattr(RolloutRunner, "provision_sandbox", lambda self: (_Box(), None))
    runner = RolloutRunner(RolloutConfig(concurrency=3), {"api_url": "http://x", "api_key": "k"})
    result = runner.run([_agent_row(i) for i in range(20)])
    assert result.stats.failed == 0 and result.stats.stop_reasons == {"stop": 20}
    assert _Box.peak == 3 and _Box.live == 0 and _Box.closed == 20


def test_an_environment_that_dies_ends_the_trajectory_as_an_error_never_a_tool_result(
    monkeypatch,
):
    from twinkle.rollout.runner import RolloutRunner

    monkeypatch.setattr(_Box, "live", 0)
    monkeypatch.setattr(_Box, "closed", 0)
    monkeypatch.setattr(RolloutRunner, "provision_sandbox", lambda self: (_Box(dies_at=2), None))
    runner = RolloutRunner(RolloutConfig(concurrency=2), {"api_url": "http://x", "api_key": "k"})
    result = runner.run([_agent_row(i) for i in range(4)])
    assert result.stats.failed == 4 and result.stats.stop_reasons == {"error": 4}
    assert result.stats.errors == ["SandboxError: sandbox server unreachable: refused"]
    for t in result.trajectories:
        assert t["rewards"] == {} and t["reward_outcome"] == "failed" and t["turns"] == 2
        assert t["messages"][-1]["role"] == "assistant"  # the dead call got no tool result
        assert "unreachable" not in " ".join(m["content"] for m in t["messages"])
        assert t["turn_log"][-1]["type"] == "tool" and t["turn_log"][-1]["error"] is True
    assert _Box.live == 0 and _Box.closed == 4


def test_a_grading_sandbox_that_fails_is_no_reward_but_a_failed_trajectory():
    from twinkle.core.environments import CodeEnvironment
    from twinkle.core.environments.runner import RunOutcome
    from twinkle.integrations.rollout_bridge import trajectories_for

    class DeadSandbox:
        name = "agentenv"

        def run(self, files, tests, module="solution"):
            why = ("sandbox failure: ConnectError: refused",)
            return RunOutcome(0, len(tests), "error", why, "", self.name, 0.0)

    code = CodeEnvironment(runner=DeadSandbox())
    traj = trajectories_for("code", [0])[0]
    reply = {
        "role": "assistant",
        "content": "```python\ndef add_numbers(a, b):\n    return a + b\n```",
    }
    traj = {**traj, "messages": [*traj["messages"], reply], "stop_reason": "stop"}
    scored = score({}, traj, replay=False, environments={"code": code, "tasks/code": code})
    assert scored["rewards"] == {} and scored["reward_outcome"] == "failed"
    assert scored["stop_reason"] == "error"
    assert scored["error"] == "SandboxError: grading: sandbox failure: ConnectError: refused"
    stats = RolloutStats.of([scored])
    assert stats.failed == 1
    with pytest.raises(RunFailedError, match=r"sandbox endpoint http://127.0.0.1:7: unreachable"):
        check_failure_rate(stats, 0.0, sandbox_url="http://127.0.0.1:7")
