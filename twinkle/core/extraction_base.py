"""The extractor protocol and the helpers every extractor shares.

An extractor returns ``(answer, metadata)``; ``answer`` is None when nothing was found
(``""`` is a found, empty answer) and ``metadata["found"]`` says the same. The concrete
extractors live in :mod:`twinkle.core.extraction_markers` (tags, boxes, fences, ``####``, a
regex), :mod:`twinkle.core.extraction_text` (numbers, choice letters, phrases, lines) and
:mod:`twinkle.core.extraction_wrappers` (composition and cleaning); all are importable from
:mod:`twinkle.core.extraction`.

Example:
    >>> import re
    >>> last_match(re.compile(r"\\d"), "a1b2c3")[0].group(), last_match(re.compile("x"), "abc")
    ('3', (None, 0))
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

__all__ = ["AnswerExtractor", "Extraction", "found_result", "last_match", "lowered", "not_text"]

Extraction = tuple[str | None, dict[str, Any]]


@runtime_checkable
class AnswerExtractor(Protocol):
    """Anything with ``extract(response) -> (answer | None, metadata)``.

    Example:
        >>> from twinkle.core.extraction import TagBasedExtractor
        >>> isinstance(TagBasedExtractor(), AnswerExtractor), isinstance("x", AnswerExtractor)
        (True, False)
    """

    def extract(self, response: str) -> Extraction: ...


def not_text(response: Any) -> Extraction | None:
    """The failure result for a non-string response, or None when it is a string."""
    if isinstance(response, str):
        return None
    return None, {"found": False, "error": f"response is {type(response).__name__}, not str"}


def lowered(text: str) -> str | None:
    """``text.lower()`` when it keeps every index (true except for a few Unicode letters).

    Case-insensitive scanning is several times slower in ``re`` than a case-sensitive
    literal search, so default patterns run lower-case literals on this copy instead.
    """
    low = text.lower()
    return low if len(low) == len(text) else None


def found_result(answer: str, fmt: str, m_start: int, m_end: int, n: int) -> Extraction:
    """A found ``answer`` with its format, match span and number of matches."""
    return answer, {
        "found": True,
        "format": fmt,
        "match_start": m_start,
        "match_end": m_end,
        "num_matches": n,
    }


def last_match(
    pattern: re.Pattern[str], text: str, pos: int = 0
) -> tuple[re.Match[str] | None, int]:
    """The last match of ``pattern`` in ``text`` from index ``pos``, and the number of matches.

    One pass that keeps only the latest match, so a hostile input with many matches costs
    no memory beyond the one it returns.
    """
    last, n = None, 0
    for m in pattern.finditer(text, pos):
        last = m
        n += 1
    return last, n
