"""QualityPreprocessor: shapes, columns, statistics and the dropped-row log."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from twinkle.preprocessor.base import Filter
from twinkle.preprocessor.quality import (
    PipelineStats,
    QualityPreprocessor,
    append_dropped,
    run_quality_pipeline,
    stats_from_marks,
    truncate_dropped_logs,
)


class OddId(Filter):
    def check(self, row):
        return "odd_id" if row["id"] % 2 else None


class BigId(Filter):
    def check(self, row):
        return "big_id" if row["id"] >= 50 else None


def add_tag(rows):
    """A plain-function mapper that adds a column."""
    return [{**r, "tag": "t"} for r in rows], []


def rows_(n, start=0):
    return [
        {"id": i, "messages": [{"role": "user", "content": f"q{i}"}]}
        for i in range(start, start + n)
    ]


def read_log(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_list_in_list_out_and_order():
    qp = QualityPreprocessor([OddId()])
    out = qp(rows_(6))
    assert isinstance(out, list)
    assert [r["id"] for r in out] == [0, 2, 4]


def test_columns_in_columns_out_with_input_keys():
    qp = QualityPreprocessor([OddId()])
    batch = {
        "id": [0, 1, 2],
        "messages": [r["messages"] for r in rows_(3)],
        "extra": ["a", "b", "c"],
    }
    out = qp(batch)
    assert list(out) == ["id", "messages", "extra"]
    assert out["id"] == [0, 2] and out["extra"] == ["a", "c"]


def test_batch_losing_every_row_keeps_columns():
    qp = QualityPreprocessor([BigId()])
    batch = {
        "id": [60, 61],
        "messages": [[{"role": "user", "content": "x"}]] * 2,
        "model_id": ["m", "m"],
    }
    assert qp(batch) == {"id": [], "messages": [], "model_id": []}


def test_union_of_row_keys_with_none_for_missing():
    qp = QualityPreprocessor([OddId()])
    rows = [
        {"id": 0, "messages": [{"role": "user", "content": "a"}]},
        {"id": 2, "messages": [{"role": "user", "content": "b"}], "model_id": "x"},
    ]
    out = qp({"id": [0, 2], "messages": [r["messages"] for r in rows]})
    assert set(out) == {"id", "messages"}
    listed = qp(rows)
    assert listed[0].get("model_id") is None and listed[1]["model_id"] == "x"


def test_added_column_appears_and_declared_column_survives_empty_batch():
    add_tag.adds_columns = ("tag",)
    qp = QualityPreprocessor([BigId(), add_tag])
    assert qp({"id": [1], "messages": [[{"role": "user", "content": "x"}]]})["tag"] == ["t"]
    assert qp({"id": [70], "messages": [[{"role": "user", "content": "x"}]]}) == {
        "id": [],
        "messages": [],
        "tag": [],
    }


def test_empty_input_shapes():
    qp = QualityPreprocessor([OddId()])
    assert qp([]) == []
    assert qp({"id": [], "messages": []}) == {"id": [], "messages": []}


def test_stats_per_step_and_reason():
    qp = QualityPreprocessor([OddId(), BigId()])
    qp(rows_(100))
    d = qp.last_stats.as_dict()
    assert d["rows_in"] == 100 and d["rows_out"] == 25
    assert [(s["step"], s["rows_in"], s["rows_out"], s["dropped"]) for s in d["steps"]] == [
        ("OddId", 100, 50, {"odd_id": 50}),
        ("BigId", 50, 25, {"big_id": 25}),
    ]
    assert all(s["seconds"] >= 0 for s in d["steps"])
    qp(rows_(10))
    assert qp.stats.rows_in == 110 and qp.last_stats.rows_in == 10
    assert qp.stats.lines()[0].startswith("  OddId: 110->55 (dropped 55, ")


def test_duplicate_step_names_are_told_apart():
    qp = QualityPreprocessor([OddId(), OddId()])
    assert qp.names == ["OddId", "OddId#2"]


def test_invalid_arguments():
    with pytest.raises(ValueError, match="drop_mode"):
        QualityPreprocessor([OddId()], drop_mode="soft")
    with pytest.raises(ValueError, match="callables"):
        QualityPreprocessor([OddId(), 3])


def test_mark_mode_returns_every_row_with_marks():
    qp = QualityPreprocessor([OddId(), add_tag], drop_mode="mark")
    out = qp(rows_(4))
    assert [r["id"] for r in out] == [0, 1, 2, 3]
    assert [r["_keep"] for r in out] == [True, False, True, False]
    assert out[1]["_drop_step"] == "OddId" and out[1]["_drop_reason"] == "odd_id"
    assert out[0]["_drop_step"] == "" and out[0]["_drop_reason"] == ""
    assert out[0]["tag"] == "t" and "tag" not in out[1]  # survivors as processed, drops as input
    assert all("_qp_idx" not in r for r in out)
    cols = qp({"id": [1], "messages": [[{"role": "user", "content": "x"}]]})
    assert cols["_keep"] == [False] and cols["_drop_reason"] == ["odd_id"]


def test_dropped_log_records_step_reason_and_row(tmp_path):
    log = tmp_path / "sub" / "dropped.jsonl"
    qp = QualityPreprocessor([OddId(), BigId()], dropped_log_path=str(log))
    qp(rows_(100))
    records = read_log(log)
    assert len(records) == 75
    assert {(r["step"], r["reason"]) for r in records} == {("OddId", "odd_id"), ("BigId", "big_id")}
    assert all("drop_reason" not in r["row"] and "id" in r["row"] for r in records)


def test_existing_log_is_never_deleted_and_truncate_is_explicit(tmp_path):
    log = tmp_path / "dropped.jsonl"
    log.write_text('{"step": "earlier", "reason": "x", "row": {}}\n')
    qp = QualityPreprocessor([OddId()], dropped_log_path=str(log))
    assert read_log(log)[0]["step"] == "earlier"  # construction kept it
    qp(rows_(2))
    assert [r["step"] for r in read_log(log)] == ["earlier", "OddId"]
    QualityPreprocessor([OddId()], dropped_log_path=str(log))
    assert len(read_log(log)) == 2
    (tmp_path / "dropped.jsonl.123").write_text("a per-process shard")
    (tmp_path / "dropped.jsonl.tmp").write_text("not a shard")
    truncate_dropped_logs(str(log))
    assert log.read_text() == ""
    assert not (tmp_path / "dropped.jsonl.123").exists()
    assert (tmp_path / "dropped.jsonl.tmp").exists()


def test_non_serialisable_and_unicode_rows_are_logged(tmp_path):
    log = tmp_path / "d.jsonl"
    n = append_dropped(
        str(log), "S", [{"id": 1, "blob": b"\x00", "text": "日本語", "drop_reason": "r"}, 5]
    )
    assert n == 2
    recs = read_log(log)
    assert recs[0]["reason"] == "r" and recs[0]["row"]["text"] == "日本語"
    assert recs[1] == {"step": "S", "reason": "S", "row": 5}
    assert append_dropped("", "S", [{"a": 1}]) == 0


def _writer(path, k):
    qp = QualityPreprocessor([OddId()], dropped_log_path=path)
    for _ in range(20):
        qp(
            [
                {
                    "id": 2 * i + 1,
                    "w": k,
                    "pad": "x" * 5000,
                    "messages": [{"role": "user", "content": "q"}],
                }
                for i in range(50)
            ]
        )


def test_concurrent_processes_never_interleave_lines(tmp_path):
    path = str(tmp_path / "d.jsonl")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    recs = read_log(path)  # every line parses
    assert len(recs) == 3 * 20 * 50
    assert {r["row"]["w"] for r in recs} == {0, 1, 2}


def test_datasets_map_num_proc_2_inline(tmp_path):
    import datasets  # the `hf` extra; the test command installs it

    log = str(tmp_path / "d.jsonl")
    rows = [{**r, "model_id": f"m{r['id']}"} for r in rows_(100)]
    ds = datasets.Dataset.from_list(rows)
    qp = QualityPreprocessor([OddId(), BigId()], dropped_log_path=log)
    out = ds.map(qp, batched=True, batch_size=10, num_proc=2, load_from_cache_file=False)
    assert sorted(out["id"]) == list(range(0, 50, 2))
    assert out.column_names == ["id", "messages", "model_id"]
    recs = read_log(log)
    assert len(recs) == 75 and len({r["row"]["id"] for r in recs}) == 75


def test_run_quality_pipeline_num_proc_2_collects_stats(tmp_path):
    import datasets  # the `hf` extra; the test command installs it

    log = str(tmp_path / "d.jsonl")
    # the first batches drop nothing, so the mark columns start out all-null
    rows = [
        {"id": (i if i >= 20 else 2 * i), "messages": [{"role": "user", "content": "q"}]}
        for i in range(100)
    ]
    ds = datasets.Dataset.from_list(rows)
    qp = QualityPreprocessor([OddId(), BigId()], dropped_log_path=log, drop_mode="mark")
    out = run_quality_pipeline(ds, qp, num_proc=2, batch_size=10)
    expect = [r["id"] for r in rows if r["id"] % 2 == 0 and r["id"] < 50]
    assert sorted(out["id"]) == sorted(expect)
    assert out.column_names == ["id", "messages"]
    d = qp.stats.as_dict()
    assert d["rows_in"] == 100 and d["rows_out"] == len(expect)
    assert sum(sum(s["dropped"].values()) for s in d["steps"]) == 100 - len(expect)
    assert len(read_log(log)) == 100 - len(expect)
    with pytest.raises(ValueError, match="mark"):
        run_quality_pipeline(ds, QualityPreprocessor([OddId()]), num_proc=1)


def test_run_quality_pipeline_in_process_counts_once():
    import datasets  # the `hf` extra; the test command installs it

    ds = datasets.Dataset.from_list(rows_(10))
    qp = QualityPreprocessor([OddId()], drop_mode="mark")
    run_quality_pipeline(ds, qp, num_proc=None, batch_size=4)
    assert qp.stats.rows_in == 10 and qp.stats.dropped() == {"OddId": {"odd_id": 5}}


def test_stats_helpers():
    s = stats_from_marks(["A", "B"], 5, ["", "A", "B", "", "A"], ["", "x", "y", "", "x"])
    assert [(v.rows_in, v.rows_out, dict(v.dropped)) for v in s.steps.values()] == [
        (5, 3, {"x": 2}),
        (3, 2, {"y": 1}),
    ]
    total = PipelineStats()
    total.merge(s)
    total.merge(s)
    assert total.rows_in == 10 and total.rows_out == 4
    assert PipelineStats().rows_in == 0 and PipelineStats().as_dict()["steps"] == []


def test_steps_that_break_the_contract_are_named():
    with pytest.raises(TypeError, match="step lossy returned list"):

        def lossy(rows):
            return rows

        QualityPreprocessor([lossy])(rows_(2))
    with pytest.raises(ValueError, match="step eater lost or invented rows: 2 in, 1 kept"):

        def eater(rows):
            return rows[:1], []

        QualityPreprocessor([eater])(rows_(2))


def test_run_quality_pipeline_with_a_step_that_changes_column_types(tmp_path):
    import datasets  # the `hf` extra; the test command installs it

    from twinkle.preprocessor.message_normalizer import MessageNormalizer

    call = json.dumps(
        [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    )
    rows = [
        {
            "id": i,
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": call},
                {"role": "tool", "content": "r", "tool_calls": None},
            ],
        }
        for i in range(40)
    ]
    ds = datasets.Dataset.from_list(rows)  # tool_calls is a string column here
    log = str(tmp_path / "d.jsonl")
    qp = QualityPreprocessor([OddId(), MessageNormalizer()], dropped_log_path=log, drop_mode="mark")
    out = run_quality_pipeline(ds, qp, num_proc=2, batch_size=10)
    assert sorted(out["id"]) == list(range(0, 40, 2))
    assert out[0]["messages"][1]["tool_calls"][0]["function"]["name"] == "f"  # now a list
    recs = read_log(log)
    assert len(recs) == 20 and isinstance(recs[0]["row"]["messages"][1]["tool_calls"], str)
