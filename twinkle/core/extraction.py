"""Answer extractors: pull the final answer out of a model response.

Every extractor returns ``(answer, metadata)``; ``answer`` is None when nothing was found
(``""`` is a found, empty answer) and ``metadata["found"]`` says the same. Wherever a
pattern can match several times, the last match wins, because models restate and correct
themselves before the final answer.

Built on precompiled stdlib ``re`` patterns and ``str`` methods only: scoring runs these on
every response, so there are no per-character Python loops, and every pattern is linear on
long or hostile inputs (brace and tag pairing walk the tag/brace tokens, never re-scan).

Example:
    >>> NumericExtractor().extract("Year 2025, so the total is 1,234.")[0]
    '1234'
    >>> MultipleChoiceExtractor().extract("The correct answer is (C).")[0]
    'C'
    >>> CleanedExtractor(TagBasedExtractor(), post_cleaners=["strip_trailing_punctuation"]
    ...                  ).extract("<answer>42.</answer><|endoftext|>")[0]
    '42'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from twinkle.core.cleaning import Cleaner, resolve_cleaners

__all__ = [
    "EXTRACTORS",
    "AnswerExtractor",
    "BoxedExtractor",
    "CleanedExtractor",
    "CodeBlockExtractor",
    "CompositeExtractor",
    "GSM8KExtractor",
    "LastLineExtractor",
    "MultipleChoiceExtractor",
    "NativeExtractor",
    "NumericExtractor",
    "PatternAnswerExtractor",
    "RawGenerationExtractor",
    "RegexExtractor",
    "SingleLineExtractor",
    "TagBasedExtractor",
    "TailExtractor",
]

Extraction = tuple[str | None, dict[str, Any]]


@runtime_checkable
class AnswerExtractor(Protocol):
    """Anything with ``extract(response) -> (answer | None, metadata)``.

    Example:
        >>> isinstance(TagBasedExtractor(), AnswerExtractor), isinstance("x", AnswerExtractor)
        (True, False)
    """

    def extract(self, response: str) -> Extraction: ...


def _not_text(response: Any) -> Extraction | None:
    """The failure result for a non-string response, or None when it is a string."""
    if isinstance(response, str):
        return None
    return None, {"found": False, "error": f"response is {type(response).__name__}, not str"}


def _lowered(text: str) -> str | None:
    """``text.lower()`` when it keeps every index (true except for a few Unicode letters).

    Case-insensitive scanning is several times slower in ``re`` than a case-sensitive
    literal search, so default patterns run lower-case literals on this copy instead.
    """
    low = text.lower()
    return low if len(low) == len(text) else None


def _found(answer: str, fmt: str, m_start: int, m_end: int, n: int) -> Extraction:
    return answer, {
        "found": True,
        "format": fmt,
        "match_start": m_start,
        "match_end": m_end,
        "num_matches": n,
    }


class TagBasedExtractor:
    """Content of the last ``<tag>...</tag>``, or after a final unclosed ``<tag>``.

    Args:
        tag_name: the tag, matched literally and case-insensitively.
        strip_whitespace: strip the answer.

    Example:
        >>> answer, meta = TagBasedExtractor().extract("<answer>no</answer> then <answer>yes")
        >>> answer, meta["closed"], meta["num_matches"]
        ('yes', False, 1)
    """

    def __init__(self, tag_name: str = "answer", strip_whitespace: bool = True) -> None:
        self.tag_name = tag_name
        self.strip_whitespace = strip_whitespace
        self._tags = re.compile(rf"<(/?){re.escape(tag_name)}>", re.IGNORECASE)

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        # Pair tags exactly as a non-greedy "<t>(.*?)</t>" scan would, in one linear pass:
        # an open starts a pair, the next close ends it, opens inside a pair are content.
        pairs = 0
        open_end = last_open_start = -1
        pair_start = pair_end = content_end = -1
        for m in self._tags.finditer(response):
            if m.group(1):
                if open_end >= 0:
                    pairs += 1
                    pair_start, pair_end, content_end = open_end, m.end(), m.start()
                    open_end = -1
            else:
                last_open_start = m.start()
                if open_end < 0:
                    open_end = m.end()
        meta: dict[str, Any] = {"found": False, "tag_name": self.tag_name}
        if last_open_start < 0:
            return None, meta
        if pairs and last_open_start < pair_end:
            start, end, closed = pair_start, content_end, True
        else:
            start = last_open_start + len(self.tag_name) + 2
            end, closed = len(response), False
        answer = response[start:end]
        if self.strip_whitespace:
            answer = answer.strip()
        meta.update(found=True, closed=closed, match_start=start, match_end=end, num_matches=pairs)
        return answer, meta


class RegexExtractor:
    """Group ``group_index`` of the last match of a custom pattern.

    Example:
        >>> RegexExtractor(r"final: (\\w+)").extract("final: a ... final: b")[0]
        'b'
    """

    def __init__(
        self,
        pattern: str,
        group_index: int = 1,
        strip_whitespace: bool = True,
        flags: int = re.DOTALL,
    ) -> None:
        self.pattern = pattern
        self.group_index = group_index
        self.strip_whitespace = strip_whitespace
        self._re = re.compile(pattern, flags)

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        last, n = None, 0
        for last in self._re.finditer(response):
            n += 1
        meta: dict[str, Any] = {"found": False, "format": "regex", "pattern": self.pattern}
        if last is None:
            return None, meta
        if self.group_index > (self._re.groups or 0):
            meta["error"] = f"Group {self.group_index} not found in match"
            return None, meta
        answer = last.group(self.group_index)
        if answer is None:
            return None, meta
        if self.strip_whitespace:
            answer = answer.strip()
        meta.update(found=True, match_start=last.start(), match_end=last.end(), num_matches=n)
        return answer, meta


class GSM8KExtractor:
    """The number after the last ``####`` (GSM8K's answer marker); commas removed.

    Example:
        >>> GSM8KExtractor().extract("so #### $-1,250")[0]
        '-1250'
    """

    _re = re.compile(r"####[ \t]*\$?[ \t]*(-?)\$?[ \t]*(,*\d[\d,]*(?:\.\d+)?)")

    def __init__(self, strip_whitespace: bool = True) -> None:
        self.strip_whitespace = strip_whitespace

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        if "####" not in response:
            return None, {"found": False, "format": "gsm8k"}
        last, n = None, 0
        for last in self._re.finditer(response):
            n += 1
        if last is None:
            return None, {"found": False, "format": "gsm8k"}
        answer = last.group(1) + last.group(2).replace(",", "")
        return _found(answer, "gsm8k", last.start(), last.end(), n)


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
        low = _lowered(text)
        words = (
            self._cue_words.finditer(low) if low is not None else self._cue_words_i.finditer(text)
        )
        return [m for w in words if (m := self._cue.match(text, w.start())) is not None]

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
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
                answer, meta = _found(
                    letter.upper(),
                    "multiple_choice",
                    max(0, last.start() - shift),
                    last.end() - shift,
                    n,
                )
                meta["pattern_used"] = name
                return answer, meta
        return None, {"found": False, "format": "multiple_choice"}


class BoxedExtractor:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces.

    Escaped braces (``\\{``) are content; ``\\boxed 42`` (no braces) takes the run up to
    whitespace or ``$``. Unbalanced occurrences are skipped; nested boxes make the inner one
    last.

    Example:
        >>> BoxedExtractor().extract(r"so $\\boxed{\\frac{1}{2}}$")[0]
        '\\\\frac{1}{2}'
    """

    _start = re.compile(r"\\(?:boxed|fbox)(?:(\s*)\{|\s+([^\s$]+))")
    _brace = re.compile(r"\\.|[{}]", re.DOTALL)
    # Above this many candidates, pair all braces once instead of scanning per candidate.
    _SCAN_LIMIT = 8

    def __init__(self, strip_whitespace: bool = True) -> None:
        self.strip_whitespace = strip_whitespace

    def _close_of(self, text: str, open_end: int) -> int:
        """End index of the content opened just before ``open_end``, or -1 if unbalanced."""
        depth = 1
        for m in self._brace.finditer(text, open_end):
            c = m.group()
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if not depth:
                    return m.start()
        return -1

    def _all_closes(self, text: str) -> dict[int, int]:
        """Map every ``{`` end index to its matching ``}`` index, in one pass."""
        stack: list[int] = []
        closes: dict[int, int] = {}
        for m in self._brace.finditer(text):
            c = m.group()
            if c == "{":
                stack.append(m.end())
            elif c == "}" and stack:
                closes[stack.pop()] = m.start()
        return closes

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        meta_fail = {"found": False, "format": "boxed"}
        if "\\boxed" not in response and "\\fbox" not in response:
            return None, meta_fail
        starts = list(self._start.finditer(response))
        closes = self._all_closes(response) if len(starts) > self._SCAN_LIMIT else None
        for m in reversed(starts):
            if m.group(2) is not None:
                start, end = m.start(2), m.end(2)
            else:
                start = m.end()
                end = (
                    closes.get(start, -1) if closes is not None else self._close_of(response, start)
                )
                if end < 0:
                    continue
            answer = response[start:end]
            if self.strip_whitespace:
                answer = answer.strip()
            return _found(answer, "boxed", start, end, len(starts))
        return None, meta_fail


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

    def _last(self, text: str, offset: int) -> tuple[re.Match[str] | None, int]:
        last, n = None, 0
        for last in self._re.finditer(text, offset):
            n += 1
        return last, n

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        offset = max(0, len(response) - self._TAIL)
        last, n = self._last(response, offset) if offset else (None, 0)
        partial = last is not None and response[last.start() - 1] not in self._NUMBER_CHARS
        if not partial:
            last, n = self._last(response, 0)
        if last is None:
            return None, {"found": False, "format": "numeric"}
        answer, meta = _found(last.group().replace(",", ""), "numeric", last.start(), last.end(), n)
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
        if (bad := _not_text(response)) is not None:
            return bad
        text = response.strip()
        if not text:
            return None, {"found": False, "format": "last_line"}
        start = text.rfind("\n") + 1
        lines = sum(1 for line in text.split("\n") if line.strip())
        answer, meta = _found(text[start:].strip(), "last_line", start, len(text), 1)
        meta["num_lines"] = lines
        return answer, meta


