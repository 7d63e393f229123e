"""bench/rollout_sandboxes.py runs end to end at a tiny scale: more rows than the server
allows sandboxes, none failed, the live count never above the concurrency; and the rate
counts successful trajectories only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from .conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    with load_bench("rollout_sandboxes") as module:
        yield module


def test_the_rate_counts_successful_trajectories_only(bench):
    def result(trajectories, failed):
        return SimpleNamespace(
            trajectories=[{}] * trajectories, stats=SimpleNamespace(failed=failed)
        )

    assert bench.succeeded(result(10, 0), 10) == 10
    assert bench.succeeded(result(10, 3), 10) == 7
    with pytest.raises(RuntimeError, match="9 trajectories for 10 rows"):
        bench.succeeded(result(9, 0), 10)


@pytest.mark.slow
def test_more_rows_than_max_sandboxes(bench):
    out = bench.run(rows=48, concurrency=6, max_sandboxes=8)
    assert out["failed"] == 0 and out["stop_reasons"] == {"stop": 48}, out
    assert 1 <= out["peak_live_sandboxes"] <= 6 and out["ok"] is True
    assert out["seconds"] > 0 and out["provision_s_summed"] > 0
