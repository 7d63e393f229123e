"""Span payloads of a trace: scrubbed of secrets and capped in size.

Every span input and output goes through here before MLflow sees it: ``clip`` scrubs a
value (``scrub_secrets``) and cuts it to the per-payload cap and to what is left of the
trace's budget; ``messages_within`` keeps the most recent messages a model call was sent
that fit, counting the earlier ones left out. The budget is a one-item list shared by all
payloads of one trace, so each call spends from it in place.

Example:
    >>> budget = [20]
    >>> clip('x' * 30, 100, budget)
    'xxxxxxxxxxxxxxxxxxxx...[truncated by twinkle: 10 more chars]'
    >>> budget
    [0]
    >>> messages_within([{'role': 'user', 'content': 'hi'}], 100, [100])
    {'messages': [{'role': 'user', 'content': 'hi'}]}
"""

from __future__ import annotations

import json
from typing import Any

from twinkle.tracking.scrub import scrub_secrets

TRUNCATED = "...[truncated by twinkle: {n} more chars]"


def clip(value: Any, limit: int, budget: list[int]) -> Any:
    """JSON-able ``value`` cut to ``limit`` chars and to what is left of the trace budget."""
    value = scrub_secrets(value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    allowed = max(0, min(limit, budget[0]))
    if len(text) <= allowed:
        budget[0] -= len(text)
        return value
    budget[0] -= allowed
    return text[:allowed] + TRUNCATED.format(n=len(text) - allowed)


def messages_within(messages: list[dict[str, Any]], limit: int, budget: list[int]) -> Any:
    """The messages a model call was sent, as an LLM span's inputs (``{'messages': [...]}``,
    which the MLflow UI shows as a chat): the most recent that fit ``limit`` characters and
    what is left of the trace budget, ``omitted_messages`` counting the earlier ones left
    out. A last message alone over the limit is cut like any payload."""
    allowed = max(0, min(limit, budget[0]))
    kept: list[Any] = []
    used = 0
    for message in reversed(messages):
        message = scrub_secrets(message)
        size = len(json.dumps(message, ensure_ascii=False, default=str)) + 2
        if used + size > allowed:
            break
        kept.append(message)
        used += size
    if not kept and messages:  # the last message alone is over the cap: cut it
        return {
            "messages": [],
            "last_message": clip(messages[-1], limit, budget),
            "omitted_messages": len(messages) - 1,
        }
    budget[0] -= used
    inputs: dict[str, Any] = {"messages": kept[::-1]}
    if len(kept) < len(messages):
        inputs["omitted_messages"] = len(messages) - len(kept)
    return inputs
