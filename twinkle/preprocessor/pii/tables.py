"""Word lists and label tables of the PII step, read from ``data/`` once, on first use.

They live in data files so that a list can grow without touching code, and are read lazily
so that importing the filter reads nothing from disk.

Example:
    >>> 'python' in words('not_names'), 'Python' in words('not_names')
    (True, False)
    >>> ner_labels()['jieba']['nr']
    'PERSON'
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any


def _read(name: str) -> str:
    return (files(__package__) / "data" / name).read_text(encoding="utf-8")


@cache
def words(name: str) -> frozenset[str]:
    """The entries of ``data/<name>.txt``: one per line; blank lines and ``#`` lines skipped."""
    lines = (line.strip() for line in _read(f"{name}.txt").splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


@cache
def ner_labels() -> MappingProxyType[str, Any]:
    """``data/ner_labels.json``: spaCy label -> entity (``spacy``), the spaCy labels Presidio
    is told to ignore (``spacy_ignored``) and jieba POS tag -> entity (``jieba``).

    Read-only, since every caller shares the one cached copy.
    """
    raw = json.loads(_read("ner_labels.json"))
    return MappingProxyType(
        {
            "spacy": MappingProxyType(raw["spacy"]),
            "spacy_ignored": tuple(raw["spacy_ignored"]),
            "jieba": MappingProxyType(raw["jieba"]),
        }
    )
