"""APIMultiTurnRollout against the real scripted server via the real openai SDK."""

import asyncio
import json
import threading
import time

import pytest

from twinkle.data_format import SamplingParams
from twinkle.envs import EnvTool
from twinkle.envs.base import Env, StepResult
from twinkle.protocol.openai import OpenAI
from twinkle.rollout import APIMultiTurnRollout
from twinkle.testing.openai_server import garbage, length_stop, tool_then_answer
from twinkle.tools import Tool, ToolManager


class Echo(Tool):
    def __call__(self, tool_name, arguments):
        return f"echo:{arguments.get('text', '')}"

    def tool_info(self):
        return {
            "type": "function",
            "function": {
                "name": "echo",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        }


def api_for(server, **kw):
    kw.setdefault("max_retries", 1)
    kw.setdefault("backoff_s", 0.01)
    return OpenAI("test-model", api_key="x", base_url=server.base_url, **kw)


def prompts(n, text="q"):
    return [
        {"id": f"t{i}", "messages": [{"role": "user", "content": f"{text} {i}"}]} for i in range(n)
    ]


@pytest.mark.slow
def test_tool_loop_ids_history_and_turn_log(server):
    server.responder = tool_then_answer(turns=2, answer="all done")
    rollout = APIMultiTurnRollout(api_for(server), ToolManager([Echo()]), max_turns=6)
    out = rollout(prompts(1))[0]
    assert (out["stop_reason"], out["turns"], out["truncated"]) == ("stop", 3, False)
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    for assistant, tool in (
        (out["messages"][1], out["messages"][2]),
        (out["messages"][3], out["messages"][4]),
    ):
        assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
        assert tool["content"].startswith("echo:turn")
        assert "finish_reason" not in assistant
    assert out["messages"][-1]["content"] == "all done"
    # The history re-sent to the server never carries bookkeeping fields.
    for request in server.requests:
        assert all(
            "finish_reason" not in m and "reasoning_content" not in m for m in request["messages"]
        )
        assert request["tools"][0]["function"]["name"] == "echo"
    kinds = [e["type"] for e in out["turn_log"]]
    assert kinds == ["llm", "tool", "llm", "tool", "llm"]
    llm, tool = out["turn_log"][0], out["turn_log"][1]
    assert (
        llm["finish_reason"] == "tool_calls" and llm["prompt_tokens"] > 0 and llm["attempts"] == 1
    )
    assert llm["latency_s"] >= 0 and isinstance(llm["start_ns"], int) and llm["error"] is None
    assert tool["name"] == "echo" and json.loads(tool["arguments"]) == {"text": "turn 1"}
    assert tool["tool_call_id"] == out["messages"][2]["tool_call_id"] and tool["error"] is False


@pytest.mark.slow
def test_length_stop_is_truncated(server):
    server.responder = length_stop()
    out = APIMultiTurnRollout(api_for(server), ToolManager([Echo()]))(prompts(1))[0]
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("length", True, 1)


@pytest.mark.slow
def test_max_turns_does_not_run_the_last_calls(server):
    server.responder = tool_then_answer(turns=5)
    out = APIMultiTurnRollout(api_for(server), ToolManager([Echo()]), max_turns=2)(prompts(1))[0]
    assert (out["stop_reason"], out["truncated"], out["turns"]) == ("max_turns", True, 2)
    assert [m["role"] for m in out["messages"]].count("tool") == 1


@pytest.mark.slow
def test_failures_are_data_in_input_order(server):
    def responder(request):
        text = request["messages"][0]["content"]
        if "fail" in text:
            return (500, {"error": {"message": "down"}})
        return tool_then_answer(turns=1)(request)

    server.responder = responder
    batch = [
        prompts(1, "ok")[0],
        {"id": "x", "messages": [{"role": "user", "content": "fail"}]},
        {"messages": []},
        {"messages": [{"role": "robot", "content": "?"}]},
        "not a dict",
        {"messages": [{"role": "user", "content": "ok again"}], "tools": "bad"},
        prompts(1, "ok")[0],
    ]
    out = APIMultiTurnRollout(api_for(server, max_retries=1), ToolManager([Echo()]), concurrency=3)(
        batch
    )
    assert len(out) == len(batch)
    assert [o["stop_reason"] for o in out] == [
        "stop",
        "api_error",
        "invalid_input",
        "invalid_input",
        "invalid_input",
        "invalid_input",
        "stop",
    ]
    assert out[1]["error"].startswith("APICallError: server (HTTP 500) after 2 attempts")
    assert out[1]["turn_log"][0]["error"] and out[1]["turn_log"][0]["attempts"] == 2
    assert "role 'robot'" in out[3]["error"] and out[0]["id"] == "t0"


@pytest.mark.slow
def test_a_raising_tool_callable_is_an_api_error(server):
    server.responder = tool_then_answer(turns=1)

    class Raising(ToolManager):
        def __call__(self, tool_call):
            raise OSError("sandbox gone")

    out = APIMultiTurnRollout(api_for(server), Raising([Echo()]))(prompts(1))[0]
    assert (
        out["stop_reason"] == "api_error" and out["error"] == "ToolExecution OSError: sandbox gone"
    )
    assert out["turn_log"][-1]["type"] == "tool" and out["turn_log"][-1]["error"] is True


@pytest.mark.slow
def test_tool_timeout_is_reported_to_the_model(server):
    server.responder = tool_then_answer(turns=1)
    release = threading.Event()

    class Hang(Echo):
        def __call__(self, tool_name, arguments):
            release.wait(10)
            return "late"

    try:
        out = APIMultiTurnRollout(api_for(server), ToolManager([Hang()]), tool_timeout_s=0.2)(
            prompts(1)
        )[0]
    finally:
        release.set()
    assert out["stop_reason"] == "stop"
    assert out["messages"][2]["content"] == "Error: tool 'echo' timed out after 0.2 s"
    assert out["turn_log"][1]["error"] is True


@pytest.mark.slow
def test_blocking_tools_do_not_stall_other_trajectories(server):
    """A's tool blocks until B's second request reaches the server, which needs the loop free."""
    b_second_turn = threading.Event()

    def responder(request):
        if request["messages"][0]["content"] == "B" and len(request["messages"]) > 1:
            b_second_turn.set()
        return tool_then_answer(turns=1)(request)

    class Waits(Echo):
        def __call__(self, tool_name, arguments):
            return "ok" if b_second_turn.wait(5) else "late"

    server.responder = responder
    batch = [
        {"messages": [{"role": "user", "content": "A"}]},
        {"messages": [{"role": "user", "content": "B"}]},
    ]
    out = APIMultiTurnRollout(
        api_for(server), [ToolManager([Waits()]), ToolManager([Echo()])], concurrency=2
    )(batch)
    assert out[0]["messages"][2]["content"] == "ok"


@pytest.mark.slow
def test_hundreds_in_flight_and_the_bound_holds(server):
    state = {"now": 0, "max": 0}

    async def responder(request):
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.3)
        state["now"] -= 1
        return {"content": "done"}

    server.responder = responder
    out = APIMultiTurnRollout(api_for(server), ToolManager(), concurrency=200)(prompts(200))
    assert [o["stop_reason"] for o in out] == ["stop"] * 200
    assert state["max"] > 16  # concurrency is the rollout's bound, not a small worker pool
    # A request the first rollout retried on a loaded machine may still be sleeping in the
    # server: let it finish, so the count below is the second rollout's own.
    deadline = time.monotonic() + 10
    while state["now"] and time.monotonic() < deadline:
        time.sleep(0.05)
    state["max"] = 0
    APIMultiTurnRollout(api_for(server), ToolManager(), concurrency=4)(prompts(12))
    assert state["max"] <= 4


