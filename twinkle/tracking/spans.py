"""Span trees of trajectories: what one trace holds, before MLflow writes it.

``build_spans`` turns a trajectory into ``SpanRecord``s: an AGENT root span, an LLM span
per model call and a TOOL span per tool call, with payloads scrubbed and capped
(``twinkle.tracking.payloads``). ``trajectory_key`` names a trajectory, ``sampled`` picks a
deterministic share of them and ``is_failed`` tells a failed one.

Per-call timings come from the rollout's ``turn_log`` (see ``twinkle.rollout.base``): each
``llm`` entry becomes an LLM span, each ``tool`` entry a TOOL span, with its recorded start
and latency. Trajectories without one (recorded data) get spans laid out 1 ms apart, and
the root span says so (``timings = 'missing'``).

Example:
    >>> chat = [{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}]
    >>> spans = build_spans({'id': 'row-7', 'messages': chat}, end_time=1.0)
    >>> [(s.name, s.span_type, s.parent) for s in spans]
    [('trajectory', 'AGENT', None), ('llm_call_1', 'LLM', 0)]
    >>> spans[0].attributes['timings']
    'missing'
    >>> trajectory_key({'id': 'row-7'}, 3), trajectory_key({}, 3)
    ('row-7', '#3')
    >>> sampled('run-1/row-7', 1.0), sampled('run-1/row-7', 0.0)
    (True, False)
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twinkle.data_format import message_text, normalize_tool_calls, user_data_get
from twinkle.data_format.outcome import is_failed
from twinkle.tracking.payloads import clip, messages_within


@dataclass(slots=True)
class SpanRecord:
    """A span before it is written: neutral of the MLflow API that writes it."""

    name: str
    span_type: str
    parent: int | None
    start_ns: int
    end_ns: int
    inputs: Any = None
    outputs: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def trajectory_key(traj: Mapping[str, Any], index: int) -> str:
    """Stable identity of a trajectory: its ``id``, a ``user_data`` id, else its position."""
    for candidate in (traj.get("id"), _user_data(traj, "id"), _user_data(traj, "prompt_id")):
        if candidate not in (None, ""):
            return str(candidate)
    return f"#{index}"


def _user_data(traj: Mapping[str, Any], key: str) -> Any:
    try:
        return user_data_get(traj.get("user_data"), key)
    except Exception:  # noqa: BLE001 - malformed user_data is the row's problem, not the tracer's
        return None


def sampled(key: str, rate: float) -> bool:
    """Deterministic Bernoulli(rate) on ``key``: the same key always gets the same answer."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return h / 2**64 < rate