class CodeBlockExtractor:
    """Content of the last fenced code block (optionally only blocks of ``language``).

    Example:
        >>> CodeBlockExtractor("python").extract("```python\\nprint(1)\\n```")[0]
        'print(1)'
    """

    def __init__(self, language: str | None = None) -> None:
        self.language = language
        header = re.escape(language) if language else r"[\w+#.-]*"
        self._re = re.compile(rf"```{header}[ \t]*\n(.*?)```", re.DOTALL)

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        last, n = None, 0
        if "```" in response:
            for last in self._re.finditer(response):
                n += 1
        extra = {"language": self.language} if self.language else {}
        if last is None:
            return None, {"found": False, "format": "code_block", **extra}
        answer, meta = _found(last.group(1).strip(), "code_block", last.start(1), last.end(1), n)
        meta.update(extra)
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
        if (bad := _not_text(response)) is not None:
            return bad
        best: tuple[int, int, re.Match[str]] | None = None
        prefixes, haystack = self._prefixes, response
        if self._lower_prefixes is not None and (low := _lowered(response)) is not None:
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
        answer, meta = _found(c.group(1).strip(), "pattern_answer", start, c.end(), 1)
        meta.update(pattern_index=index, pattern=self.patterns[index])
        return answer, meta


class CompositeExtractor:
    """Try extractors in order; the first non-None answer (``""`` included) wins.

    Example:
        >>> ex = CompositeExtractor([BoxedExtractor(), NumericExtractor()])
        >>> ex.extract("so 12")[1]["extractor_type"]
        'NumericExtractor'
    """

    def __init__(self, extractors: Sequence[AnswerExtractor] = ()) -> None:
        self.extractors = list(extractors)

    def extract(self, response: str) -> Extraction:
        for index, extractor in enumerate(self.extractors):
            answer, meta = extractor.extract(response)
            if answer is not None:
                meta = {
                    **meta,
                    "extractor_index": index,
                    "extractor_type": type(extractor).__name__,
                }
                return answer, meta
        return None, {
            "found": False,
            "tried_extractors": [type(e).__name__ for e in self.extractors],
        }


