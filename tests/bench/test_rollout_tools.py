"""bench/rollout_tools.py's tool-using workload and lean-transport parts run end to end at a
tiny scale; their figures are consistent (no target is asserted: that is the bench's job);
and the bare loop refuses a run that did less work than the scripted one."""

from __future__ import annotations

import pytest

from .conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    with load_bench("rollout_tools") as module:
        yield module


@pytest.mark.slow
def test_tool_workload(bench):
    (row,) = bench.bench_tools(5.0, [6], 4, 1)
    assert row["model_calls"] == 12 and row["ideal_calls_per_s"] == 800.0
    for name in ("bare", "ours", "ours_threaded", "ours_lean"):
        assert 0 < row[f"{name}_fraction_of_ideal"] <= 1
        assert row[f"{name}_cpu_ms_per_call"] > 0 and len(row["wall_s"][name]) == 1
    assert row["ours_vs_bare"] == pytest.approx(
        row["ours_calls_per_s"] / row["bare_calls_per_s"], rel=0.02
    )
    # One round: its ratio is the median and the best-run ratio alike.
    walls = row["wall_s"]
    assert row["ours_vs_bare_rounds"] == [pytest.approx(walls["bare"][0] / walls["ours"][0], 0.02)]
    assert row["ours_vs_bare_median_round"] == pytest.approx(row["ours_vs_bare"], rel=0.02)
    assert len(row["cpu_ms_per_call"]["ours"]) == 1 and len(row["load_average_1m"]) == 2


@pytest.mark.slow
def test_lean_part(bench):
    result = bench.bench_lean(5.0, 6, 4, 1)
    assert result["model_calls"] == 12
    assert result["lean_cpu_vs_sdk_cpu"] == pytest.approx(
        result["ours_lean_cpu_ms_per_call"] / result["ours_sdk_cpu_ms_per_call"], rel=0.02
    )
    assert set(result["server_cpu_ms_per_call"]) == {"bare_sdk", "ours_sdk", "ours_lean"}


@pytest.mark.slow
def test_the_bare_loop_and_ours_do_the_same_work(bench, chat_server):
    import asyncio

    from twinkle.testing.openai_server import weather

    chat_server.responder = weather(1)
    asyncio.run(bench.bare_loop(chat_server.base_url, 2, 2))
    bare = [r["messages"] for r in chat_server.requests]
    chat_server.requests.clear()
    bench.ours(chat_server.base_url, 2, 2, "lean", bench.Weather())
    ours = [r["messages"] for r in chat_server.requests]
    assert len(bare) == len(ours) == 4
    # The same history each call, up to the ids the server hands out.
    for a, b in zip(sorted(bare, key=str), sorted(ours, key=str)):
        assert [m["role"] for m in a] == [m["role"] for m in b]
        assert [m.get("content") or "" for m in a] == [m.get("content") or "" for m in b]


@pytest.mark.parametrize(
    "tool_turns, match",
    [(0, "2 model calls .expected 2 rows x 2., 2 answered"), (2, "4 model calls .*, 0 answered")],
)
def test_the_bare_loop_refuses_less_work(bench, chat_server, tool_turns, match):
    import asyncio

    from twinkle.testing.openai_server import weather

    # An answer at once (1 call a row), or no answer within the 2 calls: not the scripted work.
    chat_server.responder = weather(tool_turns)
    with pytest.raises(RuntimeError, match=match):
        asyncio.run(bench.bare_loop(chat_server.base_url, 2, 2))
