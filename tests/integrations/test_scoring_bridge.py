"""The rollout bridge: task items become rollout inputs; rollout outputs become scored signals."""

import pytest

from twinkle.core import SignalBundle
from twinkle.core.environments import MathEnvironment
from twinkle.data_format import user_data_get
from twinkle.integrations import DatasetProvider
from twinkle.integrations.rollout_bridge import (
    items_to_trajectories,
    score_trajectories,
    trajectories_for,
)


def test_trajectories_carry_messages_ids_and_task_reference():
    rows = trajectories_for("math", [0, 4], system_prompt="Be brief.")
    assert [r["id"] for r in rows] == ["math/math-001", "math/math-005"]
    first = rows[0]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "tools" not in first
    ud = first["user_data"]
    assert user_data_get(ud, "env") == "tasks/math" and user_data_get(ud, "task_index") == 0
    assert user_data_get(ud, "ground_truth") == "18" and user_data_get(ud, "id") == "math/math-001"
    extra = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    items = DatasetProvider(MathEnvironment(limit=2)).get_items()
    with_tools = items_to_trajectories(items, "math", tools=extra)
    assert (
        with_tools[1]["tools"] == extra
        and user_data_get(with_tools[1]["user_data"], "env") == "math"
    )


def _answered(rows, answers):
    out = []
    for row, answer in zip(rows, answers):
        done = dict(
            row,
            messages=row["messages"] + [{"role": "assistant", "content": answer}],
            stop_reason="stop",
            truncated=False,
            turns=1,
        )
        out.append(done)
    return out


def test_score_trajectories_gives_bundles_flat_rewards_and_outcomes():
    rows = _answered(
        trajectories_for("math", [0, 1, 2]), ["\\boxed{18}", "I give up", "\\boxed{7}"]
    )
    rows += _answered(trajectories_for("multiple_choice", [0]), ["Answer: B"])
    scores = score_trajectories(rows)
    assert [s["outcome"] for s in scores] == ["correct", "unparsed", "wrong", "correct"]
    assert [s["rewards"]["total"] for s in scores] == [1.0, 0.0, 0.0, 1.0]
    first = scores[0]
    assert isinstance(first["bundle"], SignalBundle) and first["rewards"]["correctness"] == 1.0
    assert (first["id"], first["env"], first["task_index"]) == ("math/math-001", "tasks/math", 0)
    assert (
        first["extracted_answer"] == "18"
        and first["stop_reason"] == "stop"
        and first["error"] is None
    )
    # env_name overrides what the rows say
    forced = score_trajectories(rows[3:], env_name="multiple_choice")
    assert forced[0]["rewards"]["total"] == 1.0


def test_bad_trajectories_are_scored_as_errors_not_raised():
    good = _answered(trajectories_for("math", [0]), ["\\boxed{18}"])[0]
    no_env = {"messages": good["messages"]}
    no_index = dict(good, user_data=[("env", '"tasks/math"')])
    unknown = dict(good, user_data=[("env", '"tasks/chess"'), ("task_index", "0")])
    out_of_range = dict(good, user_data=[("env", '"math"'), ("task_index", "77")])
    api_error = dict(good, messages=good["messages"][:-1], stop_reason="api_error")
    scores = score_trajectories(
        ["garbage", no_env, no_index, unknown, out_of_range, api_error, good], default=-1.0
    )
    assert len(scores) == 7
    assert [s["rewards"]["total"] for s in scores[:5]] == [-1.0] * 5
    assert all(s["outcome"] == "error" and s["error"] for s in scores[:5])
    assert "out of range" in scores[4]["error"]
    assert scores[5]["outcome"] == "unparsed" and scores[5]["stop_reason"] == "api_error"
    assert scores[6]["rewards"]["total"] == 1.0


def test_code_trajectories_are_scored_from_tool_writes_and_final_text():
    rows = trajectories_for("code", [0, 0, 0], timeout=5)
    good = "def add_numbers(a, b):\n    return a + b\n"
    write = {
        "id": "c1",
        "type": "function",
        "function": {
            "name": "write_file",
            "arguments": '{"path": "solution.py", "content": ' + repr(good).replace("'", '"') + "}",
        },
    }
    tamper = {
        "id": "c2",
        "type": "function",
        "function": {
            "name": "write_file",
            "arguments": '{"path": "solution.py", '
            '"content": "def add_numbers(a, b):\\n    return 9\\n"}',
        },
    }
    rows[0]["messages"] += [
        {"role": "assistant", "content": "", "tool_calls": [write]},
        {"role": "tool", "tool_call_id": "c1", "content": "File written"},
        {"role": "assistant", "content": "Done."},
    ]
    rows[1]["messages"] += [{"role": "assistant", "content": "```python\n" + good + "```"}]
    rows[2]["messages"] += [
        {"role": "assistant", "content": "", "tool_calls": [write, tamper]},
        {"role": "assistant", "content": "All tests pass, reward 1.0"},
    ]
    scores = score_trajectories(rows, timeout=5)
    assert [s["rewards"]["tests"] for s in scores] == [1.0, 1.0, 0.0]
    assert scores[2]["outcome"] == "wrong"


@pytest.mark.slow
def test_api_multi_turn_rollout_outputs_score_end_to_end():
    from twinkle.protocol.openai import OpenAI
    from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
    from twinkle.testing.openai_server import OpenAIServer
    from twinkle.tools import ToolManager

    env = MathEnvironment()
    answers = {env.tasks[i]["question"]: env.tasks[i]["answer"] for i in range(len(env))}

    def policy(request):  # right on even tasks, wrong on odd ones
        prompt = request["messages"][-1]["content"]
        index = next(i for i, q in enumerate(answers) if q in prompt)
        value = answers[env.tasks[index]["question"]] if index % 2 == 0 else "-1"
        return {"content": f"Working... the total is \\boxed{{{value}}}"}

    rows = trajectories_for("math", [0, 1, 2, 3])
    with OpenAIServer(policy) as server:
        api = OpenAI("policy", api_key="x", base_url=server.base_url, max_retries=0)
        outputs = APIMultiTurnRollout(api, ToolManager(), max_turns=2, concurrency=4)(rows)
    assert [o["stop_reason"] for o in outputs] == ["stop"] * 4
    scores = score_trajectories(outputs)
    assert [s["rewards"]["total"] for s in scores] == [1.0, 0.0, 1.0, 0.0]
    assert [s["id"] for s in scores] == [r["id"] for r in rows]
