"""Answer extractors: pull the final answer out of a model response.

Every extractor returns ``(answer, metadata)``; ``answer`` is None when nothing was found
(``""`` is a found, empty answer) and ``metadata["found"]`` says the same. Wherever a
pattern can match several times, the last match wins, because models restate and correct
themselves before the final answer.

Built on precompiled stdlib ``re`` patterns and ``str`` methods only: scoring runs these on
every response, so there are no per-character Python loops, and every pattern is linear on
long or hostile inputs (brace and tag pairing walk the tag/brace tokens, never re-scan).

This module is the import path for all of them and holds the name registry
:data:`EXTRACTORS`; the classes live in :mod:`twinkle.core.extraction_markers` (tags, boxes,
code fences, ``####``, a regex), :mod:`twinkle.core.extraction_text` (numbers, choice
letters, phrases, lines) and :mod:`twinkle.core.extraction_wrappers` (composition,
cleaning, filters), over the protocol in :mod:`twinkle.core.extraction_base`.

Example:
    >>> NumericExtractor().extract("Year 2025, so the total is 1,234.")[0]
    '1234'
    >>> MultipleChoiceExtractor().extract("The correct answer is (C).")[0]
    'C'
    >>> CleanedExtractor(TagBasedExtractor(), post_cleaners=["strip_trailing_punctuation"]
    ...                  ).extract("<answer>42.</answer><|endoftext|>")[0]
    '42'
    >>> type(EXTRACTORS["boxed"]()).__name__
    'BoxedExtractor'
"""

from __future__ import annotations

from twinkle.core.extraction_base import AnswerExtractor, Extraction
from twinkle.core.extraction_markers import (
    BoxedExtractor,
    CodeBlockExtractor,
    GSM8KExtractor,
    RegexExtractor,
    TagBasedExtractor,
)
from twinkle.core.extraction_text import (
    LastLineExtractor,
    MultipleChoiceExtractor,
    NumericExtractor,
    PatternAnswerExtractor,
    RawGenerationExtractor,
    TailExtractor,
)
from twinkle.core.extraction_wrappers import (
    CleanedExtractor,
    CompositeExtractor,
    NativeExtractor,
    SingleLineExtractor,
)

__all__ = [
    "EXTRACTORS",
    "AnswerExtractor",
    "BoxedExtractor",
    "CleanedExtractor",
    "CodeBlockExtractor",
    "CompositeExtractor",
    "Extraction",
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
