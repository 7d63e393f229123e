"""The entity groups, and the recognizers Twinkle adds to Presidio's own.

Presidio lacks Chinese identifiers and API-key-like secrets, and its ``\\b``-bounded e-mail
and IPv4 patterns miss values inside CJK text; the ASCII-bounded patterns here fill those
gaps. Validators (checksums) decide outright, as in Presidio: valid means score 1.0.

Example:
    >>> _is_valid_luhn('4111 1111 1111 1111'), _is_valid_cn_id('11010519491231002X')
    (True, True)
    >>> 'EMAIL_ADDRESS' in CODE_SAFE_ENTITIES, 'PERSON' in CODE_SAFE_ENTITIES
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["CODE_SAFE_ENTITIES", "IDENTIFIER_ENTITIES", "NAME_ENTITIES", "WEAK_ENTITIES"]

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
    "PASSWORD",
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

# (entity, regex, score). ASCII-bounded so that they work inside CJK text: Han characters
# are word characters, so Presidio's ``\b`` finds no boundary between "电话" and a number.
# Case-sensitive: secrets have fixed prefixes.
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
    # A password or secret given in text: "password: hunter2-secret", "pwd=Tr0ub4dor&3",
    # "my password is swordfish7", "密码：abc12345". "is" only after password words, and not
    # before the words that describe a password instead of giving one ("is required").
    (
        "PASSWORD",
        (
            r"(?<=(?i:\b(?:pass(?:word|wd|code|phrase)|pwd|pin)\b)\s*(?:[:=：]|(?i:\bis\b))\s*"
            r"[\"'“「(]?|(?i:\b(?:secret|token|api[ _-]?key|access[ _-]?key)\b)\s*[:=：]\s*"
            r"[\"'“「(]?)"
            r"(?!(?i:required|incorrect|wrong|invalid|correct|too|not|empty|missing|changed"
            r"|reset|expired|needed|the|a|an|your|my|case|set|stored|hashed|saved|sent)\b)"
            r"[^\s\"'”」，。、,;；]{2,63}[^\s\"'”」，。、,;；.!?:)]"
        ),
        0.9,
    ),
    # The password of a URL's credentials: "postgres://app:S3cret@db:5432/x".
    (
        "PASSWORD",
        r"(?<=[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\"'<>]{1,64}:)[^\s/?#@\"'<>]{1,128}(?=@)",
        0.95,
    ),
    (
        "PASSWORD",
        (
            r"(?<=(?:密码|口令|パスワード|暗証番号|비밀번호|암호)\s*(?:[:=：]|是|为|は|는|은)\s*"
            r"[\"'“「]?)[A-Za-z0-9!@#$%^&*_+\-.~]{3,63}[A-Za-z0-9!@#$%^&*_+\-~]"
        ),
        0.9,
    ),
)
# phonenumbers already validated the number; Presidio's base 0.4 only reflects missing context.
_SCORE_FLOOR = {"PHONE_NUMBER": 0.4}
# Shortest span kept per entity (3 for the others): shorter ones are noise, not identifiers.
_MIN_SPAN = {"EMAIL_ADDRESS": 5, "PERSON": 2, "LOCATION": 2, "ORGANIZATION": 2}


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


# Validators decide outright (Presidio's convention: valid -> score 1.0, invalid -> 0).
_VALIDATORS: dict[str, Callable[[str], bool]] = {
    "CN_ID": _is_valid_cn_id,
    "CN_BANK": _is_valid_luhn,
}


def _pattern_recognizers(lang: str) -> list[Any]:
    """One Presidio ``PatternRecognizer`` per entity of ``_PATTERNS``, for ``lang``."""
    from presidio_analyzer import Pattern, PatternRecognizer

    by_entity: dict[str, list[Any]] = {}
    for entity, regex, score in _PATTERNS:
        by_entity.setdefault(entity, []).append(
            Pattern(
                name=f"{entity.lower()}_{len(by_entity.get(entity, []))}",
                regex=regex,
                score=score,
            )
        )
    return [
        PatternRecognizer(
            supported_entity=entity,
            supported_language=lang,
            patterns=patterns,
            name=f"Twinkle{entity.title().replace('_', '')}Recognizer",
            global_regex_flags=re.DOTALL | re.MULTILINE,
        )
        for entity, patterns in by_entity.items()
    ]