class RawGenerationExtractor:
    """The whole response (stripped); never fails on a string.

    Example:
        >>> RawGenerationExtractor().extract("  hi  ")[0]
        'hi'
    """

    def __init__(self, strip_whitespace: bool = True) -> None:
        self.strip_whitespace = strip_whitespace

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        answer = response.strip() if self.strip_whitespace else response
        return answer, {"found": True, "format": "raw", "is_full_response": True}


class NativeExtractor:
    """Wrap a third-party ``fn(response) -> answer | None`` (results become ``str``).

    Example:
        >>> NativeExtractor(lambda r: r.split()[-1] if r else None).extract("a b")[0]
        'b'
    """

    def __init__(self, fn: Callable[[str], Any], name: str = "native") -> None:
        self.fn = fn
        self.name = name

    def extract(self, response: str) -> Extraction:
        meta: dict[str, Any] = {"found": False, "format": "native", "native_name": self.name}
        try:
            result = self.fn(response)
        except Exception as exc:  # a foreign parser's failure is a failed extraction
            meta["error"] = f"{type(exc).__name__}: {exc}"
            return None, meta
        if result is None:
            return None, meta
        meta["found"] = True
        return str(result), meta


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
        if (bad := _not_text(response)) is not None:
            return bad
        text = response.strip()
        if not text:
            return None, {"found": False, "format": "tail"}
        answer = text[-self.max_chars :]
        return answer, {"found": True, "format": "tail", "truncated": len(text) > self.max_chars}


