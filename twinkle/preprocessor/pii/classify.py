"""Cheap tests on text and spans: its language, prose or code, whether a span can be a name.

Agent rows must replay after the rewrite, so what reads as code (commands, paths, program
text) gets only the strong identifiers, and an NER span is kept only when it has the shape of
a name; these tests decide both without a model.

Example:
    >>> _looks_like_prose('Meet Anna at the station.'), _looks_like_prose('ls -la /tmp | wc -l')
    (True, False)
    >>> _detect_language('今天我们去北京', ('en', 'zh')), _is_phone_like('1695', prose=True)
    ('zh', False)
"""

from __future__ import annotations

import re
from functools import cache

from twinkle.preprocessor.pii.tables import words

_HAN_RE = re.compile(r"[\u4e00-\u9fff]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_ANY_SIGNAL_RE = re.compile(r"[^\W_]")  # a letter or a digit: without one nothing can match
_KANA_RE = re.compile(r"[\u3040-\u30ff]")
_HANGUL_RE = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
# Letters in words joined by single spaces, hyphens, apostrophes or a dot after an initial.
_NAME_SHAPE_RE = re.compile(r"[^\W\d_]+(?:(?:[ '’-]|\. ?)[^\W\d_]+)*\.?")
_PLAIN_TOKEN_RE = re.compile(r"[\"'(“‘]?[^\W\d_]+(?:[-'’][^\W\d_]+)*[.,!?;:)\"'”’]*")
_CODE_CHARS = "{}[]()<>=;$|\\`#*&^~"


def _detect_language(text: str, languages: tuple[str, ...]) -> str | None:
    """The configured language whose NER fits ``text``, or None when none does.

    Kana or Hangul mean Japanese or Korean: neither spaCy's English model nor jieba reads
    them (both turn ordinary words into names), so such text gets the pattern recognizers only.
    """
    if not text:
        return languages[0]
    if len(_KANA_RE.findall(text)) > 0.05 * len(text) or _HANGUL_RE.search(text):
        return None
    guess = "zh" if len(_HAN_RE.findall(text)) / len(text) > 0.15 else "en"
    return guess if guess in languages else None


def _looks_like_prose(text: str) -> bool:
    """A cheap "natural language, not code" test for tool text: mostly plain words, hardly any
    code punctuation. A short capitalised value such as a name or a city counts as prose."""
    if _NAME_SHAPE_RE.fullmatch(text.strip()):
        return True
    if sum(text.count(c) for c in _CODE_CHARS) > 2 + len(text) / 50:
        return False
    tokens = text.split()
    plain = sum(
        1 for t in tokens if _PLAIN_TOKEN_RE.fullmatch(t) or (_CJK_RE.search(t) and t.isprintable())
    )
    if len(tokens) == 1:
        return bool(_CJK_RE.search(text)) and len(_LETTER_RE.findall(text)) >= 4
    return len(tokens) >= 2 and plain >= 0.6 * len(tokens)


@cache
def _known_names() -> frozenset[str]:
    """Faker's en_US first and last names: the words a lone capitalised token may be."""
    from faker.providers.person.en_US import Provider

    return frozenset(Provider.first_names) | frozenset(Provider.last_names)


def _is_name_like(text: str, start: int, end: int, entity: str) -> bool:
    """Whether the NER span ``text[start:end]`` can be a name: letters only (no code tokens
    like ``python3``, ``range(1``, ``note_1.txt``) and capitalised in Latin script. A lone
    capitalised word opening a sentence or line ("Benchmark the ...", "Deploy ...") is only
    a name when it is a known first or last name."""
    value = text[start:end]
    if not _NAME_SHAPE_RE.fullmatch(value):
        return False
    if _CJK_RE.search(value):
        return True
    if not value[0].isupper():
        return False
    if " " not in value and "-" not in value:  # one word: the riskiest guesses
        # An acronym, or a tech word the small model takes for a name.
        if value.isupper() or value.casefold() in words("not_names"):
            return False
        if _at_sentence_start(text, start) and value not in _known_names():
            return False
    return True


def _at_sentence_start(text: str, start: int) -> bool:
    before = text[:start].rstrip(" \t\"'(*-")
    return not before or before[-1] in "\n.!?:;"


def _trim_sentence_opener(text: str, start: int, end: int) -> int:
    """The small model glues an imperative to a name ("Greet Maria Garcia"): the first of
    three or more words, when it opens a sentence and is no known name, is cut off the span
    (two words stay: most are first and last name, and Faker's list lacks many first names)."""
    first, _, rest = text[start:end].partition(" ")
    if " " in rest and _at_sentence_start(text, start) and first not in _known_names():
        return start + len(first) + 1
    return start


def _is_phone_like(value: str, prose: bool) -> bool:
    """At least 7 digits (``phonenumbers`` accepts 4-digit short numbers of some regions, so
    Presidio calls the 1695 of ``items_1695.txt`` a phone); in code also a leading ``+`` or
    separators between digit groups, since a bare digit run there is a number."""
    if sum(c.isdigit() for c in value) < 7:
        return False
    return prose or value.lstrip().startswith("+") or bool(re.search(r"\d[\s.()-]+\d", value))
