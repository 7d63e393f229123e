"""ReplayAPI through APIMultiTurnRollout against live tools, and trace files."""

import json
import os

import pytest

from twinkle.protocol.base import APICallError
from twinkle.protocol.replay import ReplayAPI
from twinkle.rollout import APIMultiTurnRollout
from twinkle.rollout.traces import write_traces
from twinkle.tools import Tool, ToolManager


class Weather(Tool):
    def __call__(self, tool_name, arguments):
        return f"{arguments['city']}: sunny"

    def tool_info(self):
        return {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }


def recorded(rid, city, final, prompt="weather?"):
    return {
        "id": rid,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": prompt},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": json.dumps(
                    [
                        {
                            "id": f"rec-{rid}",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": json.dumps({"city": city}),
                            },
                        }
                    ]
                ),
            },
            {"role": "tool", "tool_call_id": f"rec-{rid}", "content": f"{city}: sunny"},
            {"role": "assistant", "content": final},
        ],
    }


def test_each_row_replays_its_own_turns_against_live_tools():
    # Same prompt three times: the ids keep each row on its own recording.
    rows = [
        recorded("a", "Oslo", "Oslo is sunny."),
        recorded("b", "Rome", "Rome is sunny."),
        recorded("c", "Lima", "Lima is sunny."),
        {"messages": [{"role": "user", "content": "lonely"}]},
    ]
    api, prompts = ReplayAPI.from_rows(rows)
    assert [p["messages"][-1]["role"] for p in prompts] == ["user"] * 4
    out = APIMultiTurnRollout(api, ToolManager([Weather()]), concurrency=4)(prompts)
    for row, result in zip(rows[:3], out[:3]):
        assert result["stop_reason"] == "stop" and result["turns"] == 2
        assert [m.get("content") for m in result["messages"]] == [
            m.get("content") for m in row["messages"]
        ]
        call = result["messages"][2]["tool_calls"][0]
        assert (
            call["id"] == f"rec-{row['id']}" and result["messages"][3]["tool_call_id"] == call["id"]
        )
    # A recording with no assistant turn: the replay reports a natural stop straight away.
    assert out[3]["stop_reason"] == "stop" and out[3]["messages"][-1]["content"] == ""


def test_replay_stops_when_recorded_turns_run_out_and_unknown_prompts_fail():
    row = recorded("a", "Oslo", "ignored")
    row["messages"] = row["messages"][:4]  # the recording ends on a tool output
    api, prompts = ReplayAPI.from_rows([row])
    out = APIMultiTurnRollout(api, ToolManager([Weather()]))(
        prompts + [{"messages": [{"role": "user", "content": "new"}]}]
    )
    assert out[0]["stop_reason"] == "stop" and out[0]["turns"] == 2
    assert out[1]["stop_reason"] == "api_error" and "no recording" in out[1]["error"]


def test_replay_without_ids_follows_the_history():
    api = ReplayAPI(
        [
            recorded(None, "Oslo", "first", prompt="p1"),
            recorded(None, "Rome", "second", prompt="p2"),
        ]
    )
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "p2"}]
    first = api({"messages": history}, None)
    assert first["tool_calls"][0]["function"]["arguments"] == '{"city": "Rome"}'
    history += [first, {"role": "tool", "tool_call_id": "x", "content": "live output may differ"}]
    assert api({"messages": history}, None)["content"] == "second"
    history[-2] = {"role": "assistant", "content": "something else"}
    with pytest.raises(APICallError, match="diverged"):
        api({"messages": history}, None)


def test_trace_files(tmp_path):
    trajectories = [
        {
            "id": "hotpotqa/42",
            "messages": [],
            "stop_reason": "stop",
            "input_ids": [1, 2],
            "labels": [1, 2],
            "logprobs": [-0.1],
            "user_data": [("ground_truth", '"Paris"')],
            "turns": 1,
        },
        {
            "messages": [],
            "stop_reason": "api_error",
            "error": "boom",
            "user_data": [("prompt_id", '"p/7"')],
        },
        {"id": "hotpotqa/42", "messages": [], "stop_reason": "stop"},
        {"id": "skip-me", "messages": [], "stop_reason": "stop"},
        {"messages": [], "stop_reason": "stop"},
    ]
    paths = write_traces(
        trajectories,
        tmp_path / "traces",
        step=7,
        trace_callback=lambda t: t.get("id") != "skip-me" and t["stop_reason"] is not None,
        success_callback=lambda t: t["stop_reason"] == "stop",
    )
    names = sorted(os.path.basename(p) for p in paths)
    assert names == [
        "step000007-fail-p_7.json",
        "step000007-ok-hotpotqa_42-2.json",
        "step000007-ok-hotpotqa_42.json",
        "step000007-ok-idx4.json",
    ]
    record = json.loads((tmp_path / "traces" / "step000007-ok-hotpotqa_42.json").read_text())
    assert record["ground_truth"] == "Paris" and record["success"] is True and record["turns"] == 1
    assert not {"input_ids", "labels", "logprobs"} & set(record["trajectory"])
    assert (
        "\n  " in (tmp_path / "traces" / "step000007-ok-hotpotqa_42.json").read_text()
    )  # pretty-printed
    assert not [p for p in os.listdir(tmp_path / "traces") if p.endswith(".tmp")]


def test_broken_callbacks_do_not_lose_the_batch(tmp_path):
    def broken(_):
        raise RuntimeError("bad callback")

    assert write_traces([{"id": "a"}], tmp_path, step=0, trace_callback=broken) == []
    paths = write_traces([{"id": "a"}], tmp_path, step=0, success_callback=broken)
    assert os.path.basename(paths[0]) == "step000000-fail-a.json"


def test_rollout_writes_traces_with_its_own_step_counter(tmp_path):
    api, prompts = ReplayAPI.from_rows([recorded("a", "Oslo", "done")])
    rollout = APIMultiTurnRollout(
        api,
        ToolManager([Weather()]),
        trace_dir=tmp_path,
        success_callback=lambda t: t["stop_reason"] == "stop",
    )
    rollout(prompts)
    rollout(prompts)
    rollout(prompts, global_step=42)
    assert sorted(os.listdir(tmp_path)) == [
        "step000000-ok-a.json",
        "step000001-ok-a.json",
        "step000042-ok-a.json",
    ]
