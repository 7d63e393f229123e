"""``MessageSanityFilter``: structural checks of a conversation, after two clean-ups.

Per row: a ``messages`` that is not a non-empty list is dropped (``invalid_messages``).
System messages are consolidated into one at index 0 when there are several or one sits
elsewhere (texts joined with a blank line; a multimodal system message keeps its parts).
With ``trim_to_assistant`` the list is cut after the last assistant that carries anything
(text, tool calls, reasoning, media); a row without one is dropped (``no_assistant``).
Whether the row is an agent row (a tool message or a tool call) is decided on the trimmed
list. Then the checks run in order and the first failure is the drop reason:

1. ``role_order``: dict messages with roles system/user/assistant/tool; system only first;
   the first other message a user; an assistant after some user; a tool message after an
   assistant (agent rows) or right after an assistant with tool calls or another tool.
2. ``tool_matching``: without tools in play, each assistant's call ids equal the ids of the
   tool messages right after it; in agent rows every ``tool_call_id`` names a call that
   exists (checked when any call has an id).
3. ``content_integrity``: no assistant that carries nothing (reasoning-only ones are kept),
   no empty system message, no
   text over ``max_msg_chars``, tool-call names like identifiers and string arguments that
   are JSON (blank counts as ``{}``), no message repeating the one just before it (same
   role, same text) (tool messages and tool calls excepted), at least one user and one
   assistant and ``min_turns`` of them together.
4. ``lang_match``: with at least 50 assistant characters, the user writing CJK (>= 30%) and
   the assistant almost none (< 2%), or the reverse, fails.
5. ``agent_min_visible``: agent rows need ``min_agent_visible_chars`` of assistant text plus
   reasoning (<= 0 turns it off).
6. ``sensitive_words``: any message text containing a listed word (case-insensitive) fails;
   the list comes from ``sensitive_words_file`` (one per line, ``#`` comments) and
   ``extra_sensitive_words``; with none the check passes.

Kept rows carry the consolidated and trimmed messages. ``max_msg_chars`` has one default,
80,000 characters.

Example:
    >>> f = MessageSanityFilter()
    >>> msgs = [{'role': 'assistant', 'content': 'Hi'}, {'role': 'user', 'content': 'x'}]
    >>> f([{'messages': msgs}])[1][0]['drop_reason']
    'role_order'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from twinkle.data_format import (
    cjk_ratio,
    is_agent_row,
    message_has_media,
    message_has_payload,
    message_text,
    normalize_tool_calls,
)
from twinkle.preprocessor.base import Row, drop, logger, map_col_to_row

_ROLES = frozenset(("system", "user", "assistant", "tool"))
_TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
CHECKS = (
    "role_order",
    "tool_matching",
    "content_integrity",
    "lang_match",
    "agent_min_visible",
    "sensitive_words",
)


def consolidate_system_messages(messages: list[Any]) -> list[Any]:
    """One system message at index 0 holding every system text (unchanged if already so)."""
    positions = [
        i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "system"
    ]
    if not positions or positions == [0]:
        return messages
    systems = [messages[i] for i in positions]
    rest = [m for i, m in enumerate(messages) if i not in set(positions)]
    first = dict(systems[0])
    if all(isinstance(s.get("content"), list) for s in systems):
        first["content"] = [p for s in systems for p in s["content"]]
    elif not any(message_has_media(s) for s in systems):
        texts = [message_text(s).strip() for s in systems]
        first["content"] = "\n\n".join(t for t in texts if t)
    return [first, *rest]


def trim_to_last_assistant(messages: list[Any]) -> list[Any] | None:
    """Messages up to the last assistant that carries anything, or None without one."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "assistant" and message_has_payload(m):
            return messages[: i + 1]
    return None


def _call_ids(message: dict[str, Any]) -> list[str]:
    return [
        c["id"]
        for c in normalize_tool_calls(message) or ()
        if isinstance(c.get("id"), str) and c["id"]
    ]


def _role_order(messages: list[Any], is_agent: bool) -> bool:
    seen_user = seen_assistant = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            return False
        role = m["role"]
        if role == "system":
            if i != 0:
                return False
            continue
        if not seen_user and not seen_assistant and role != "user":
            return False
        if role == "user":
            seen_user = True
        elif role == "assistant":
            if not seen_user:
                return False
            seen_assistant = True
        elif is_agent:
            if not seen_assistant:
                return False
        else:
            prev = messages[i - 1] if i else None
            ok = isinstance(prev, dict) and (
                prev.get("role") == "tool"
                or (prev.get("role") == "assistant" and normalize_tool_calls(prev) is not None)
            )
            if not ok:
                return False
    return True


def _tool_matching(messages: list[dict[str, Any]], is_agent: bool) -> bool:
    all_ids: set[str] = set()
    for m in messages:
        if m.get("role") == "assistant":
            all_ids.update(_call_ids(m))
    if is_agent:
        if not all_ids:
            return True
        return all(
            m.get("tool_call_id") in all_ids
            for m in messages
            if m.get("role") == "tool" and m.get("tool_call_id")
        )
    for i, m in enumerate(messages):
        ids = _call_ids(m) if m.get("role") == "assistant" else []
        if not ids:
            continue
        answered = set()
        for nxt in messages[i + 1 :]:
            if nxt.get("role") != "tool":
                break
            answered.add(nxt.get("tool_call_id"))
        if answered != set(ids):
            return False
    return True


