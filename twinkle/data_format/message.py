"""Message, tool and trajectory types, and the shared text projections.

Every filter reads message text, reasoning and tool calls through these functions so that
the many shapes found in real agent logs (string or list-of-parts content, inline
``<think>`` blocks or ``reasoning_content``, tool calls as objects or JSON strings) are
handled in exactly one place.

Example:
    >>> split_think('<think>plan</think>Answer')
    ('Answer', 'plan')
    >>> round(cjk_ratio('日本語 ok'), 2)
    0.6
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, NotRequired, TypedDict


class ToolFunction(TypedDict):
    """The function part of a tool call: a name and its arguments (dict or JSON string).

    Example:
        >>> fn: ToolFunction = {'name': 'bash', 'arguments': '{"cmd": "ls"}'}
        >>> fn['name']
        'bash'
    """

    name: str
    arguments: str | dict[str, Any]


class ToolCall(TypedDict):
    """One tool call of an assistant message, in OpenAI shape.

    Example:
        >>> call: ToolCall = {'id': 'c1', 'type': 'function',
        ...                   'function': {'name': 'bash', 'arguments': {'cmd': 'ls'}}}
        >>> normalize_tool_calls({'tool_calls': [call]})[0]['function']['name']
        'bash'
    """

    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: ToolFunction


class Message(TypedDict, total=False):
    """One chat message; ``content`` may be a string or a list of typed parts.

    Example:
        >>> msg: Message = {'role': 'user', 'content': [{'type': 'text', 'text': 'Hi'}]}
        >>> message_text(msg)
        'Hi'
    """

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None
    tool_calls: list[ToolCall] | str | None
    tool_call_id: str
    name: str
    reasoning_content: str


class Tool(TypedDict, total=False):
    """An OpenAI function-tool definition: ``{'type': 'function', 'function': {...}}``.

    Example:
        >>> tool: Tool = {'type': 'function', 'function': {
        ...     'name': 'bash', 'parameters': {'type': 'object', 'properties': {}}}}
        >>> tool['function']['name']
        'bash'
    """

    type: Literal["function"]
    function: dict[str, Any]


class Trajectory(TypedDict, total=False):
    """A conversation row: messages and tools, plus the outputs a rollout adds.

    Example:
        >>> call = {'function': {'name': 'bash', 'arguments': '{}'}}
        >>> traj: Trajectory = {'id': 't1', 'messages': [
        ...     {'role': 'user', 'content': 'ls'}, {'role': 'assistant', 'tool_calls': [call]}]}
        >>> is_agent_row(traj['messages'])
        True
    """

    messages: list[Message]
    tools: list[Tool]
    id: str
    model_id: str
    user_data: list[tuple[str, str]]
    # rollout outputs
    turns: int
    stop_reason: str
    truncated: bool
    input_ids: list[int]
    labels: list[int]
    logprobs: list[float]
    turn_log: list[dict[str, Any]]  # per model/tool call timings (see twinkle.rollout.base)
    error: str


# Hiragana, katakana, CJK unified ideographs (+ extension A), hangul syllables and jamo.
CJK_CHARS_RE = re.compile(
    r"[\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\u1100-\u11ff]"
)
_WS_RE = re.compile(r"\s+")

# Open and close tags may be mixed (<think>...</thinking>); non-greedy, case-insensitive.
THINK_BLOCK_RE = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN_RE = re.compile(r"<think(?:ing)?>", re.IGNORECASE)


def message_text(message: Any) -> str:
    """Text of a message's content: a string as is, text parts of a list joined by ' '."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    if isinstance(content, dict) and content.get("type") == "text":
        text = content.get("text")
        return text if isinstance(text, str) else ""
    return ""


def split_think(text: str) -> tuple[str, str]:
    """Split inline think blocks out of ``text``: returns ``(response, thinking)``.

    Text before, between and after blocks is response text. An unclosed ``<think>`` makes
    everything after it thinking (a generation cut off mid-thought).
    """
    if "<" not in text:
        return text, ""
    thoughts = THINK_BLOCK_RE.findall(text)
    response = THINK_BLOCK_RE.sub(" ", text)
    m = _THINK_OPEN_RE.search(response)
    if m:
        thoughts.append(response[m.end() :])
        response = response[: m.start()]
    return response.strip(), "\n".join(t.strip() for t in thoughts)


def message_reasoning(message: Any) -> str:
    """All reasoning of a message: ``reasoning_content``/``thinking`` plus inline think blocks."""
    if not isinstance(message, dict):
        return ""
    parts = []
    for key in ("reasoning_content", "thinking"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            parts.append(value)
    _, inline = split_think(message_text(message))
    if inline:
        parts.append(inline)
    return "\n".join(parts)


def message_has_media(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") not in ("text", None) for p in content
    )


def message_has_payload(message: Any) -> bool:
    """True when a message carries anything: text, tool calls, reasoning or media."""
    if not isinstance(message, dict):
        return False
    return bool(
        message_text(message).strip()
        or normalize_tool_calls(message)
        or (
            isinstance(message.get("reasoning_content"), str)
            and message["reasoning_content"].strip()
        )
        or (isinstance(message.get("thinking"), str) and message["thinking"].strip())
        or message_has_media(message)
    )


def _loads(value: str) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def normalize_tool_calls(message: Any) -> list[dict[str, Any]] | None:
    """Tool calls of a message in OpenAI shape, or None when it has none (or they are broken).

    Accepts the OpenAI list, a JSON string of the whole list (Arrow-friendly form), items
    that are JSON strings, and ``function`` given as a JSON string. ``arguments`` is left as
    found (dict or JSON string). Broken forms give None, never an exception.
    """
    raw = message.get("tool_calls") if isinstance(message, dict) else None
    if isinstance(raw, str):
        if not raw.strip():
            return None
        raw = _loads(raw)
    if not isinstance(raw, list) or not raw:
        return None
    calls = []
    for item in raw:
        if isinstance(item, str):
            item = _loads(item)
        if not isinstance(item, dict):
            return None
        fn = item.get("function")
        if isinstance(fn, str):
            fn = _loads(fn)
            if fn is None:
                return None
            item = {**item, "function": fn}
        if fn is not None and not isinstance(fn, dict):
            return None
        calls.append(item)
    return calls


def is_agent_row(messages: Any) -> bool:
    """True when a conversation used tools: a ``tool`` message or an assistant tool call."""
    if not isinstance(messages, list):
        return False
    return any(
        isinstance(m, dict) and (m.get("role") == "tool" or normalize_tool_calls(m) is not None)
        for m in messages
    )


def cjk_ratio(text: str) -> float:
    """Share of CJK characters among the non-whitespace characters of ``text``."""
    if not text:
        return 0.0
    compact = _WS_RE.sub("", text)
    if not compact:
        return 0.0
    return len(CJK_CHARS_RE.findall(compact)) / len(compact)


def pack_value(value: Any) -> str:
    """Encode a ``user_data`` value (JSON, non-ASCII kept, unknown types as ``str``)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def user_data_get(items: Any, key: str, default: Any = None) -> Any:
    """Value of the first ``(key, value)`` pair in ``user_data``, JSON-decoded when possible."""
    if isinstance(items, dict):
        items = list(items.items())
    for pair in items or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and pair[0] == key:
            value = pair[1]
            if isinstance(value, str):
                decoded = _loads(value)
                return value if decoded is None and value != "null" else decoded
            return value
    return default
