"""bench/sandbox_soak.py at a tiny scale: a server in its own process, several sandboxes
running mixed commands and file operations, every operation checked, no error; and its
guards: failed operations are no latency samples, and any error refuses the ratio."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from .conftest import BENCH_DIR, load_bench

BENCH = BENCH_DIR / "sandbox_soak.py"


@pytest.fixture(scope="module")
def bench():
    with load_bench("sandbox_soak") as module:
        yield module


class _WrongBox:
    """A sandbox whose every operation but a file write answers wrong."""

    def __init__(self):
        self.commands, self.files = self, self

    async def run(self, command):
        return type("Result", (), {"stdout": "wrong\n"})()

    async def write(self, path, data):
        pass

    async def read(self, path):
        return "wrong"

    async def list(self, path):
        return []


def test_failed_operations_are_no_latency_samples(bench):
    lat, errors = [], []
    n = asyncio.run(bench.worker(_WrongBox(), time.perf_counter() + 0.05, 0, lat, errors))
    writes = sum(bench.OPS[i % len(bench.OPS)] == "write" for i in range(n))
    assert n >= len(bench.OPS) and len(lat) == writes and len(errors) == n - writes


def test_any_error_refuses_the_ratio(bench):
    clean = {"errors": 0, "first_errors": []}
    bench.require_clean(clean, clean)
    failed = {"errors": 1, "first_errors": ["echo: wrong result"]}
    for baseline, loaded in ((failed, clean), (clean, failed)):
        with pytest.raises(RuntimeError, match="echo: wrong result"):
            bench.require_clean(baseline, loaded)


@pytest.mark.slow
def test_soak_runs_mixed_operations_without_errors():
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--sandboxes",
            "6",
            "--seconds",
            "3",
            "--kill-files",
            "5000",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    report = json.loads(out.stdout)
    soak = report["soak"]
    assert soak["sandboxes"] == 6 and soak["errors"] == 0, soak["first_errors"]
    # Every sandbox ran the whole rotation at least once.
    assert soak["operations"] >= 6 * 5
    assert 0 < soak["op_ms_p50"] <= soak["op_ms_p99"] < 60_000
    assert 0 < soak["server_peak_rss_mb"] < 2048 and report["target_zero_errors"] is True
    stall = report["kill_stall"]
    assert (
        stall["files"] == 5000
        and 0 < stall["other_command_ms_p50"] <= stall["other_command_ms_p99"]
    )