def _content_integrity(messages: list[dict[str, Any]], min_turns: int, max_chars: int) -> bool:
    users = assistants = 0
    prev: dict[str, Any] | None = None
    for m in messages:
        role, text = m.get("role"), message_text(m)
        calls = normalize_tool_calls(m)
        if role == "assistant" and calls is None and not message_has_payload(m):
            return False
        if role == "system" and not text.strip() and not message_has_media(m):
            return False
        if len(text) > max_chars:
            return False
        for call in calls or ():
            fn = call.get("function") or {}
            if not isinstance(fn.get("name"), str) or not _TOOL_NAME_RE.match(fn["name"]):
                return False
            args = fn.get("arguments")
            if isinstance(args, str) and args.strip():
                try:
                    json.loads(args)
                except ValueError:
                    return False
        if (
            prev is not None
            and role == prev.get("role")
            and role != "tool"
            and calls is None
            and normalize_tool_calls(prev) is None
            and text.strip()
            and text == message_text(prev)
        ):
            return False
        users += role == "user"
        assistants += role == "assistant"
        prev = m
    return users >= 1 and assistants >= 1 and users + assistants >= min_turns


def _lang_match(messages: list[dict[str, Any]]) -> bool:
    user = "".join(message_text(m) for m in messages if m.get("role") == "user")
    asst = "".join(message_text(m) for m in messages if m.get("role") == "assistant")
    if len(asst) < 50:
        return True
    u, a = cjk_ratio(user), cjk_ratio(asst)
    return not ((u >= 0.3 and a < 0.02) or (u < 0.02 and a >= 0.3))


def _visible(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        if m.get("role") == "assistant":
            total += len(message_text(m).strip())
            reasoning = m.get("reasoning_content")
            total += len(reasoning) if isinstance(reasoning, str) else 0
    return total


def load_words(path: str | None, extra: Iterable[str] | None) -> list[str]:
    words = []
    if path:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                words.append(line)
    words.extend(w.strip() for w in extra or () if w and w.strip())
    return sorted(set(words), key=lambda w: (-len(w), w))


class MessageSanityFilter:
    """Consolidate, trim and check conversations (see the module doc for each check)."""

    def __init__(
        self,
        check_role_order: bool = True,
        check_tool_matching: bool = True,
        check_content_integrity: bool = True,
        check_lang_match: bool = True,
        check_agent_min_visible: bool = True,
        trim_to_assistant: bool = True,
        filter_sensitive: bool = True,
        sensitive_words_file: str | None = None,
        extra_sensitive_words: Iterable[str] | None = None,
        min_turns: int = 2,
        max_msg_chars: int = 80_000,
        min_agent_visible_chars: int = 50,
    ) -> None:
        self.enabled = {
            "role_order": check_role_order,
            "tool_matching": check_tool_matching,
            "content_integrity": check_content_integrity,
            "lang_match": check_lang_match,
            "agent_min_visible": check_agent_min_visible,
            "sensitive_words": filter_sensitive,
        }
        self.trim_to_assistant = trim_to_assistant
        self.min_turns, self.max_msg_chars = min_turns, max_msg_chars
        self.min_agent_visible_chars = min_agent_visible_chars
        words = load_words(sensitive_words_file, extra_sensitive_words) if filter_sensitive else []
        self.sensitive_re = (
            re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE) if words else None
        )

    @property
    def __name__(self) -> str:
        return "MessageSanityFilter"

    def clean(self, row: Row) -> tuple[list[Any] | None, str | None]:
        """``(cleaned messages, None)`` or ``(None, drop reason)``."""
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages:
            return None, "invalid_messages"
        messages = consolidate_system_messages(messages)
        if self.trim_to_assistant:
            messages = trim_to_last_assistant(messages)
            if messages is None:
                return None, "no_assistant"
        is_agent = is_agent_row(messages)
        for name in CHECKS:
            if self.enabled[name] and not self._check(name, messages, is_agent):
                return None, name
        return messages, None

    def _check(self, name: str, messages: list[Any], is_agent: bool) -> bool:
        if name == "role_order":
            return _role_order(messages, is_agent)
        dicts = [m for m in messages if isinstance(m, dict)]
        if name == "tool_matching":
            return _tool_matching(dicts, is_agent)
        if name == "content_integrity":
            return _content_integrity(dicts, self.min_turns, self.max_msg_chars)
        if name == "lang_match":
            return _lang_match(dicts)
        if name == "agent_min_visible":
            return (
                not is_agent
                or self.min_agent_visible_chars <= 0
                or _visible(dicts) >= self.min_agent_visible_chars
            )
        if self.sensitive_re is None:
            return True
        return not any(self.sensitive_re.search(message_text(m)) for m in dicts)

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        kept: list[Row] = []
        dropped: list[Row] = []
        for row in map_col_to_row(rows):
            if not isinstance(row, dict):
                dropped.append(drop(row, "malformed_row"))
                continue
            try:
                messages, reason = self.clean(row)
            except Exception as exc:  # noqa: BLE001 - one broken row must never stop the batch
                logger.debug("MessageSanityFilter failed on a row: %r", exc)
                messages, reason = None, f"malformed_row:{type(exc).__name__}"
            if reason is not None:
                dropped.append(drop(row, reason))
            elif messages is row["messages"]:
                kept.append(row)
            else:
                kept.append({**row, "messages": messages})
        return kept, dropped
