"""Score a curation chain on a labelled set: precision and recall per drop reason.

A labelled row is an ordinary row with three more fields: ``id``, ``lang`` and ``label``
(``'clean'`` or the drop reason the chain should give it), plus an optional ``class`` that
names the case it stands for (``short_complete_answer``, ``partial_decline``, ...). The
chain runs as ``curate_rows`` runs it (global steps on the whole set, then the per-row
steps in order), and each dropped row is credited to the first step that dropped it.

``bench/data/curation_eval.jsonl`` is such a set, written by hand in EN/ZH/JA/KO;
``bench/curation.py`` reports it and ``tests/preprocessor/test_eval_set.py`` holds the chain
to it.

Example:
    >>> rows = [
    ...     {'id': 'a', 'lang': 'en', 'label': 'clean', 'messages': [
    ...         {'role': 'user', 'content': 'Which planet is fifth from the Sun?'},
    ...         {'role': 'assistant', 'content': 'The fifth planet from the Sun is Jupiter.'}]},
    ...     {'id': 'b', 'lang': 'en', 'label': 'trivial_single_turn', 'messages': [
    ...         {'role': 'user', 'content': 'hi'},
    ...         {'role': 'assistant', 'content': 'Hello!'}]}]
    >>> report = score(rows, chain_reasons(rows))
    >>> report['false_drop_rate'], report['reasons']['trivial_single_turn']['recall']
    (0.0, 1.0)
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from twinkle.preprocessor.chain import DEFAULT_CHAIN, build_pipeline

__all__ = ["CLEAN", "chain_reasons", "load_labelled", "score"]

CLEAN = "clean"


def load_labelled(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a labelled JSONL file (every row needs ``id``, ``lang`` and ``label``)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            missing = [k for k in ("id", "lang", "label", "messages") if k not in row]
            if missing:
                raise ValueError(f"{path}:{n}: labelled row lacks {', '.join(missing)}")
            rows.append(row)
    return rows


def chain_reasons(
    rows: Sequence[dict[str, Any]],
    names: str | Iterable[str] = DEFAULT_CHAIN,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[Any, str]:
    """``{row id: drop reason}`` for every row the chain drops (kept rows are absent)."""
    reasons: dict[Any, str] = {}
    current = list(rows)
    for stage in build_pipeline(names, params):
        kept, dropped = stage.step(current)
        for d in dropped:
            reasons.setdefault(d.get("id"), d.get("drop_reason", stage.name))
        current = list(kept)
    return reasons


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def score(rows: Sequence[dict[str, Any]], reasons: Mapping[Any, str]) -> dict[str, Any]:
    """Precision and recall per drop reason, recall per reason and language, the outcome per
    labelled class and language, and the false-drop rate on clean rows."""
    expected_n: dict[str, int] = defaultdict(int)
    got_n: dict[str, int] = defaultdict(int)
    hit_n: dict[str, int] = defaultdict(int)
    by_lang: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    by_class: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    clean = false_drops = 0
    false_by_reason: dict[str, int] = defaultdict(int)
    errors = []
    for row in rows:
        want, got = row["label"], reasons.get(row["id"], CLEAN)
        ok = want == got
        cls = f"{want}/{row.get('class') or want}"
        by_class[cls][row["lang"]][0] += ok
        by_class[cls][row["lang"]][1] += 1
        if got != CLEAN:
            got_n[got] += 1
            hit_n[got] += ok
        if want == CLEAN:
            clean += 1
            if got != CLEAN:
                false_drops += 1
                false_by_reason[got] += 1
        else:
            expected_n[want] += 1
            by_lang[want][row["lang"]][0] += ok
            by_lang[want][row["lang"]][1] += 1
        if not ok:
            errors.append({"id": row["id"], "expected": want, "got": got})
    return {
        "rows": len(rows),
        "clean_rows": clean,
        "false_drops": false_drops,
        "false_drop_rate": _ratio(false_drops, clean) or 0.0,
        "false_drops_by_reason": dict(false_by_reason),
        "reasons": {
            r: {
                "precision": _ratio(hit_n[r], got_n[r]),
                "recall": _ratio(hit_n[r], expected_n[r]),
                "labelled": expected_n[r],
                "dropped": got_n[r],
            }
            for r in sorted(set(expected_n) | set(got_n))
        },
        "recall_by_language": {
            r: {lang: {"recall": _ratio(a, b), "n": b} for lang, (a, b) in sorted(langs.items())}
            for r, langs in sorted(by_lang.items())
        },
        "by_class": {
            c: {lang: {"correct": _ratio(a, b), "n": b} for lang, (a, b) in sorted(langs.items())}
            for c, langs in sorted(by_class.items())
        },
        "errors": errors,
    }
