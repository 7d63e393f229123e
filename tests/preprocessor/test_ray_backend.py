"""``twinkle curate --ray-address`` keeps exactly the rows of the single-process run, and a
killed or failed Ray run resumes at the chunk (finished chunks are not computed again).

The cluster is a head and two worker nodes started with ``ray start`` as separate processes
(``twinkle.testing.ray_local``), in a private temp dir with private ports; teardown ends
only those processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from twinkle.io import read_rows_list, write_rows
from twinkle.preprocessor.stream import curate_stream

pytestmark = pytest.mark.slow

CHAIN = "dedup,neardedup,hard,deadloop,normalize"


@pytest.fixture(scope="module")
def cluster():
    from twinkle.testing.ray_local import LocalRayCluster, pids_of

    c = LocalRayCluster(workers=2, cpus=1, head_cpus=0, object_store_mb=100).start()
    temp_dir = c.temp_dir
    try:
        yield c
    finally:
        c.stop()
    assert not pids_of(temp_dir)  # every process of this cluster ended, no other touched


def _log(path):
    return Counter(
        (r["step"], r["reason"], r["row"].get("id"))
        for r in map(json.loads, path.read_text().splitlines())
    )


def _mixed_rows():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_ts", Path(__file__).with_name("test_stream.py"))
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    return ts._mixed_rows()


def test_ray_run_keeps_the_same_rows_as_the_single_process_run(cluster, tmp_path):
    rows = _mixed_rows()
    (tmp_path / "in").mkdir()
    write_rows(tmp_path / "in" / "a.jsonl", rows[:120])
    write_rows(tmp_path / "in" / "b.parquet", rows[120:])
    inputs = [str(tmp_path / "in")]
    local = curate_stream(
        inputs, tmp_path / "local.jsonl", tmp_path / "local-dropped.jsonl", CHAIN,
        batch_size=32, progress=False,
    )  # fmt: skip
    proc = subprocess.run(
        [
            sys.executable, "-m", "twinkle", "curate", *inputs,
            "-o", str(tmp_path / "ray.jsonl"), "--dropped", str(tmp_path / "ray-dropped.jsonl"),
            "--filters", CHAIN, "--batch-size", "32", "--ray-address", cluster.address, "-q",
        ],
        env=cluster.env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    kept_local = read_rows_list(tmp_path / "local.jsonl")
    kept_ray = read_rows_list(tmp_path / "ray.jsonl")
    assert [r.get("id") for r in kept_ray] == [r.get("id") for r in kept_local]
    assert kept_ray == kept_local
    assert _log(tmp_path / "ray-dropped.jsonl") == _log(tmp_path / "local-dropped.jsonl")
    assert f"wrote {local.rows_out} rows" in proc.stdout
    for step in local.stats.steps.values():  # the summary table: same counts per step
        assert step.step in proc.stdout
    assert len(kept_local) + sum(_log(tmp_path / "local-dropped.jsonl").values()) == len(rows)


_DRIVER = """
import json, os, sys
from twinkle.preprocessor.ray_backend import curate_ray

args = json.loads(sys.argv[1])
seen = []


def on_shard(i, reused):
    seen.append([i, reused])
    if args["die_after"] and sum(not r for _, r in seen) >= args["die_after"]:
        os._exit(3)  # the driver is killed: no cleanup, no summary


s = curate_ray(
    args["inputs"], args["out"], args["dropped"], args["chain"], address=args["address"],
    work_dir=args["work"], resume=True, chunk_bytes=args["chunk"], batch_size=8,
    on_shard=on_shard,
)
print(json.dumps({"seen": seen, "summary": s.as_dict()}))
"""

RESUME_CHAIN = "dedup,neardedup,hard,deadloop,intent,normalize"


def _markers(work):
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in work.rglob("*.done")}


def _settled_markers(work, quiet_s=3.0, limit_s=60.0):
    """The markers once no new one has appeared for ``quiet_s``: a task the killed driver
    had started may still finish on a worker and write its marker after the driver died."""
    import time

    seen, since, start = _markers(work), time.monotonic(), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() - start < limit_s:
        time.sleep(0.5)
        now = _markers(work)
        if now != seen:
            seen, since = now, time.monotonic()
    return seen


def test_a_killed_ray_run_resumes_at_the_chunk_and_keeps_the_same_rows(cluster, tmp_path):
    import os

    from twinkle.preprocessor.ray_steps import _chunks

    src = tmp_path / "in.jsonl"
    write_rows(src, _mixed_rows())
    clean = curate_stream(
        str(src), tmp_path / "clean.jsonl", tmp_path / "clean-dropped.jsonl", RESUME_CHAIN,
        batch_size=8, progress=False,
    )  # fmt: skip
    work = tmp_path / "work"
    args = {"inputs": [str(src)], "out": str(tmp_path / "ray.jsonl"), "chain": RESUME_CHAIN,
            "dropped": str(tmp_path / "ray-dropped.jsonl"), "address": cluster.address,
            "work": str(work), "chunk": 40_000, "die_after": 0}  # fmt: skip

    def drive(**kw):
        return subprocess.run(
            [sys.executable, "-c", _DRIVER, json.dumps({**args, **kw})], env=cluster.env,
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip

    # Run 1 fails on the last chunk: its last line is broken (same size, same mtime after).
    data, st = src.read_bytes(), src.stat()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    src.write_bytes(data[:cut] + b"#" + data[cut + 1 :])
    assert drive().returncode != 0
    src.write_bytes(data)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    after_fail = _markers(work)
    chunks = sorted(k for k in after_fail if k.startswith("seg0/chunk-"))
    n_chunks = len(_chunks([str(src)], args["chunk"]))
    assert n_chunks >= 4
    assert chunks and len(chunks) < n_chunks  # finished chunks recorded, the broken one not
    # Run 2 is killed once it has computed one more chunk of the last pass.
    assert drive(die_after=1).returncode == 3
    before = _settled_markers(work)
    assert len(before) > len(after_fail)
    proc = drive()
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    after = _markers(work)
    for name, mtime in before.items():  # finished chunks were not computed again
        assert after[name] == mtime, name
    done_last = {int(k[-10:-5]) for k in before if k.startswith("seg1/chunk-")}
    assert {i for i, reused in res["seen"] if reused} == done_last
    assert len(res["seen"]) == len({k for k in after if k.startswith("seg1/chunk-")})
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "clean.jsonl").read_bytes()
    assert _log(tmp_path / "ray-dropped.jsonl") == _log(tmp_path / "clean-dropped.jsonl")
    summary, reference = res["summary"], clean.as_dict()
    assert summary["rows_in"] == summary["rows_out"] + sum(
        _log(tmp_path / "ray-dropped.jsonl").values()
    )
    assert summary["shards_reused"] == len(done_last)
    # The same summary as the single-process run: keys, steps, counts and tags.
    assert summary.keys() == reference.keys()
    assert summary["tags"] == reference["tags"] and summary["tags"]["IntentClassifier"]

    def counts(d):
        return [{k: v for k, v in s.items() if k != "seconds"} for s in d["steps"]]

    assert counts(summary) == counts(reference)
    assert all(s["seconds"] > 0 for s in summary["steps"] if s["rows_in"])
