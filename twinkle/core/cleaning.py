"""Cleaners: small ``str -> str`` functions applied around answer extraction.

Pre-cleaners run on the raw response (special tokens, thinking blocks); post-cleaners run on
the extracted answer (trailing punctuation, quotes, LaTeX dollars); factories build
parameterised cleaners usable in either position. Everything is stdlib ``str`` methods and
precompiled ``re`` patterns with cheap fast paths, because scoring runs every cleaner on
every response (the budget is tens of microseconds per response).

Example:
    >>> strip_thinking_tokens("<think>hmm</think>The answer is 42.")
    'The answer is 42.'
    >>> [c("42.. ") for c in resolve_cleaners(None, "post")]
    ['42']
    >>> resolve_cleaners([{"type": "truncate_tail", "config": {"max_chars": 2}}], "post")[0]("1234")
    '34'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "CLEANER_FACTORIES",
    "DEFAULT_POST_CLEANERS",
    "DEFAULT_PRE_CLEANERS",
    "POST_CLEANERS",
    "PRE_CLEANERS",
    "Cleaner",
    "resolve_cleaners",
    "strip_latex_dollars",
    "strip_special_tokens",
    "strip_surrounding_quotes",
    "strip_thinking_tokens",
    "strip_trailing_punctuation",
    "take_first_nonempty_line",
    "truncate_tail",
]

Cleaner = Callable[[str], str]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|im_start|>", "<pad>", "</s>", "<s>")
_SPECIAL_RE = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
_LATEX_DOUBLE_RE = re.compile(r"\$\$(.+)\$\$\n?", re.DOTALL)
_LATEX_SINGLE_RE = re.compile(r"\$([^$]+)\$\n?")


def strip_special_tokens(text: str) -> str:
    """Delete every literal chat special token (``<|endoftext|>``, ``</s>``, ...)."""
    if "<" not in text:
        return text
    return _SPECIAL_RE.sub("", text)


def strip_thinking_tokens(text: str) -> str:
    """Remove ``<think>`` reasoning: closed blocks, an unclosed tail, and an orphan prefix.

    An orphan ``</think>`` (its opening tag was in the prompt) removes everything through
    the *last* closing tag, so no closing tag ever reaches an extractor.
    """
    if "think>" not in text:
        return text
    start = text.find("<think>")
    if start >= 0:  # the common case, one closed block: no list, no join, no rescans
        end = text.find("</think>", start + 7)
        if end >= 0:
            rest = text[end + 8 :] if start == 0 else text[:start] + text[end + 8 :]
            if "think>" not in rest:
                return rest
    # str.find jumps between tags at memchr speed; a lazy ".*?" regex walks every character.
    kept, pos = [], 0
    while (start := text.find("<think>", pos)) >= 0:
        kept.append(text[pos:start])
        end = text.find("</think>", start + 7)
        if end < 0:  # unclosed (truncated) reasoning runs to the end
            pos = len(text)
            break
        pos = end + 8
    kept.append(text[pos:])
    text = "".join(kept)
    start = text.find("<think>")  # a tag formed by the join ("<<think></think>think>")
    if start >= 0:
        text = text[:start]
    end = text.rfind("</think>")
    return text[end + 8 :] if end >= 0 else text


def strip_trailing_punctuation(text: str) -> str:
    """Strip whitespace, then the whole trailing run of ``.`` and ``,`` ("42.." -> "42").

    A trailing point is never part of a decimal (decimal digits follow the point), so "3."
    becomes "3" while "3.14" is unchanged.
    """
    return text.strip().rstrip(".,")


def strip_surrounding_quotes(text: str) -> str:
    """Remove one matched layer of ``"..."`` or ``'...'``."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def strip_latex_dollars(text: str) -> str:
    """Unwrap a whole-text ``$$...$$`` or ``$...$`` (inner whitespace stripped too)."""
    if not text.startswith("$"):
        return text
    m = _LATEX_DOUBLE_RE.fullmatch(text) or _LATEX_SINGLE_RE.fullmatch(text)
    return m.group(1).strip() if m else text


