"""``MessageNormalizer``: heartbeat stripping, tool calls in OpenAI shape, same-role merging.

Plain ``re`` and ``json`` from the standard library: every scan is a compiled regex or a
``str`` method over the whole text (no per-character Python loops), and rows that need no
change are returned as they are, so the normalizer stays cheap at the end of the chain.
"""

from __future__ import annotations

import json
import re
from typing import Any

from twinkle.data_format import message_has_payload, message_text, normalize_tool_calls
from twinkle.preprocessor.base import Mapper, Row, drop, malformed_reason, map_col_to_row

EMPTY_AFTER_NORMALIZE = "empty_after_normalize"

#: Keep-alive turns of agent runtimes: ``HEARTBEAT`` / ``HEARTBEAT_OK`` / ``HEARTBEAT.md``
#: tokens (upper case, as runtimes write them), ``[heartbeat]`` / ``<heartbeat>`` tags, or
#: a message that is nothing but "heartbeat", "keep-alive" or "ping". Ordinary prose such as
#: "my heartbeat monitor app crashes" does not match.
DEFAULT_HEARTBEAT_PATTERN = (
    r"\bHEARTBEAT(?:_OK)?\b|HEARTBEAT\.md"
    r"|(?i:\[heartbeat\]|<heartbeat\b|^\W*(?:heartbeat|keep[-_ ]?alive|ping)\W*$)"
)
_HEAD = 300  # only the start of a message decides whether it is a heartbeat
# Case-insensitive regex search is slow in ``re`` (~10 us per 300 chars); with the default
# pattern a plain substring test rules out nearly every message first.
_SHORT = 24

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_TOOL_RESPONSE_RE = re.compile(r"<tool_response>(.*?)(?:</tool_response>|\Z)", re.DOTALL)
_FUNCTION_RE = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER_RE = re.compile(
    r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL
)
_MERGEABLE = frozenset(("system", "user", "assistant"))