def build_spans(
    traj: Mapping[str, Any],
    *,
    max_spans: int = 64,
    max_payload_chars: int = 4000,
    max_trace_chars: int = 64000,
    end_time: float | None = None,
) -> list[SpanRecord]:
    """The span tree of one trajectory: root AGENT span first, then LLM and TOOL children."""
    messages = [m for m in (traj.get("messages") or []) if isinstance(m, dict)]
    budget = [max_trace_chars]
    first_reply = next(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages)
    )
    prompt = messages[:first_reply]
    # Position of each assistant message (by turn) and each tool result (by call id).
    replies = [
        i for i in range(first_reply, len(messages)) if messages[i].get("role") == "assistant"
    ]
    tool_results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    log = [e for e in (traj.get("turn_log") or []) if isinstance(e, dict)]
    if not log:
        log = _log_from_messages(messages, replies)

    children: list[SpanRecord] = []
    synthetic = 0  # spans without recorded times are laid out 1 ms apart, then shifted
    for entry in log:
        start = entry.get("start_ns")
        if not isinstance(start, int):
            synthetic += 1
            start = synthetic * 1_000_000
        latency = entry.get("latency_s")
        end = start + int((latency if isinstance(latency, (int, float)) else 0.0009) * 1e9)
        turn = entry.get("turn") or 0
        if entry.get("type") == "llm":
            pos = replies[turn - 1] if 0 < turn <= len(replies) else None
            msg = messages[pos] if pos is not None else None
            usage = {
                "input_tokens": entry.get("prompt_tokens"),
                "output_tokens": entry.get("completion_tokens"),
            }
            attrs = {
                "turn": turn,
                "finish_reason": entry.get("finish_reason"),
                "attempts": entry.get("attempts"),
            }
            if any(isinstance(v, int) for v in usage.values()):
                usage = {k: int(v or 0) for k, v in usage.items()}
                attrs["mlflow.chat.tokenUsage"] = {**usage, "total_tokens": sum(usage.values())}
            outputs = None
            if msg is not None and not entry.get("error"):
                outputs = {
                    "content": message_text(msg),
                    "tool_calls": normalize_tool_calls(msg),
                    "reasoning_content": msg.get("reasoning_content"),
                }
            sent = messages[: pos if pos is not None else len(messages)]
            children.append(
                SpanRecord(
                    name=f"llm_call_{turn}",
                    span_type="LLM",
                    parent=0,
                    start_ns=start,
                    end_ns=end,
                    inputs=messages_within(sent, max_payload_chars, budget),
                    outputs=clip(outputs, max_payload_chars, budget),
                    attributes={k: v for k, v in attrs.items() if v is not None},
                    error=entry.get("error") or None,
                )
            )
        elif entry.get("type") == "tool":
            result = tool_results.get(entry.get("tool_call_id"))
            out = message_text(result) if result else None
            children.append(
                SpanRecord(
                    name=f"tool:{entry.get('name') or '?'}",
                    span_type="TOOL",
                    parent=0,
                    start_ns=start,
                    end_ns=end,
                    inputs=clip({"arguments": entry.get("arguments")}, max_payload_chars, budget),
                    outputs=clip(out, max_payload_chars, budget),
                    attributes={
                        "turn": turn,
                        "tool_call_id": entry.get("tool_call_id"),
                        "tool": entry.get("name"),
                    },
                    error=(out or "tool failed") if entry.get("error") else None,
                )
            )

    dropped = max(0, len(children) - (max_spans - 1))
    children = children[: max(0, max_spans - 1)]
    if synthetic:  # shift the synthetic layout so its last span ends at the trajectory's end
        shift = int((end_time or time.time()) * 1e9) - (synthetic + 1) * 1_000_000
        for span in children:
            if span.start_ns < 10**15:
                span.start_ns += shift
                span.end_ns += shift
    now = int((end_time or time.time()) * 1e9)
    start_ns = min((s.start_ns for s in children), default=now)
    end_ns = max((s.end_ns for s in children), default=now)
    root_attrs = {
        "stop_reason": traj.get("stop_reason"),
        "turns": traj.get("turns"),
        "truncated": traj.get("truncated"),
        "spans_dropped": dropped,
        "timings": "missing" if synthetic else "recorded",
    }
    root = SpanRecord(
        name="trajectory",
        span_type="AGENT",
        parent=None,
        start_ns=start_ns,
        end_ns=end_ns,
        inputs=clip(
            {"messages": prompt, "tools": [_tool_name(t) for t in traj.get("tools") or []]},
            max_payload_chars,
            budget,
        ),
        outputs=clip(
            {
                "final": message_text(messages[-1]) if messages else None,
                "stop_reason": traj.get("stop_reason"),
            },
            max_payload_chars,
            budget,
        ),
        attributes={k: v for k, v in root_attrs.items() if v is not None},
        error=str(traj.get("error") or traj.get("stop_reason")) if is_failed(traj) else None,
    )
    return [root, *children]


def _log_from_messages(messages: list[dict[str, Any]], replies: list[int]) -> list[dict[str, Any]]:
    """A ``turn_log`` without times, for trajectories that carry none (recorded data)."""
    log: list[dict[str, Any]] = []
    for turn, pos in enumerate(replies, start=1):
        log.append(
            {"type": "llm", "turn": turn, "finish_reason": messages[pos].get("finish_reason")}
        )
        for call in normalize_tool_calls(messages[pos]) or []:
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            log.append(
                {
                    "type": "tool",
                    "turn": turn,
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments"),
                    "tool_call_id": call.get("id"),
                }
            )
    return log


def _tool_name(tool: Any) -> Any:
    if isinstance(tool, dict):
        return (tool.get("function") or {}).get("name", tool.get("name"))
    return str(tool)
