"""Extractors that read an answer from a marker: a tag, a box, a code fence, ``####``, a regex.

Wherever a marker can appear several times the last one wins, because models restate and
correct themselves before the final answer. Pairing (tags, braces) walks the marker tokens
once, so every extractor here is linear on long or hostile inputs.
"""

from __future__ import annotations

import re
from typing import Any

from twinkle.core.extraction_base import Extraction, found_result, last_match, not_text

__all__ = [
    "BoxedExtractor",
    "CodeBlockExtractor",
    "GSM8KExtractor",
    "RegexExtractor",
    "TagBasedExtractor",
]


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
        if (bad := not_text(response)) is not None:
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
        if (bad := not_text(response)) is not None:
            return bad
        last, n = last_match(self._re, response)
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
        if (bad := not_text(response)) is not None:
            return bad
        if "####" not in response:
            return None, {"found": False, "format": "gsm8k"}
        last, n = last_match(self._re, response)
        if last is None:
            return None, {"found": False, "format": "gsm8k"}
        answer = last.group(1) + last.group(2).replace(",", "")
        return found_result(answer, "gsm8k", last.start(), last.end(), n)


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
        if (bad := not_text(response)) is not None:
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
            return found_result(answer, "boxed", start, end, len(starts))
        return None, meta_fail


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
        if (bad := not_text(response)) is not None:
            return bad
        last, n = last_match(self._re, response) if "```" in response else (None, 0)
        extra = {"language": self.language} if self.language else {}
        if last is None:
            return None, {"found": False, "format": "code_block", **extra}
        answer, meta = found_result(
            last.group(1).strip(), "code_block", last.start(1), last.end(1), n
        )
        meta.update(extra)
        return answer, meta