class SingleLineExtractor:
    """Accept the inner answer only if it is one non-empty line (and short enough).

    Example:
        >>> SingleLineExtractor(RawGenerationExtractor()).extract("a\\nb")[1]["rejected_multiline"]
        True
    """

    def __init__(self, inner: AnswerExtractor, max_chars: int | None = None) -> None:
        self.inner = inner
        self.max_chars = max_chars

    def extract(self, response: str) -> Extraction:
        answer, meta = self.inner.extract(response)
        if answer is None:
            return None, meta
        answer = answer.strip()
        meta = dict(meta)
        if not answer:
            meta["found"] = False
            return None, meta
        if "\n" in answer:
            meta.update(found=False, rejected_multiline=True)
            return None, meta
        if self.max_chars is not None and len(answer) > self.max_chars:
            meta.update(found=False, rejected_too_long=True)
            return None, meta
        return answer, meta


def _cleaner_name(cleaner: Cleaner) -> str:
    return getattr(cleaner, "__name__", type(cleaner).__name__).lstrip("_")


class CleanedExtractor:
    """Wrap an extractor with pre-cleaners (on the response) and post-cleaners (on the answer).

    Cleaners are callables or the names / ``{type, config}`` dicts that
    :func:`twinkle.core.cleaning.resolve_cleaners` accepts. Metadata says which ran.

    Args:
        inner: the extractor to wrap.
        pre_cleaners: applied in order to the raw response.
        post_cleaners: applied in order to a found answer.

    Example:
        >>> ex = CleanedExtractor(TagBasedExtractor(), pre_cleaners=["strip_special_tokens"],
        ...                       post_cleaners=["strip_trailing_punctuation"])
        >>> ex.extract("<answer>42.</answer><|endoftext|>")[0]
        '42'
    """

    def __init__(
        self,
        inner: AnswerExtractor,
        pre_cleaners: Sequence[Cleaner | str | dict[str, Any]] = (),
        post_cleaners: Sequence[Cleaner | str | dict[str, Any]] = (),
    ) -> None:
        self.inner = inner
        self.pre_cleaners = self._resolve(pre_cleaners, "pre")
        self.post_cleaners = self._resolve(post_cleaners, "post")
        self._pre_names = [_cleaner_name(c) for c in self.pre_cleaners]
        self._post_names = [_cleaner_name(c) for c in self.post_cleaners]

    @staticmethod
    def _resolve(entries: Sequence[Any], kind: str) -> list[Cleaner]:
        return [e if callable(e) else resolve_cleaners([e], kind)[0] for e in entries]

    def extract(self, response: str) -> Extraction:
        if (bad := _not_text(response)) is not None:
            return bad
        for clean in self.pre_cleaners:
            response = clean(response)
        answer, meta = self.inner.extract(response)
        ran_post = answer is not None and bool(self.post_cleaners)
        if answer is not None:
            for clean in self.post_cleaners:
                answer = clean(answer)
        meta = dict(meta)
        meta["pre_cleaners_applied"] = bool(self.pre_cleaners)
        meta["post_cleaners_applied"] = ran_post
        meta["pre_cleaners"] = self._pre_names
        meta["post_cleaners"] = self._post_names if ran_post else []
        return answer, meta


#: Registry names of the extractors that can be built from a name alone or with kwargs.
EXTRACTORS: dict[str, type] = {
    "tag_based": TagBasedExtractor,
    "regex": RegexExtractor,
    "gsm8k": GSM8KExtractor,
    "multiple_choice": MultipleChoiceExtractor,
    "raw": RawGenerationExtractor,
    "boxed": BoxedExtractor,
    "numeric": NumericExtractor,
    "last_line": LastLineExtractor,
    "code_block": CodeBlockExtractor,
    "pattern_answer": PatternAnswerExtractor,
    "tail": TailExtractor,
}
