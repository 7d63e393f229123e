"""bench/sandbox_soak.py at a tiny scale: a server in its own process, several sandboxes
running mixed commands and file operations, every operation checked, no error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sandbox_soak.py"


def test_soak_runs_mixed_operations_without_errors():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--sandboxes", "6", "--seconds", "3", "--kill-files", "5000"],
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