@pytest.mark.slow
def test_per_trajectory_managers_keep_envs_apart(server):
    class Ledger(Env):
        def __init__(self):
            self.seen = []

        def step(self, tool_name, arguments):
            self.seen.append(arguments.get("action"))
            return StepResult(observation="noted", reward=0.5)

    server.responder = tool_then_answer(turns=2, arguments={"action": "go"})
    envs = [Ledger() for _ in range(3)]
    tools = [EnvTool.from_env(env) for env in envs]
    rollout = APIMultiTurnRollout(api_for(server), max_turns=5)
    out = rollout(prompts(3), tool_manager=[ToolManager(t) for t in tools])
    assert all(o["stop_reason"] == "stop" for o in out)
    assert [env.seen for env in envs] == [["go", "go"]] * 3
    assert [t[0].episode_reward for t in tools] == [1.0] * 3
    with pytest.raises(ValueError, match="does not match number of trajectories"):
        rollout(prompts(3), tool_manager=[ToolManager()])
    with pytest.raises(ValueError, match="tool_manager is required"):
        rollout(prompts(1))


@pytest.mark.slow
def test_argument_checks(server):
    api = api_for(server)
    with pytest.raises(ValueError, match="api is required"):
        APIMultiTurnRollout(None, ToolManager())
    with pytest.raises(ValueError, match="max_turns"):
        APIMultiTurnRollout(api, ToolManager(), max_turns=0)
    with pytest.raises(ValueError, match="concurrency"):
        APIMultiTurnRollout(api, ToolManager(), concurrency=0)
    with pytest.raises(ValueError, match="num_samples"):
        APIMultiTurnRollout(api, ToolManager(), sampling_params=SamplingParams(num_samples=2))
    rollout = APIMultiTurnRollout(api, ToolManager())
    with pytest.raises(TypeError, match="wrap a single trajectory"):
        rollout(prompts(1)[0])
    assert rollout([]) == []


