"""twinkle.integrations.replay.replay_fidelity: the reward of re-run recorded conversations."""

from __future__ import annotations

from twinkle.integrations.replay import replay_fidelity


def _call(cid: str) -> dict:
    return {
        "role": "assistant",
        "tool_calls": [{"id": cid, "function": {"name": "run_command", "arguments": "{}"}}],
    }


def _tool(cid: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text}


RECORDED = {
    "messages": [
        {"role": "user", "content": "go"},
        _call("a"),
        _tool("a", "1\n"),
        _call("b"),
        _tool("b", "x"),
    ]
}


def test_all_reproduced_ignoring_trailing_whitespace():
    live = {
        "messages": RECORDED["messages"][:2] + [_tool("a", "1  ")] + [_call("b"), _tool("b", "x\n")]
    }
    assert replay_fidelity(RECORDED, live) == {
        "rewards": {"fidelity": 1.0, "total": 1.0},
        "outcome": "correct",
        "error": None,
    }


def test_partial_match_is_a_fraction_and_keeps_the_trajectory_error():
    live = {
        "messages": [_call("a"), _tool("a", "2"), _call("b"), _tool("b", "x")],
        "error": "ToolError: boom",
    }
    score = replay_fidelity(RECORDED, live)
    assert score["rewards"] == {"fidelity": 0.5, "total": 0.5}
    assert (score["outcome"], score["error"]) == ("wrong", "ToolError: boom")


def test_no_live_output_is_an_error_and_no_recording_is_unscored():
    assert replay_fidelity(RECORDED, {"messages": []})["outcome"] == "error"
    unscored = replay_fidelity({"messages": [{"role": "user", "content": "hi"}]}, {"messages": []})
    assert unscored["rewards"] == {"fidelity": None} and unscored["outcome"] == "unscored"
