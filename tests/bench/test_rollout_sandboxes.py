"""bench/rollout_sandboxes.py runs end to end at a tiny scale: more rows than the server
allows sandboxes, none failed, the live count never above the concurrency."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rollout_sandboxes.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("twinkle_bench_rollout_sandboxes", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_more_rows_than_max_sandboxes(bench):
    out = bench.run(rows=48, concurrency=6, max_sandboxes=8)
    assert out["failed"] == 0 and out["stop_reasons"] == {"stop": 48}, out
    assert 1 <= out["peak_live_sandboxes"] <= 6 and out["ok"] is True
    assert out["seconds"] > 0 and out["provision_s_summed"] > 0
