"""Extractors that read an answer from free text: numbers, choice letters, phrases, lines.

Wherever a pattern can match several times the last match wins, because models restate and
correct themselves before the final answer. Patterns are precompiled stdlib ``re`` that put
a literal or a character class first, so ``re`` skips ahead instead of testing lookbehinds
at every position; scoring runs these on every response.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from twinkle.core.extraction_base import Extraction, found_result, last_match, lowered, not_text

__all__ = [
    "LastLineExtractor",
    "MultipleChoiceExtractor",
    "NumericExtractor",
    "PatternAnswerExtractor",
    "RawGenerationExtractor",
    "TailExtractor",
]


class MultipleChoiceExtractor:
    """A choice letter: after a cue word, in parentheses, or as a line's option label.

    Patterns are tried in order (cue, parenthesised, line start); the first with a match
    wins and its last match is used. The cue ("answer", "choice", "option") is a whole
    word, may be followed by ``:``, ``is``, ``would be``, ``should be``, emphasis and an
    opening bracket; the letter must stand alone. Case-insensitively, a lower-case letter
    counts only before the end of the line or ``. , ) ] : *`` (so "answer: a lot" is no
    answer).

    Example:
        >>> MultipleChoiceExtractor().extract("Final answer: **D**")[0]
        'D'
        >>> MultipleChoiceExtractor().extract("Answer: Because it rains")[0] is None
        True
    """

    def __init__(self, choices: str = "ABCDE", case_sensitive: bool = False) -> None:
        if not choices or not choices.isalpha():
            raise ValueError(f"choices must be letters, got {choices!r}")
        self.choices = choices
        self.case_sensitive = case_sensitive
        upper = re.escape("".join(sorted(set(choices.upper()))))
        lower = re.escape("".join(sorted(set(choices.lower()))))
        up = rf"([{upper}])(?![A-Za-z0-9])"
        if case_sensitive:
            letter = up
            plain = f"[{upper}]"
        else:
            letter = rf"(?:{up}|([{lower}])(?=$|[.,)\]:*]))"
            plain = f"[{upper}{lower}]"
        sep = r"(?:[ \t]*:)?[ \t]*(?:(?i:is|would[ \t]+be|should[ \t]+be)\b[ \t]*:?[ \t]*)?"
        # The cue is matched at candidate positions found by a fast lower-case scan.
        self._cue = re.compile(
            rf"(?i:answer|choice|option)\b{sep}(?:\*\*|\*|__)?[ \t]*[(\[]?[ \t]*{letter}",
            re.MULTILINE,
        )
        self._paren = re.compile(rf"\(({plain})\)")
        # "^" under MULTILINE is tried at every position; a literal "\n" lets re skip ahead.
        self._line = re.compile(
            rf"\n[ \t]*(?:\*\*)?({plain})(?:\*\*)?(?:[.):]|[ \t]*$)", re.MULTILINE
        )

    _cue_words = re.compile(r"(?:answer|choice|option)(?<!\wanswer)(?<!\wchoice)(?<!\woption)")
    _cue_words_i = re.compile(_cue_words.pattern, re.IGNORECASE)

    def _cue_matches(self, text: str) -> list[re.Match[str]]:
        low = lowered(text)
        words = (
            self._cue_words.finditer(low) if low is not None else self._cue_words_i.finditer(text)
        )
        return [m for w in words if (m := self._cue.match(text, w.start())) is not None]

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        for name, find, shift in (
            ("cue", self._cue_matches, 0),
            ("parenthesized", lambda t: list(self._paren.finditer(t)), 0),
            # Offsets in "\n" + text are one more than in text.
            ("line_start", lambda t: list(self._line.finditer("\n" + t)), 1),
        ):
            matches = find(response)
            if matches:
                last, n = matches[-1], len(matches)
                letter = next(g for g in last.groups() if g is not None)
                answer, meta = found_result(
                    letter.upper(),
                    "multiple_choice",
                    max(0, last.start() - shift),
                    last.end() - shift,
                    n,
                )
                meta["pattern_used"] = name
                return answer, meta
        return None, {"found": False, "format": "multiple_choice"}


class NumericExtractor:
    """The last number in the text, thousands commas removed.

    A number is an optional sign (a ``-`` not directly after a digit or letter), grouped
    (``1,234``) or plain digits, an optional ``.digits`` and exponent, or a fraction of two
    integers kept whole (``3/4``). Numbers never start inside a digit run.

    Example:
        >>> [NumericExtractor().extract(t)[0] for t in ("in 2025", "-3/4", "1e5", "3-4", "42.")]
        ['2025', '-3/4', '1e5', '4', '42']
    """

    # The sign/digit comes first and the lookbehinds after it, so ``re`` can skip quickly to
    # candidate characters instead of testing lookbehinds at every position.
    _re = re.compile(
        r"(?:-(?<=(?<![0-9A-Za-z])-)|(?<![0-9])(?=[0-9]))"
        r"(?:(?:\d{1,3}(?:,\d{3})+(?![0-9])|\d+)/\d+(?![0-9]|\.[0-9])"
        r"|(?:\d{1,3}(?:,\d{3})+(?![0-9])|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    )
    # Numbers are short; search the tail first and fall back to the whole text only when
    # the tail's last match might have been cut by the window, i.e. when the character
    # before it could belong to a number.
    _TAIL = 256
    _NUMBER_CHARS = frozenset("0123456789,./eE-+")

    def __init__(self, strip_whitespace: bool = True) -> None:
        self.strip_whitespace = strip_whitespace

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        offset = max(0, len(response) - self._TAIL)
        last, n = last_match(self._re, response, offset) if offset else (None, 0)
        partial = last is not None and response[last.start() - 1] not in self._NUMBER_CHARS
        if not partial:
            last, n = last_match(self._re, response)
        if last is None:
            return None, {"found": False, "format": "numeric"}
        answer, meta = found_result(
            last.group().replace(",", ""), "numeric", last.start(), last.end(), n
        )
        if partial:
            del meta["num_matches"]  # counting every number would cost a full scan
        return answer, meta


class LastLineExtractor:
    """The last non-blank line, stripped.

    Example:
        >>> LastLineExtractor().extract("work\\n\\n  42  \\n\\n")[0]
        '42'
    """

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        text = response.strip()
        if not text:
            return None, {"found": False, "format": "last_line"}
        start = text.rfind("\n") + 1
        lines = sum(1 for line in text.split("\n") if line.strip())
        answer, meta = found_result(text[start:].strip(), "last_line", start, len(text), 1)
        meta["num_lines"] = lines
        return answer, meta


class PatternAnswerExtractor:
    """The phrase after the last "the answer is", "therefore" or "=".

    Every occurrence of every prefix is a candidate; the one starting last wins. The answer
    runs to the first ". ", a "." at the end of a line, a newline or the end. ``=`` inside
    ``==``, ``<=``, ``>=``, ``!=`` or ``=>`` is not a prefix.

    Args:
        patterns: prefix regexes replacing the defaults (case-insensitive, multiline).

    Example:
        >>> PatternAnswerExtractor().extract("x = 7 and y=8")[0]
        '8'
        >>> PatternAnswerExtractor().extract("So the answer is: 3.14.")[0]
        '3.14'
    """

    # Literal first, word-boundary lookbehind after it: lets ``re`` jump between candidates.
    DEFAULT_PATTERNS = (
        r"the(?<!\wthe)\s+answer\s+is\s*:?\s*",
        r"therefore(?<!\wtherefore)\s*,?\s*:?\s*",
        r"=(?<![=<>!]=)(?![=>])\s*",
    )
    _capture = re.compile(r"(.+?)(?=\.\s|\.$|$)", re.MULTILINE)

    def __init__(self, patterns: Sequence[str] | None = None) -> None:
        self.patterns = tuple(patterns) if patterns is not None else self.DEFAULT_PATTERNS
        self._prefixes = [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in self.patterns]
        # Default prefixes are lower-case literals: scan a lowered copy case-sensitively.
        self._lower_prefixes = (
            [re.compile(p, re.MULTILINE) for p in self.patterns] if patterns is None else None
        )

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        best: tuple[int, int, re.Match[str]] | None = None
        prefixes, haystack = self._prefixes, response
        if self._lower_prefixes is not None and (low := lowered(response)) is not None:
            prefixes, haystack = self._lower_prefixes, low
        for index, prefix in enumerate(prefixes):
            # Walk this prefix's occurrences from the last one back to the first capture.
            for p in reversed(list(prefix.finditer(haystack))):
                if best is not None and p.start() <= best[0]:
                    break
                c = self._capture.match(response, p.end())
                if c is not None and c.group(1).strip():
                    best = (p.start(), index, c)
                    break
        if best is None:
            return None, {"found": False, "format": "pattern_answer"}
        start, index, c = best
        answer, meta = found_result(c.group(1).strip(), "pattern_answer", start, c.end(), 1)
        meta.update(pattern_index=index, pattern=self.patterns[index])
        return answer, meta


class RawGenerationExtractor:
    """The whole response (stripped); never fails on a string.

    Example:
        >>> RawGenerationExtractor().extract("  hi  ")[0]
        'hi'
    """

    def __init__(self, strip_whitespace: bool = True) -> None:
        self.strip_whitespace = strip_whitespace

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        answer = response.strip() if self.strip_whitespace else response
        return answer, {"found": True, "format": "raw", "is_full_response": True}


class TailExtractor:
    """The last ``max_chars`` characters of the stripped response; blank gives None.

    Example:
        >>> TailExtractor(max_chars=3).extract("result: 1234 ")[0]
        '234'
    """

    def __init__(self, max_chars: int = 256) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self.max_chars = max_chars

    def extract(self, response: str) -> Extraction:
        if (bad := not_text(response)) is not None:
            return bad
        text = response.strip()
        if not text:
            return None, {"found": False, "format": "tail"}
        answer = text[-self.max_chars :]
        return answer, {"found": True, "format": "tail", "truncated": len(text) > self.max_chars}