def _json_or_str(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value.strip()


def _arguments_json(arguments: Any) -> str:
    """OpenAI carries arguments as a JSON string; a string that is not JSON is kept as found."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return json.dumps(arguments, ensure_ascii=False, default=str)


def _parse_block(block: str) -> tuple[str, Any] | None:
    """One ``<tool_call>`` body as ``(name, arguments)``, or None when it is not a call."""
    block = block.strip()
    m = _FUNCTION_RE.match(block)
    if m:  # Qwen3-Coder XML form: <function=NAME><parameter=K>V</parameter></function>
        params = {k: _json_or_str(v.strip()) for k, v in _PARAMETER_RE.findall(m.group(2))}
        return m.group(1), params
    try:
        obj = json.loads(block)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name") or obj.get("tool_name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        decoded = _json_or_str(args)
        args = decoded if isinstance(decoded, dict) else args
    return name, args


class MessageNormalizer(Mapper):
    """Clean message lists in three passes; rows are rewritten, never dropped for content.

    1. **Heartbeats.** Non-dict messages are removed and ``developer`` becomes ``system``.
       A user heartbeat (see ``DEFAULT_HEARTBEAT_PATTERN``, first 300 characters) is
       removed together with the assistant reply that answers it (unless that reply makes
       tool calls); an assistant heartbeat (``HEARTBEAT_OK``) is removed too. After the
       other passes, messages before the first user or system message are removed when
       there is one.
    2. **Tool calls to OpenAI shape.** Calls given as JSON strings, JSON-string items or
       JSON-string ``function`` become ``[{id, type: 'function', function: {name,
       arguments}}]`` with ``arguments`` a JSON string (as the OpenAI API carries it) and
       ``call_norm_NNNN`` ids where missing. Qwen/Hermes ``<tool_call>{json}</tool_call>``
       (and ``<function=NAME><parameter=K>``) blocks in an assistant's text become
       ``tool_calls``; the blocks leave the content and every other field is kept. The
       following user turn is then read as tool results: its ``<tool_response>`` blocks
       answer the calls in order (text outside them stays a user turn), or, for a single
       call, the whole turn is its result. An unparsable block leaves the message as it
       was; an empty list or the string ``'[]'`` is not a tool call.
    3. **Merge.** Consecutive system, user or assistant messages without tool calls are
       merged into a copy of the first: string contents joined by ``\\n``, part lists
       concatenated (a string becomes a text part), ``reasoning_content`` / ``thinking``
       joined, other fields taken from the first message that has them. A message is blank
       (and removed) only without text, media, tool calls and reasoning, so reasoning-only
       assistant turns stay. Tool messages are kept as they are, even when empty, so each
       call keeps its result.

    Args:
        strip_heartbeats, rewrite_tool_calls, merge_same_role: switch each pass on or off.
        heartbeat_pattern: regex (searched in the first 300 characters) marking heartbeats.

    Drop reasons: ``empty_after_normalize`` (no message left), and the shared
    ``malformed_*`` reasons.

    Example:
        >>> call = '<tool_call>{"name": "sh", "arguments": {"cmd": "ls"}}</tool_call>'
        >>> row = {'messages': [{'role': 'user', 'content': 'ls'},
        ...     {'role': 'assistant', 'content': call},
        ...     {'role': 'user', 'content': '<tool_response>a.txt</tool_response>'}]}
        >>> (out,), _ = MessageNormalizer()([row])
        >>> [m['role'] for m in out['messages']], out['messages'][1]['tool_calls'][0]['function']
        (['user', 'assistant', 'tool'], {'name': 'sh', 'arguments': '{"cmd": "ls"}'})
    """

    def __init__(
        self,
        strip_heartbeats: bool = True,
        rewrite_tool_calls: bool = True,
        merge_same_role: bool = True,
        heartbeat_pattern: str = DEFAULT_HEARTBEAT_PATTERN,
    ) -> None:
        try:
            self._heartbeat = re.compile(heartbeat_pattern)
        except (re.error, TypeError) as exc:
            raise ValueError(
                f"heartbeat_pattern={heartbeat_pattern!r} is not a valid regex: {exc}"
            ) from exc
        self._quick = heartbeat_pattern == DEFAULT_HEARTBEAT_PATTERN
        self.strip_heartbeats = strip_heartbeats
        self.rewrite_tool_calls = rewrite_tool_calls
        self.merge_same_role = merge_same_role

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        kept: list[Row] = []
        dropped: list[Row] = []
        for row in map_col_to_row(rows):
            reason = malformed_reason(row)
            if reason is None:
                try:
                    new = self.map_row(row)
                except Exception as exc:  # noqa: BLE001  (one odd row must not stop the batch)
                    reason = f"malformed_row:{type(exc).__name__}"
                else:
                    if new["messages"]:
                        kept.append(new)
                        continue
                    reason = EMPTY_AFTER_NORMALIZE
            dropped.append(drop(row, reason))
        return kept, dropped

    def map_row(self, row: Row) -> Row:
        messages = row["messages"]
        out = (
            self._strip(messages)
            if self.strip_heartbeats
            else [m for m in messages if type(m) is dict]
        )
        if self.rewrite_tool_calls:
            out = self._rewrite(out)
        if self.merge_same_role:
            out = self._merge(out)
        if self.strip_heartbeats:
            out = self._trim_leading(out)
        if len(out) == len(messages) and all(a is b for a, b in zip(out, messages)):
            return row
        return {**row, "messages": out}

    # pass 0 -------------------------------------------------------------------------------
    def _is_heartbeat(self, m: dict[str, Any]) -> bool:
        head = message_text(m)[:_HEAD]
        if self._quick and not (
            "eartbeat" in head or "EARTBEAT" in head or len(head.strip()) <= _SHORT
        ):
            return False
        return self._heartbeat.search(head) is not None

    def _strip(self, messages: list[Any]) -> list[Any]:
        out = []
        armed = False
        for m in messages:
            if type(m) is not dict:
                continue
            role = m.get("role")
            if role == "developer":
                m = {**m, "role": "system"}
                role = "system"
            if role == "user" and self._is_heartbeat(m):
                armed = True
                continue
            if role == "assistant" and (armed or self._is_heartbeat(m)) and not _has_calls(m):
                armed = False
                continue
            armed = False
            out.append(m)
        return out

    @staticmethod
    def _trim_leading(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Drop what comes before the first user or system message (when there is one).

        Runs after merging, which may remove a blank first message, so that a second
        normalisation changes nothing.
        """
        for i, m in enumerate(messages):
            if m.get("role") in ("user", "system"):
                return messages[i:] if i else messages
        return messages

    # pass 1 -------------------------------------------------------------------------------
    def _rewrite(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        counter = [0]
        pending: list[str] = []  # ids of content-parsed calls still waiting for results
        single = False  # a lone call may take a whole untagged user turn as its result
        for m in messages:
            role = m.get("role")
            if pending and role == "user":
                results, rest = self._tool_results(m, pending, single)
                single = False
                if results:
                    out.extend(results)
                    if rest is not None:
                        out.append(rest)
                    continue
            pending = []
            if role != "assistant":
                out.append(m)
                continue
            raw = m.get("tool_calls")
            if raw and type(raw) is list and all(_is_canonical(c) for c in raw):
                out.append(m)
                continue
            calls = normalize_tool_calls(m) if raw else None
            if calls is not None:
                canonical = [_canonical_call(c, counter) for c in calls]
                out.append(m if canonical == raw else {**m, "tool_calls": canonical})
                continue
            content = m.get("content")
            if isinstance(content, str) and "<tool_call>" in content:
                parsed = [_parse_block(b) for b in _TOOL_CALL_RE.findall(content)]
                if parsed and all(p is not None for p in parsed):
                    canonical = [
                        _canonical_call({"function": {"name": n, "arguments": a}}, counter)
                        for n, a in parsed
                    ]
                    out.append(
                        {
                            **m,
                            "content": _TOOL_CALL_RE.sub("", content).strip(),
                            "tool_calls": canonical,
                        }
                    )
                    pending = [c["id"] for c in canonical]
                    single = len(pending) == 1
                    continue
            out.append(m)
        return out

    @staticmethod
    def _tool_results(
        m: dict[str, Any], ids: list[str], single: bool
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Tool messages answering ``ids`` (consumed from the front) read from user turn ``m``."""
        text = m.get("content")
        if not isinstance(text, str) or not text.strip():  # part lists (media) stay user turns
            return [], None
        if "<tool_response>" in text:
            bodies = _TOOL_RESPONSE_RE.findall(text)
            rest = _TOOL_RESPONSE_RE.sub("", text).strip()
        elif single:
            bodies, rest = [text], ""
        else:
            return [], None
        results = []
        for body in bodies:
            msg = {"role": "tool", "content": body.strip()}
            if ids:
                msg["tool_call_id"] = ids.pop(0)
            results.append(msg)
        return results, ({**m, "content": rest} if rest else None)

    # pass 2 -------------------------------------------------------------------------------
    def _merge(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        run: list[dict[str, Any]] = []
        for m in messages:
            role = m.get("role")
            if role not in _MERGEABLE or (role == "assistant" and _has_calls(m)):
                if run:
                    out.append(_merged(run))
                    run = []
                out.append(m)  # atomic: tool results, tool calls, unknown roles
                continue
            if not message_has_payload(m):
                continue
            if run and run[0].get("role") != role:
                out.append(_merged(run))
                run = []
            run.append(m)
        if run:
            out.append(_merged(run))
        return out


def _is_canonical(call: Any) -> bool:
    """Already ``{id, type: 'function', function: {name, arguments: str}}``: nothing to rewrite."""
    if type(call) is not dict or call.get("type") != "function":
        return False
    fn = call.get("function")
    return (
        isinstance(call.get("id"), str)
        and bool(call["id"])
        and type(fn) is dict
        and isinstance(fn.get("name"), str)
        and isinstance(fn.get("arguments"), str)
    )


def _has_calls(m: dict[str, Any]) -> bool:
    raw = m.get("tool_calls")
    if not raw:
        return False
    if type(raw) is list and all(_is_canonical(c) for c in raw):
        return True
    return normalize_tool_calls(m) is not None


def _canonical_call(call: dict[str, Any], counter: list[int]) -> dict[str, Any]:
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name = fn.get("name", call.get("name"))
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        counter[0] += 1
        call_id = f"call_norm_{counter[0]:04d}"
    arguments = fn.get("arguments", call.get("arguments"))
    return {
        **call,
        "id": call_id,
        "type": "function",
        "function": {
            **fn,
            "name": "" if name is None else str(name),
            "arguments": _arguments_json(arguments),
        },
    }


def _merged(run: list[dict[str, Any]]) -> dict[str, Any]:
    if len(run) == 1:
        return run[0]
    merged: dict[str, Any] = {}
    for m in reversed(run):  # earlier messages win for every other field
        merged.update(m)
    contents = [m.get("content") for m in run]
    if any(isinstance(c, list) for c in contents):
        parts: list[Any] = []
        for c in contents:
            if isinstance(c, list):
                parts.extend(c)
            elif isinstance(c, str) and c.strip():
                parts.append({"type": "text", "text": c.strip()})
        merged["content"] = parts
    else:
        texts = [t for t in (message_text(m).strip() for m in run) if t]
        merged["content"] = "\n".join(texts) if texts else run[0].get("content")
    for key in ("reasoning_content", "thinking"):
        values = [m[key].strip() for m in run if isinstance(m.get(key), str) and m[key].strip()]
        if values:
            merged[key] = "\n".join(values)
    return merged
