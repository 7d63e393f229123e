"""The seeded generator: rows with ids, models, tools and labels, clean or defective.

Example:
    >>> rows = generate(4, seed=3, langs=("ja",))
    >>> [r["id"] for r in rows][:2], {label_of(r)["lang"] for r in rows}
    (['syn-3-000000', 'syn-3-000001'], {'ja'})
    >>> list(iter_rows(4, seed=3, langs=("ja",))) == rows
    True
"""

from __future__ import annotations

import collections
import copy
import json
import random
from collections.abc import Iterable, Iterator
from typing import Any

from twinkle.data_format import pack_value
from twinkle.data_format.synthetic.conversation import MODELS, TOOLS, _agent_row, _qa_row
from twinkle.data_format.synthetic.defects import _defect_row
from twinkle.data_format.synthetic.labels import DEFECTS, LANGS, label_of

#: How many recent clean rows a duplicate may copy.
_HISTORY = 200

__all__ = ["generate", "iter_rows", "label_of", "to_jsonl_line", "write_jsonl"]


def iter_rows(
    rows: int,
    seed: int = 0,
    defects: bool = False,
    defect_rate: float = 0.35,
    target_bytes: int = 0,
    langs: tuple[str, ...] = LANGS,
    agent_rate: float = 0.8,
) -> Iterator[dict[str, Any]]:
    """:func:`generate`'s rows one at a time, for writing large sets without holding them.

    The arguments are checked at the call, before the first row. Duplicates copy earlier
    rows, so leave the rows unchanged until the iteration ends.

    Example:
        >>> it = iter_rows(2, seed=1)
        >>> next(it)["id"], next(it)["id"]
        ('syn-1-000000', 'syn-1-000001')
        >>> iter_rows(1, langs=("fr",))
        Traceback (most recent call last):
        ...
        ValueError: unknown languages ['fr']; choose from ('en', 'zh', 'ja', 'ko')
    """
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if not 0 <= defect_rate <= 1:
        raise ValueError(f"defect_rate must be in [0, 1], got {defect_rate}")
    unknown = set(langs) - set(LANGS)
    if unknown:
        raise ValueError(f"unknown languages {sorted(unknown)}; choose from {LANGS}")
    return _rows(rows, seed, defects, defect_rate, target_bytes, langs, agent_rate)


def _rows(
    rows: int,
    seed: int,
    defects: bool,
    defect_rate: float,
    target_bytes: int,
    langs: tuple[str, ...],
    agent_rate: float,
) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    clean: collections.deque[dict[str, Any]] = collections.deque(maxlen=_HISTORY)
    n_defects = 0
    for i in range(rows):
        lang = langs[i % len(langs)]
        agent = rng.random() < agent_rate
        defect = "none"
        variant = ""
        dup_of = None
        if defects and i >= 8 and rng.random() < defect_rate:
            defect = DEFECTS[n_defects % len(DEFECTS)]
            n_defects += 1
            messages, variant, dup_of = _defect_row(
                rng, lang, defect, agent, target_bytes, list(clean)
            )
            if defect in ("exact_duplicate", "near_duplicate") and dup_of is None:
                defect = "dead_loop"
        else:
            messages = (
                _agent_row(rng, lang, target_bytes) if agent else _qa_row(rng, lang, target_bytes)
            )
        is_agent = any(m.get("tool_calls") for m in messages if m["role"] == "assistant")
        user_data = [
            ("synthetic_defect", pack_value(defect)),
            ("synthetic_variant", pack_value(variant)),
            ("synthetic_lang", pack_value(lang)),
            ("synthetic_agent", pack_value(is_agent)),
        ]
        if dup_of:
            user_data.append(("synthetic_dup_of", pack_value(dup_of)))
        row = {
            "id": f"syn-{seed}-{i:06d}",
            "model_id": MODELS[rng.randrange(len(MODELS))],
            "messages": messages,
            "tools": copy.deepcopy(TOOLS),
            "user_data": [list(p) for p in user_data],
        }
        if defect == "none":
            clean.append(row)
        yield row


def generate(
    rows: int,
    seed: int = 0,
    defects: bool = False,
    defect_rate: float = 0.35,
    target_bytes: int = 0,
    langs: tuple[str, ...] = LANGS,
    agent_rate: float = 0.8,
) -> list[dict[str, Any]]:
    """``rows`` conversations from ``seed``; with ``defects``, ``defect_rate`` of them defective.

    ``target_bytes`` (e.g. 4096) grows rows (more rounds, longer answers) to about that
    size as JSON. Languages and defect types cycle so every combination is represented.

    Example:
        >>> rows = generate(30, seed=1, defects=True, defect_rate=0.5)
        >>> sorted({label_of(r)["defect"] for r in rows})[:3]
        ['dead_loop', 'exact_duplicate', 'near_duplicate']
        >>> generate(2, seed=1) == generate(2, seed=1)
        True
    """
    return list(iter_rows(rows, seed, defects, defect_rate, target_bytes, langs, agent_rate))


def to_jsonl_line(row: dict[str, Any]) -> str:
    """One row as a JSON Lines line: non-ASCII text kept as is, newline-terminated.

    Example:
        >>> to_jsonl_line({"id": "a", "text": "你好"})
        '{"id": "a", "text": "你好"}\\n'
    """
    return json.dumps(row, ensure_ascii=False) + "\n"


def write_jsonl(rows: Iterable[dict[str, Any]], path: str) -> None:
    """Write ``rows`` (a list or an iterator such as :func:`iter_rows`) to ``path`` as JSONL.

    Example:
        >>> write_jsonl(iter_rows(3, seed=1), "rows.jsonl")
        >>> from pathlib import Path
        >>> len(Path("rows.jsonl").read_text(encoding="utf-8").splitlines())
        3
    """
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(to_jsonl_line(row) for row in rows)