def truncate_tail(max_chars: int = 256) -> Cleaner:
    """Factory: a cleaner keeping the last ``max_chars`` characters of the stripped text."""
    if max_chars < 1:
        raise ValueError(f"truncate_tail: max_chars must be >= 1, got {max_chars}")

    def _truncate_tail(text: str) -> str:
        return text.strip()[-max_chars:]

    return _truncate_tail


def take_first_nonempty_line(max_chars: int | None = None) -> Cleaner:
    """Factory: a cleaner keeping the first non-blank line, stripped, cut to ``max_chars``."""
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"take_first_nonempty_line: max_chars must be >= 1, got {max_chars}")

    def _take_first_nonempty_line(text: str) -> str:
        # After strip() the first line is the first non-blank one ("" for a blank text).
        line = text.strip().split("\n", 1)[0].strip()
        return line if max_chars is None else line[:max_chars]

    return _take_first_nonempty_line


PRE_CLEANERS: dict[str, Cleaner] = {
    "strip_special_tokens": strip_special_tokens,
    "strip_thinking_tokens": strip_thinking_tokens,
}
POST_CLEANERS: dict[str, Cleaner] = {
    "strip_trailing_punctuation": strip_trailing_punctuation,
    "strip_surrounding_quotes": strip_surrounding_quotes,
    "strip_latex_dollars": strip_latex_dollars,
}
CLEANER_FACTORIES: dict[str, Callable[..., Cleaner]] = {
    "truncate_tail": truncate_tail,
    "take_first_nonempty_line": take_first_nonempty_line,
}
DEFAULT_PRE_CLEANERS = ["strip_special_tokens"]
DEFAULT_POST_CLEANERS = ["strip_trailing_punctuation"]


def resolve_cleaners(names: list[Any] | None, kind: str) -> list[Cleaner]:
    """Turn cleaner names and ``{"type": factory, "config": {...}}`` dicts into callables.

    Args:
        names: entries to resolve; None gives the defaults of ``kind``, ``[]`` gives ``[]``.
        kind: ``"pre"`` or ``"post"``; selects which named cleaners are allowed.

    Raises:
        ValueError: ``kind`` is neither "pre" nor "post".
        KeyError: an unknown cleaner or factory name (the message lists the allowed ones).
        TypeError: an entry that is neither a string nor a dict with ``type``.
    """
    if kind not in ("pre", "post"):
        raise ValueError(f"kind must be 'pre' or 'post', got {kind!r}")
    registry = PRE_CLEANERS if kind == "pre" else POST_CLEANERS
    if names is None:
        names = DEFAULT_PRE_CLEANERS if kind == "pre" else DEFAULT_POST_CLEANERS
    out: list[Cleaner] = []
    for entry in names:
        if isinstance(entry, str):
            if entry not in registry:
                other = "post" if kind == "pre" else "pre"
                hint = (
                    f" ({entry!r} is a {other}-cleaner)"
                    if entry in (POST_CLEANERS if kind == "pre" else PRE_CLEANERS)
                    else ""
                )
                raise KeyError(
                    f"unknown {kind}-cleaner {entry!r}{hint}; available: {sorted(registry)} "
                    f"and factories {sorted(CLEANER_FACTORIES)}"
                )
            out.append(registry[entry])
        elif isinstance(entry, dict) and "type" in entry:
            factory = CLEANER_FACTORIES.get(entry["type"])
            if factory is None:
                raise KeyError(
                    f"unknown cleaner factory {entry['type']!r}; available: "
                    f"{sorted(CLEANER_FACTORIES)}"
                )
            out.append(factory(**(entry.get("config") or {})))
        else:
            raise TypeError(
                f"a cleaner must be a name or a {{'type': ..., 'config': ...}} dict, got {entry!r}"
            )
    return out
