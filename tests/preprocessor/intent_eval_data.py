"""Hand-written, labelled rows for IntentClassifier: every intent in EN, ZH, JA and KO.

The rows live in ``data/intent_eval.jsonl`` (``{label, lang, messages}``); ``ROWS`` holds
them as ``(label, lang, messages)`` and ``evaluate()`` returns per-intent precision and
recall (used by tests/preprocessor/test_intent.py and reported in issue 12).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data") / "intent_eval.jsonl"


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def a(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def _load() -> list[tuple[str, str, list[dict[str, Any]]]]:
    with open(DATA, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r["label"], r["lang"], r["messages"]) for r in rows]


#: The last nine rows were written after the detectors and not tuned on.
ROWS = _load()


def evaluate(classifier: Any) -> dict[str, dict[str, float]]:
    """``{intent: {precision, recall, n}}`` of ``classifier`` on ``ROWS`` (plus ``_overall``)."""
    rows = [{"id": i, "messages": m} for i, (_, _, m) in enumerate(ROWS)]
    kept, dropped = classifier(rows)
    assert not dropped and len(kept) == len(ROWS)
    got = {r["id"]: r["intent"] for r in kept}
    tp, fp, fn, n = Counter(), Counter(), Counter(), Counter()
    for i, (label, _, _) in enumerate(ROWS):
        n[label] += 1
        if got[i] == label:
            tp[label] += 1
        else:
            fp[got[i]] += 1
            fn[label] += 1
    out = {}
    for label in n:
        predicted = tp[label] + fp[label]
        out[label] = {
            "precision": tp[label] / predicted if predicted else 0.0,
            "recall": tp[label] / n[label],
            "n": n[label],
        }
    out["_overall"] = {"accuracy": sum(tp.values()) / len(ROWS), "n": len(ROWS)}
    return out