@pytest.mark.slow
async def test_extra_body_merge_and_use_inside_a_running_loop(server):
    server.responder = tool_then_answer(turns=0)
    rollout = APIMultiTurnRollout(api_for(server), ToolManager(), extra_body={"a": 1, "b": 1})
    out = await rollout.acall(prompts(1), extra_body={"b": 2})
    assert (
        out[0]["stop_reason"] == "stop"
        and server.requests[-1]["a"] == 1
        and server.requests[-1]["b"] == 2
    )
    # The synchronous surface also works from inside a running loop (it uses a worker thread).
    assert rollout(prompts(1))[0]["stop_reason"] == "stop"


@pytest.mark.slow
def test_request_timeout_bounds_a_hanging_api(server):
    server.delay_s = 1.0
    rollout = APIMultiTurnRollout(api_for(server), ToolManager(), request_timeout_s=0.3)
    out = rollout(prompts(2))
    # Without the bound the delayed server would answer and the trajectories would stop normally.
    assert [o["stop_reason"] for o in out] == ["api_error"] * 2 and out[0]["error"].startswith(
        "TimeoutError"
    )


@pytest.mark.slow
def test_quick_tools_run_inline_and_blocking_ones_in_threads(server):
    threads = {}

    class Where(Echo):
        def __call__(self, tool_name, arguments):
            threads[type(self).__name__] = threading.current_thread().name
            return "here"

    class Quick(Where):
        blocking = False

        def tool_info(self):
            return {"type": "function", "function": {"name": "quick", "parameters": {}}}

    server.responder = lambda request: tool_then_answer(
        turns=1, tool_name=request["messages"][0]["content"]
    )(request)
    batch = [{"messages": [{"role": "user", "content": name}]} for name in ("echo", "quick")]
    APIMultiTurnRollout(api_for(server), ToolManager([Where(), Quick()]))(batch)
    assert threads["Quick"] == threading.current_thread().name  # the loop's own thread
    assert threads["Where"].startswith("twinkle-tool")


def test_a_synchronous_api_gets_the_full_concurrency():
    from twinkle.protocol.base import API

    lock, state = threading.Lock(), {"now": 0, "max": 0}

    class SlowSync(API):
        def __call__(self, trajectory, sampling_params, **kwargs):
            with lock:
                state["now"] += 1
                state["max"] = max(state["max"], state["now"])
            threading.Event().wait(0.2)
            with lock:
                state["now"] -= 1
            return {"role": "assistant", "content": "ok", "finish_reason": "stop"}

    out = APIMultiTurnRollout(SlowSync(), ToolManager(), concurrency=24)(prompts(24))
    assert [o["stop_reason"] for o in out] == ["stop"] * 24
    assert state["max"] > 6  # asyncio's default executor would cap it at min(32, cpus + 4)


@pytest.mark.slow
def test_the_loop_client_is_closed_after_a_synchronous_call(server):
    server.responder = tool_then_answer(turns=0)
    api = api_for(server)
    APIMultiTurnRollout(api, ToolManager())(prompts(2))
    assert len(api._async_clients) == 0


@pytest.mark.slow
def test_garbage_replies_become_api_errors(server):
    def responder(request):
        if "junk" in request["messages"][0]["content"]:
            return garbage()(request)
        return tool_then_answer(turns=0)(request)

    server.responder = responder
    out = APIMultiTurnRollout(api_for(server), ToolManager())(
        prompts(2, "junk") + prompts(1, "fine")
    )
    assert [o["stop_reason"] for o in out] == ["api_error", "api_error", "stop"]
    assert "invalid_response" in out[0]["error"] and out[0]["turn_log"][0]["error"]


class GCProbe(Echo):
    """Records the collector's thresholds while the rollout runs it."""

    blocking = False
    seen: list = []

    def __call__(self, tool_name, arguments):
        import gc

        GCProbe.seen.append(gc.get_threshold())
        return super().__call__(tool_name, arguments)


def test_the_collector_is_relaxed_during_a_rollout_and_restored_after(server):
    import gc

    from twinkle.rollout.base import ROLLOUT_GC_THRESHOLD

    server.responder = tool_then_answer(turns=1)
    before = gc.get_threshold()
    GCProbe.seen = []
    rollout = APIMultiTurnRollout(api_for(server), ToolManager([GCProbe()]), max_turns=3)
    out = rollout(prompts(3))
    assert {o["stop_reason"] for o in out} == {"stop"}
    assert GCProbe.seen == [(ROLLOUT_GC_THRESHOLD, *before[1:])] * 3
    assert gc.get_threshold() == before
