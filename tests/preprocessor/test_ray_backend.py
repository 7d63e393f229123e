"""``twinkle curate --ray-address`` keeps exactly the rows of the single-process run.

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


def test_ray_run_keeps_the_same_rows_as_the_single_process_run(cluster, tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_ts", Path(__file__).with_name("test_stream.py"))
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    rows = ts._mixed_rows()
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
