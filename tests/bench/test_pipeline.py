"""bench/pipeline.py's parts run end to end on a small scale and report what they measured
(the figures themselves are the benchmark's business: no timing is asserted here)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pipeline.py"


@pytest.fixture(scope="module")
def bench():
    # The script sets environment defaults for its own runs (e.g. Prefect's log level) at
    # import; they must not leak into later tests (Ray workers inherit this environment).
    saved = dict(os.environ)
    try:
        spec = importlib.util.spec_from_file_location("twinkle_bench_pipeline", BENCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module


def test_overhead_part_compares_paired_rounds(bench, prefect_api, tmp_path):
    out = bench.bench_overhead(tmp_path, n_rows=300, n_traj=6, concurrency=4, repeats=1)
    assert out["rounds"] == 1 and out["trajectories"] == 6 and out["traces"] == 6
    assert (
        len(out["overhead_ratio_runs"]) == 1
        and out["overhead_ratio"] == out["overhead_ratio_runs"][0]
    )
    assert set(out["cold_round"]) == {"stages_direct_s", "flow_s", "overhead_ratio"}
    parts = out["median_round"]
    assert (
        parts["flow_s"] == out["flow_runs_s"][0]
        and parts["stages_direct_s"] == out["stages_direct_runs_s"][0]
    )
    assert isinstance(out["ok"], bool)


def test_tracing_and_trace_write_parts_count_what_they_wrote(bench, prefect_api, tmp_path):
    tracing = bench.bench_tracing(tmp_path, n_traj=4, concurrency=4)
    assert tracing["trajectories"] == 4 and tracing["traces"] == 4 and tracing["spans"] > 4
    assert len(tracing["runs_s"]) == 6
    written = bench.bench_trace_write(tmp_path, n_traj=16, batch=8)
    assert written["traces"] == 16 and written["speedup"] > 0
