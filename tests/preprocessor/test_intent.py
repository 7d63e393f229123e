"""IntentClassifier: tags in four languages, pluggable detectors, keeps rows, counts in stats."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.preprocessor.intent_eval_data import ROWS, a, evaluate, u
from twinkle.data_format import user_data_get
from twinkle.io import read_rows_list, write_rows
from twinkle.preprocessor import IntentClassifier, QualityPreprocessor
from twinkle.preprocessor.chain import build_pipeline, curate_rows
from twinkle.preprocessor.intent import INTENTS, CodeDetector, RegexDetector


def test_labelled_rows_in_four_languages_precision_and_recall():
    report = evaluate(IntentClassifier())
    for intent in INTENTS:
        assert report[intent]["n"] >= 5, intent
        assert report[intent]["precision"] >= 0.85, (intent, report[intent])
        assert report[intent]["recall"] >= 0.8, (intent, report[intent])
    assert report["_overall"]["accuracy"] >= 0.9
    assert {lang for _, lang, _ in ROWS} == {"en", "zh", "ja", "ko"}


def test_every_row_kept_and_key_rounds_recorded():
    rows = [
        {"id": 1, "messages": [u("Write a Python function that adds two numbers."), a("ok")]},
        {"id": 2, "messages": "not a list"},
        {"id": 3, "messages": [u("hi"), a("hello")], "user_data": [["source", "x"]]},
        7,
    ]
    kept, dropped = IntentClassifier()(rows)
    assert len(kept) == 4 and not dropped
    assert [r["intent"] if isinstance(r, dict) else r for r in kept] == [
        "code",
        "other",
        "other",
        7,
    ]
    assert user_data_get(kept[0]["user_data"], "key_rounds") == [1]
    assert user_data_get(kept[0]["user_data"], "intents") == {"1": "code"}
    assert kept[2]["user_data"] == [["source", "x"]]  # untouched when nothing was found
    kept, dropped = IntentClassifier(drop_no_key_rounds=True)(rows[:1] + rows[2:3])
    assert [d["drop_reason"] for d in dropped] == ["no_key_rounds"] and len(kept) == 1


def test_pluggable_detectors_and_definitive_stop():
    class Greeting(RegexDetector):
        intent = "greeting"
        pattern = __import__("re").compile(r"\bhello\b", __import__("re").I)

    clf = IntentClassifier(detectors=[Greeting(), CodeDetector()], intent_field="tag")
    kept, _ = clf([{"messages": [u("hello there"), a("Hi!")]}])
    assert kept[0]["tag"] == "greeting" and clf.tag_counts == {"greeting": 1}
    row = ROWS[0][2] + [u("Now write a Python script for it"), a("```python\nprint(1)\n```")]
    assert IntentClassifier().classify(row)[0] == "tool_call"  # the tool call stops the rest


def test_tag_counts_reach_pipeline_stats_and_curate_summary(tmp_path):
    rows = [{"id": i, "messages": m} for i, (_, _, m) in enumerate(ROWS)]
    qp = QualityPreprocessor([IntentClassifier()])
    assert len(qp(rows)) == len(rows)
    tags = qp.stats.tags()["IntentClassifier"]
    assert sum(tags.values()) == len(rows) and tags["tool_call"] == 9
    assert qp.stats.as_dict()["steps"][0]["tags"] == tags
    assert qp.stats.as_dict()["tags"] == {"IntentClassifier": tags}
    kept, stats = curate_rows(rows, build_pipeline(["hard", "intent"]))
    assert sum(stats.tags()["IntentClassifier"].values()) == len(kept)

    from twinkle.cli.curate import curate

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_rows(src, rows)
    result = CliRunner().invoke(curate, [str(src), "-o", str(out), "--filters", "intent", "-q"])
    assert result.exit_code == 0, result.output
    assert "IntentClassifier tags: other: " in result.output
    assert {r["intent"] for r in read_rows_list(out)} == set(INTENTS)
    assert json.loads(read_rows_list(out)[0]["user_data"][1][1]) == {"1": "tool_call"}


def test_datasets_map_mark_mode_keeps_tags():

    import datasets

    from twinkle.preprocessor.quality import run_quality_pipeline

    ds = datasets.Dataset.from_list([{"messages": ROWS[i][2]} for i in (9, 10, 50)])
    qp = QualityPreprocessor([IntentClassifier()], drop_mode="mark")
    out = run_quality_pipeline(ds, qp)
    assert len(out) == 3 and qp.stats.tags()["IntentClassifier"] == {"code": 2, "other": 1}
