"""How a detected value is rewritten, and which fields of a message are rewritten at all.

A span is masked, hashed, removed or replaced by a Faker pseudonym of the same kind
(:class:`Strategy`). Messages are walked field by field: content, reasoning, tool-call
arguments and tool outputs. JSON text is rewritten value by value in place, so a file and its
read-back stay byte-identical; a tool value under a code key or one that does not read as
prose is code, where names are never looked for.

Example:
    >>> _mask_keep_edges('13812345678'), _mask_all('(212) 555-0198')
    ('138****5678', '(***) ***-****')
    >>> _rewrite_json_text('{"path": "a.txt", "note": "hi"}', lambda v, k: v.upper())
    '{"path": "A.TXT", "note": "HI"}'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from twinkle.data_format import normalize_tool_calls
from twinkle.preprocessor.pii.classify import _HAN_RE, _looks_like_prose
from twinkle.preprocessor.pii.tables import words

__all__ = ["Strategy", "TextFn"]


class Strategy(StrEnum):
    """How a detected span is rewritten.

    Example:
        >>> Strategy.coerce("hash") is Strategy.HASH
        True
    """

    MASK = "mask"  # keep a few edge characters, star the rest
    REPLACE = "replace"  # a Faker value of the same kind
    REDACT = "redact"  # remove the span
    HASH = "hash"  # <ENTITY:sha256[:12]>, stable and joinable

    @classmethod
    def coerce(cls, value: Strategy | str) -> Strategy:
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(s.value for s in cls)
            raise ValueError(f"Unknown strategy {value!r}. Allowed: {allowed}") from None


def _hash_short(s: str, salt: str = "") -> str:
    """First 12 hex digits of sha256(salt + s)."""
    return hashlib.sha256((salt + s).encode("utf-8")).hexdigest()[:12]


def _mask_keep_edges(s: str, head: int = 3, tail: int = 4, char: str = "*") -> str:
    """Star the middle of ``s``, keeping ``head`` leading and ``tail`` trailing characters."""
    if len(s) <= head + tail:
        return char * len(s)
    return s[:head] + char * (len(s) - head - tail) + s[len(s) - tail :]


def _mask_all(s: str, char: str = "*") -> str:
    """Star every letter and digit of ``s``; separators stay, so the format still reads
    ("078-05-1120" -> "***-**-****")."""
    return "".join(char if c.isalnum() else c for c in s)


def _pseudonym_seed(salt: str, entity: str, original: str, n: int = 0) -> int:
    """The Faker seed of one pseudonym: a function of the salt and the value only, so that
    rerunning curation gives byte-identical output whatever the order or batching."""
    digest = hashlib.sha256(f"{salt}\x00{entity}\x00{original}\x00{n}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _fake_value(fake: Any, entity: str, original: str) -> str:
    """A Faker value of the kind of ``entity`` that differs from ``original``."""
    providers: dict[str, Callable[[], str]] = {
        "PERSON": fake.name,
        "LOCATION": fake.city,
        "ORGANIZATION": fake.company,
        "EMAIL_ADDRESS": fake.email,
        "PHONE_NUMBER": fake.phone_number,
        "CN_PHONE": fake.phone_number,
        "CN_LANDLINE": fake.phone_number,
        "IP_ADDRESS": fake.ipv4,
        "URL": fake.url,
        "IBAN_CODE": fake.iban,
        "CREDIT_CARD": fake.credit_card_number,
        "US_BANK_NUMBER": fake.credit_card_number,
        "CN_BANK": fake.credit_card_number,
        "CRYPTO": lambda: fake.sha256()[:34],
        "DATE_TIME": lambda: str(fake.date()),
    }
    make = providers.get(
        entity, lambda: fake.bothify("??" + "#" * max(2, len(original) - 2)).upper()
    )
    value = make()
    for _ in range(3):  # a pseudonym must never be the value it hides
        if value != original:
            break
        value = make()
    return value


def _row_pattern(found: dict[str, str]) -> re.Pattern[str] | None:
    """One regex for every value detected somewhere in the row (longest first)."""
    alternatives = [
        re.escape(v) if _HAN_RE.search(v) else rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])"
        for v in sorted(found, key=len, reverse=True)
    ]
    return re.compile("|".join(alternatives)) if alternatives else None


# --- walking the fields of a message that may hold PII ------------------------------------


#: ``fn(text, prose)``: rewrite one string; ``prose`` says whether NER may run on it.
TextFn = Callable[[str, bool], str]

# A JSON string literal, and whether a ``:`` follows it (then it is an object key).
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"(\s*:)?')


def _rewrite_json_text(
    text: str, leaf: Callable[[str, str | None], str], key_leaf: Callable[[str], str] | None = None
) -> str | None:
    """Rewrite the string values of a JSON object/array text in place, or None when ``text``
    is no such JSON. Only the literals that change are re-encoded, so every other byte
    (numbers, spacing) stays, and a file and its read-back stay byte-identical after
    rewriting. ``leaf(value, key)`` gets the nearest enclosing key, which says whether a value
    is code; ``key_leaf(key)`` rewrites the keys themselves (an e-mail used as a key)."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, (dict, list)):
        return None
    pieces: list[str] = []
    last, key = 0, None
    for m in _JSON_STRING_RE.finditer(text):
        end = m.end() - len(m.group(1) or "")
        value = json.loads(text[m.start() : end])
        if m.group(1):
            key = value
            new = key_leaf(value) if key_leaf is not None else value
        else:
            new = leaf(value, key)
        if new != value:
            pieces += [text[last : m.start()], json.dumps(new, ensure_ascii=False)]
            last = end
    return "".join(pieces) + text[last:] if pieces else text


