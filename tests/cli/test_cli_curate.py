"""``twinkle curate`` end to end on small files: output, dropped log, table, errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from twinkle.cli.curate import curate
from twinkle.io import read_rows_list, write_rows

GOOD_ASSISTANT = (
    "To count the lines, run `wc -l` over every file and sort the result numerically; "
    "the largest file then appears at the bottom of the list, which answers the question."
)


def good(i):
    return {
        "id": f"good-{i}",
        "model_id": "qwen/qwen3-235b-a22b",
        "messages": [
            {"role": "user", "content": f"How do I count lines of the files in project {i}?"},
            {"role": "assistant", "content": GOOD_ASSISTANT + f" (project {i})"},
            {"role": "user", "content": "Thanks, and how do I sort them?"},
            {"role": "assistant", "content": "Pipe the output into `sort -n`."},
            {"role": "user", "content": "Great."},
            {"role": "assistant", "content": "Glad to help."},
        ],
    }


def dataset():
    rows = [good(i) for i in range(6)]
    rows.append({**good(0), "id": "dup-of-0"})
    rows.append({"id": "broken", "messages": "not a list"})
    rows.append({**good(7), "id": "small-model", "model_id": "qwen/qwen3-8b"})
    rows.append(
        {
            "id": "merge",
            "model_id": "qwen/qwen3-235b-a22b",
            "messages": good(9)["messages"][:1]
            + [{"role": "user", "content": "(more detail)"}]
            + good(9)["messages"][1:],
        }
    )
    return rows


def read_log(path):
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


def test_curate_default_chain_writes_output_log_and_table(tmp_path):
    src = tmp_path / "in.jsonl"
    write_rows(src, dataset())
    out, log = tmp_path / "out.jsonl", tmp_path / "dropped.jsonl"
    result = CliRunner().invoke(curate, [str(src), "-o", str(out), "--dropped", str(log), "-q"])
    assert result.exit_code == 0, result.output
    kept = read_rows_list(out)
    kept_ids = [r["id"] for r in kept]
    assert "dup-of-0" not in kept_ids and "broken" not in kept_ids
    assert {f"good-{i}" for i in range(6)} <= set(kept_ids)
    merged = next(r for r in kept if r["id"] == "merge")
    assert merged["messages"][0]["content"].endswith("\n(more detail)")
    records = read_log(log)
    assert {(r["row"]["id"], r["reason"]) for r in records} >= {("dup-of-0", "duplicate")}
    assert any(r["row"]["id"] == "broken" and r["reason"].startswith("malformed") for r in records)
    assert len(kept) + len(records) == len(dataset())
    for word in (
        "DedupFilter",
        "HardFilter",
        "MessageNormalizer",
        "rows in",
        "duplicate: 1",
        "total",
    ):
        assert word in result.output
    assert f"wrote {len(kept)} rows" in result.output


def test_curate_parquet_folder_model_step_and_existing_log_kept(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_rows(data / "part1.parquet", [r for r in dataset() if r["id"] != "broken"][:5])
    write_rows(data / "part2.jsonl", [r for r in dataset() if r["id"] != "broken"][5:])
    (data / "tasks").mkdir()
    write_rows(data / "tasks" / "other.jsonl", [{"id": "task-1", "question": "not a conversation"}])
    log = tmp_path / "dropped.jsonl"
    log.write_text('{"step": "earlier", "reason": "x", "row": {}}\n')
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(
        curate,
        [
            str(data),
            "-o",
            str(out),
            "--dropped",
            str(log),
            "--filters",
            "model,dedup",
            "--allowed-model",
            "qwen/qwen3-2*",
            "--append",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    ids = [r["id"] for r in read_rows_list(out)]
    assert "small-model" not in ids and "dup-of-0" not in ids and "good-3" in ids
    records = read_log(log)
    assert records[0]["step"] == "earlier"
    assert {(r["step"], r["reason"]) for r in records[1:]} == {
        ("ModelFilter", "model_not_allowed"),
        ("DedupFilter", "duplicate"),
    }
    again = CliRunner().invoke(
        curate,
        [
            str(data),
            "-o",
            str(out),
            "--dropped",
            str(log),
            "--filters",
            "dedup",
            "-q",
        ],
    )
    assert again.exit_code == 0 and [r["step"] for r in read_log(log)] == ["DedupFilter"]
    # A rerun replaces the log (it does not double it) unless --append is given.
    args = [str(data), "-o", str(out), "--dropped", str(log), "--filters", "dedup", "-q"]
    assert CliRunner().invoke(curate, args).exit_code == 0
    assert [r["step"] for r in read_log(log)] == ["DedupFilter"]
    assert CliRunner().invoke(curate, [*args, "--append"]).exit_code == 0
    assert [r["step"] for r in read_log(log)] == ["DedupFilter", "DedupFilter"]


def test_curate_errors_say_what_to_do(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "messages": []}\n{oops\n')
    out = tmp_path / "out.jsonl"
    r = CliRunner().invoke(curate, [str(bad), "-o", str(out), "-q"])
    assert (
        r.exit_code == 1 and "bad.jsonl:2" in r.output and "fix the input and run again" in r.output
    )
    assert not out.exists()
    good_file = tmp_path / "good.jsonl"
    write_rows(good_file, [good(1)])
    r = CliRunner().invoke(curate, [str(good_file), "-o", str(out), "--filters", "dedup,bogus"])
    assert r.exit_code == 2 and "unknown filter(s) bogus" in r.output and "choose from" in r.output
    r = CliRunner().invoke(curate, [str(good_file), "-o", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and ".jsonl" in r.output
    r = CliRunner().invoke(curate, [str(good_file), "-o", str(out), "--allowed-model", "x"])
    assert r.exit_code == 2 and "add it to --filters" in r.output
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(curate, [str(empty), "-o", str(out)])
    assert r.exit_code == 2 and "holds no" in r.output


@pytest.mark.slow
def test_twinkle_curate_as_a_process_with_progress(tmp_path):
    src = tmp_path / "in.jsonl"
    write_rows(src, [good(i) for i in range(3)] + [good(0)])
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "twinkle",
            "curate",
            str(src),
            "-o",
            str(out),
            "--filters",
            "dedup,normalize,neardedup",
            "--near-threshold",
            "0.9",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(read_rows_list(out)) == 3
    assert "NearDedupFilter" in proc.stdout and "read" in proc.stderr


def test_a_row_nested_a_thousand_levels_deep_is_a_clear_error(tmp_path):
    deep = tmp_path / "deep.jsonl"
    nested = "[" * 1500 + "]" * 1500
    deep.write_text(json.dumps(good(1)) + '\n{"id": "deep", "messages": ' + nested + "}\n")
    out = tmp_path / "out.jsonl"
    r = CliRunner().invoke(curate, [str(deep), "-o", str(out), "--dropped", str(tmp_path / "d")])
    assert r.exit_code == 1 and "deep.jsonl:2: row nested more than" in r.output
    assert "RecursionError" not in r.output and not out.exists()


def test_parquet_messages_of_map_type_are_malformed_messages(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "maps.parquet"
    message = [("role", "user"), ("content", "How do I count the lines of my files?")]
    messages = pa.array([message], type=pa.map_(pa.string(), pa.string()))
    pq.write_table(pa.table({"id": ["m"], "messages": messages}), src)
    log = tmp_path / "dropped.jsonl"
    r = CliRunner().invoke(
        curate, [str(src), "-o", str(tmp_path / "o.jsonl"), "--dropped", str(log), "-q"]
    )
    assert r.exit_code == 0, r.output
    assert [rec["reason"] for rec in read_log(log)] == ["malformed_messages"]
