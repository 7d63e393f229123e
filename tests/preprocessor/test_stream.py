"""curate_stream keeps exactly the rows curate_rows keeps, and resumes at the shard."""

from __future__ import annotations

import copy
import json
import random

import pytest

from twinkle.io import read_rows_list, write_rows
from twinkle.preprocessor.chain import build_pipeline, curate_rows
from twinkle.preprocessor.stream import curate_stream
from twinkle.synthetic import generate


def _mixed_rows() -> list[dict]:
    """Synthetic rows with defects, exact copies, truncated copies, branches, near
    duplicates and malformed rows, in a shuffled order."""
    rng = random.Random(7)
    base = generate(160, seed=11, defects=True, defect_rate=0.3, target_bytes=1500)
    rows = list(base)
    for i in range(40):
        src = rng.choice(base)
        kind = i % 4
        msgs = copy.deepcopy(src["messages"])
        if kind == 0:  # exact copy
            rows.append({"id": f"copy{i}", "messages": msgs})
        elif kind == 1 and len(msgs) > 2:  # truncated copy
            rows.append({"id": f"trunc{i}", "messages": msgs[:-1]})
        elif kind == 2:  # branch: same first exchange, another follow-up
            msgs.append({"role": "user", "content": f"and now explain step {i} in detail"})
            rows.append({"id": f"branch{i}", "messages": msgs})
        else:  # near duplicate: one more sentence at the end of the last message
            last = msgs[-1]
            if isinstance(last.get("content"), str):
                last["content"] += " Thanks."
            rows.append({"id": f"near{i}", "messages": msgs})
    rows += [
        {"id": "bad1", "messages": []},
        {"id": "bad2", "messages": "not a list"},
        {"id": "bad3"},
    ]
    rng.shuffle(rows)
    return rows


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixed")
    rows = _mixed_rows()
    # Three files in a folder and one Parquet beside it: folders, globs and formats mix.
    (d / "in").mkdir()
    write_rows(d / "in" / "a.jsonl", rows[:90])
    write_rows(d / "in" / "b.jsonl", rows[90:150])
    write_rows(d / "c.parquet", rows[150:])
    inputs = [str(d / "in"), str(d / "*.parquet")]
    return d, inputs, read_rows_list(inputs)


def _plain(stats):
    return [
        (s.step, s.rows_in, s.rows_out, dict(s.dropped), dict(s.tags)) for s in stats.steps.values()
    ]


CHAINS = [
    "dedup,hard,deadloop,refuse,soup,normalize",
    "dedup,neardedup,hard,normalize",
    "hard,dedup,normalize,neardedup,soup",
]


@pytest.mark.parametrize("chain", CHAINS)
def test_stream_keeps_the_same_rows_as_in_memory(mixed, tmp_path, chain):
    _, inputs, rows = mixed
    mem_log = tmp_path / "mem-dropped.jsonl"
    kept, stats = curate_rows(
        copy.deepcopy(rows), build_pipeline(chain), str(mem_log), batch_size=16
    )
    out, log = tmp_path / "out.jsonl", tmp_path / "dropped.jsonl"
    s = curate_stream(inputs, out, log, chain, batch_size=16, shard_rows=50, progress=False)
    got = read_rows_list(out)
    assert [r.get("id") for r in got] == [r.get("id") for r in kept]
    assert got == json.loads(json.dumps(kept))
    assert _plain(s.stats) == _plain(stats)
    assert s.rows_in == len(rows) and s.rows_out == len(kept)
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(logged) == len(rows) - len(kept)  # rows_in = kept + dropped
    # the same log lines as the in-memory run (the order of the lines may differ)
    assert sorted(log.read_text().splitlines()) == sorted(mem_log.read_text().splitlines())
    assert s.shards > 1
    assert not (tmp_path / ".out.jsonl.work").exists()  # removed without resume


@pytest.mark.parametrize("chain", CHAINS)
def test_stream_without_a_dropped_log_keeps_the_same_rows(mixed, tmp_path, chain):
    # No dropped log: the rows reaching the last global step are not spooled, and groups
    # that are not plain copies (truncations, branches) are read back from the input.
    _, inputs, rows = mixed
    kept, stats = curate_rows(copy.deepcopy(rows), build_pipeline(chain), batch_size=16)
    out = tmp_path / "out.jsonl"
    s = curate_stream(inputs, out, "", chain, batch_size=16, shard_rows=50, progress=False)
    assert read_rows_list(out) == json.loads(json.dumps(kept))
    assert _plain(s.stats) == _plain(stats)
    assert (
        s.rows_in
        == len(rows)
        == s.rows_out + sum(n for step in s.stats.steps.values() for n in step.dropped.values())
    )


def test_stream_resumes_at_the_shard(mixed, tmp_path):
    _, inputs, _ = mixed
    chain = "dedup,hard,normalize"
    out, log, work = tmp_path / "out.jsonl", tmp_path / "d.jsonl", tmp_path / "work"
    first = curate_stream(
        inputs, out, log, chain, shard_rows=40, work_dir=work, resume=True, progress=False
    )
    expected, expected_log = out.read_bytes(), sorted(log.read_text().splitlines())
    parts = sorted(work.glob("part-?????.jsonl"))
    assert len(parts) == first.shards > 2
    parts[-1].unlink()  # as if the run had been killed while writing the last shard
    seen: list[tuple[int, bool]] = []
    second = curate_stream(
        inputs, out, log, chain, shard_rows=40, work_dir=work, resume=True, progress=False,
        on_shard=lambda k, reused: seen.append((k, reused)),
    )  # fmt: skip
    assert [k for k, reused in seen if not reused] == [first.shards - 1]
    assert second.shards_reused == first.shards - 1
    assert out.read_bytes() == expected
    assert sorted(log.read_text().splitlines()) == expected_log
    assert _plain(second.stats) == _plain(first.stats)


def test_stream_resume_starts_afresh_when_settings_change(mixed, tmp_path):
    _, inputs, _ = mixed
    out, work = tmp_path / "out.jsonl", tmp_path / "work"
    curate_stream(inputs, out, "", "dedup", shard_rows=40, work_dir=work, resume=True,
                  progress=False)  # fmt: skip
    s = curate_stream(inputs, out, "", "dedup", shard_rows=30, work_dir=work, resume=True,
                      progress=False)  # fmt: skip
    assert s.shards_reused == 0


def test_stream_resume_writes_a_dropped_log_the_first_run_did_not(mixed, tmp_path):
    _, inputs, rows = mixed
    chain = "dedup,hard,normalize"
    out, log, work = tmp_path / "out.jsonl", tmp_path / "d.jsonl", tmp_path / "work"
    first = curate_stream(
        inputs, out, "", chain, shard_rows=40, work_dir=work, resume=True, progress=False
    )
    second = curate_stream(
        inputs, out, log, chain, shard_rows=40, work_dir=work, resume=True, progress=False
    )
    assert second.rows_out == first.rows_out
    assert len(log.read_text().splitlines()) == len(rows) - second.rows_out