def _rewrite_tool_text(text: str, fn: TextFn, key: str | None = None) -> str:
    """A tool argument or tool output: JSON is rewritten value by value; a value under a code
    key (``command``, ``path``, ...) or one that does not read as prose is code, where only
    the strong identifier patterns apply."""
    as_json = _rewrite_json_text(
        text, lambda v, k: _rewrite_tool_text(v, fn, k), lambda k: fn(k, False)
    )
    if as_json is not None:
        return as_json
    code = (key or "").lower() in words("code_keys") or not _looks_like_prose(text)
    return fn(text, not code)


def _rewrite_tool_value(value: Any, fn: TextFn, key: str | None = None) -> Any:
    """Every string leaf of decoded tool arguments, their keys (strong identifiers only) and
    numbers long enough to be a card or account number."""
    if isinstance(value, str):
        return _rewrite_tool_text(value, fn, key)
    if isinstance(value, list):
        return [_rewrite_tool_value(v, fn, key) for v in value]
    if isinstance(value, dict):
        return rewrite_keys(
            {k: _rewrite_tool_value(v, fn, k) for k, v in value.items()}, lambda k: fn(k, False)
        )
    return rewrite_number(value, fn)


#: Whole numbers from this many digits may be identifiers (card, account, ID numbers).
_ID_DIGITS = 12


def rewrite_number(value: Any, fn: TextFn) -> Any:
    """``value``, or, for a whole number long enough to be a card or account number in which
    ``fn`` finds one, its rewritten text (a string: the masked form is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) < 10 ** (_ID_DIGITS - 1):
        return value
    text = str(value)
    new = fn(text, False)
    return value if new == text else new


def rewrite_keys(mapping: dict[Any, Any], key_fn: Callable[[str], str]) -> dict[Any, Any]:
    """``mapping`` with ``key_fn`` applied to its string keys (an e-mail used as a key); a
    rewritten key that meets another gets a ``#n`` suffix, so no value is lost."""
    out: dict[Any, Any] = {}
    for k, v in mapping.items():
        new = key_fn(k) if isinstance(k, str) else k
        if new != k:
            base, n = new, 1
            while new in out or new in mapping:
                n += 1
                new = f"{base}#{n}"
        out[new] = v
    return out


def _rewrite_message(msg: dict[str, Any], fn: TextFn) -> dict[str, Any]:
    """A copy of ``msg`` with ``fn`` applied to content, reasoning, ``name`` and tool-call
    arguments (their keys too).

    Text of system, user and assistant messages is prose; tool outputs and tool-call arguments
    are prose only where they read as prose (a note's text), never commands or paths.
    """
    out = dict(msg)
    is_tool = msg.get("role") == "tool"

    def text(t: str) -> str:
        if is_tool:
            return _rewrite_tool_text(t, fn)
        # NER misses names in JSON: each value is analysed alone.
        as_json = _rewrite_json_text(t, lambda v, _k: fn(v, True), lambda k: fn(k, False))
        return fn(t, True) if as_json is None else as_json

    content = msg.get("content")
    if isinstance(content, str):
        out["content"] = text(content)
    elif isinstance(content, list):
        out["content"] = [
            {**p, "text": text(p["text"])}
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            else p
            for p in content
        ]
    for key in ("reasoning_content", "thinking"):
        if isinstance(msg.get(key), str):
            out[key] = fn(msg[key], True)
    # A participant's name (OpenAI's ``name``) is personal; a tool message's is the tool's.
    if isinstance(msg.get("name"), str):
        out["name"] = fn(msg["name"], not is_tool)
    raw = msg.get("tool_calls")
    if raw:
        calls = normalize_tool_calls(msg)
        if calls is None:  # unreadable: scan the raw value as code (strong identifiers)
            out["tool_calls"] = fn(raw, False) if isinstance(raw, str) else raw
        else:
            new_calls = []
            for call in calls:
                fn_obj = call.get("function")
                if isinstance(fn_obj, dict) and "arguments" in fn_obj:
                    call = {
                        **call,
                        "function": {
                            **fn_obj,
                            "arguments": _rewrite_tool_value(fn_obj["arguments"], fn),
                        },
                    }
                new_calls.append(call)
            out["tool_calls"] = (
                json.dumps(new_calls, ensure_ascii=False) if isinstance(raw, str) else new_calls
            )
    return out
