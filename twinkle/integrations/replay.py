"""Replay fidelity: how much of a recorded conversation's tool output live tools reproduce.

When recorded agent conversations are re-run (``ReplayAPI`` replays the recorded assistant
turns, tool-call ids included, while the tools run for real in a fresh sandbox), each
recorded tool result can be compared with the live one for the same call id. The reward
is the fraction reproduced. A conversation without tool results has no such reward
(``None``, with the reason), which is not the same as 0.0.

Comparison ignores trailing whitespace on each line and at both ends, nothing else: a
changed number or path is a real difference in the environment. Standard library only;
cheap enough to score each trajectory the moment it finishes.

Example:
    >>> call = {'id': 'c1', 'function': {'name': 'run_command', 'arguments': '{}'}}
    >>> rec = {'messages': [{'role': 'user', 'content': 'x'},
    ...     {'role': 'assistant', 'tool_calls': [call]},
    ...     {'role': 'tool', 'tool_call_id': 'c1', 'content': 'hi\\n'}]}
    >>> live_result = {'role': 'tool', 'tool_call_id': 'c1', 'content': 'hi'}
    >>> live = {'messages': rec['messages'][:2] + [live_result]}
    >>> replay_fidelity(rec, live)
    {'rewards': {'fidelity': 1.0, 'total': 1.0}, 'outcome': 'correct', 'error': None}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twinkle.data_format import message_text

__all__ = ["replay_fidelity"]


def _tool_outputs(messages: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") is not None:
            out[str(m["tool_call_id"])] = message_text(m)
    return out


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def replay_fidelity(recorded: Mapping[str, Any], trajectory: Mapping[str, Any]) -> dict[str, Any]:
    """Score one replayed trajectory against its recording.

    Returns ``{'rewards': {'fidelity', 'total'}, 'outcome', 'error'}``: outcome ``correct``
    (all reproduced), ``wrong`` (some differ), ``error`` (no live tool output at all) or
    ``unscored`` (nothing recorded to compare; rewards ``{'fidelity': None}``). ``error``
    carries the trajectory's own error, if any.
    """
    expected = _tool_outputs(recorded.get("messages"))
    if not expected:
        return {
            "rewards": {"fidelity": None},
            "outcome": "unscored",
            "error": "the recording has no tool results to reproduce",
        }
    live = _tool_outputs(trajectory.get("messages"))
    matched = sum(
        1 for cid, text in expected.items() if cid in live and _norm(live[cid]) == _norm(text)
    )
    value = matched / len(expected)
    outcome = "correct" if value == 1.0 else ("wrong" if live else "error")
    error = str(trajectory["error"]) if trajectory.get("error") else None
    return {"rewards": {"fidelity": value, "total": value}, "outcome": outcome, "error": error}
