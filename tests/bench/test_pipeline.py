"""bench/pipeline.py's parts run end to end at a tiny scale and report what they measured.

The figures themselves are the benchmark's business (no target is asserted here), but each
part must do the work it claims to time (same rows, same trajectories, same traces on both
sides of a comparison) and report figures that are consistent with each other and sane.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from .conftest import load_bench

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench():
    with load_bench("pipeline") as module:
        yield module


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_overhead_part_times_the_same_work_direct_and_as_a_flow(bench, prefect_api, tmp_path):
    n_rows, n_traj = 40, 2
    out = bench.bench_overhead(
        tmp_path, n_rows=n_rows, n_traj=n_traj, concurrency=2, repeats=1, cold_first="untraced"
    )

    # Both sides curated the same rows and replayed the same trajectories, all reproduced.
    curated = rows(tmp_path / "base1" / "curated.jsonl")
    dropped = rows(tmp_path / "base1" / "d1.jsonl") + rows(tmp_path / "base1" / "d2.jsonl")
    assert 0 < len(curated) < n_rows and len(curated) + len(dropped) == n_rows
    flow_curated = rows(tmp_path / "flow1" / "latest" / "curated" / "examples.jsonl")
    assert [r["id"] for r in flow_curated] == [r["id"] for r in curated]
    direct = rows(tmp_path / "base1" / "scored.jsonl")
    flow = rows(tmp_path / "flow1" / "latest" / "trajectories" / "examples.scored.jsonl")
    assert len(direct) == len(flow) == n_traj
    assert sorted(r["id"] for r in flow) == sorted(r["id"] for r in direct)
    assert all(r["rewards"]["fidelity"] == 1.0 for r in direct + flow)

    assert out["rows"] == n_rows and out["rounds"] == 1
    assert out["trajectories"] == out["traces"] == n_traj
    runs = ("stages_direct_runs_s", "flow_runs_s", "flow_untraced_runs_s")
    assert all(len(out[k]) == 1 and out[k][0] > 0 for k in runs)
    # One warm round: its paired ratio is the median, and it is the flow time over the direct.
    assert out["overhead_ratio_runs"] == [out["overhead_ratio"]]
    # The run times are reported rounded, so the ratio rebuilt from them agrees only to a few %.
    assert out["overhead_ratio"] == pytest.approx(
        out["flow_runs_s"][0] / out["stages_direct_runs_s"][0] - 1, rel=0.05, abs=0.05
    )
    for key in (
        "overhead_ratio",
        "overhead_untraced_ratio",
        "overhead_ratio_fastest_runs",
        "overhead_vs_inprocess_server_ratio",
    ):
        assert -1 < out[key] < 100, key
    assert out["target_ratio"] == 0.15 and isinstance(out["ok"], bool)

    cold = out["cold_round"]
    assert cold.pop("first_flow") == "untraced"
    assert set(cold) == {
        "stages_direct_s",
        "flow_s",
        "overhead_ratio",
        "flow_untraced_s",
        "overhead_untraced_ratio",
    }
    assert cold["stages_direct_s"] > 0 and cold["flow_s"] > 0 and cold["flow_untraced_s"] > 0
    assert -1 < cold["overhead_ratio"] < 100 and -1 < cold["overhead_untraced_ratio"] < 100
    # The cold untraced flow ran first: its traced twin ran after it, in a warm process.
    assert (tmp_path / "flow-untraced0").stat().st_mtime < (tmp_path / "flow0").stat().st_mtime
    median = out["median_round"]
    assert median["flow_s"] == out["flow_runs_s"][0]
    assert median["stages_direct_s"] == out["stages_direct_runs_s"][0]
    # The parts add up to the whole (to the rounding of each figure).
    parts = median["direct_parts_s"]
    assert set(parts) == {"curation_s", "provision_s", "rollout_s"}
    assert all(v >= 0 for v in parts.values())
    assert parts["curation_s"] + parts["rollout_s"] == pytest.approx(
        median["stages_direct_s"], abs=0.02
    )
    assert parts["provision_s"] <= parts["rollout_s"] + 0.01
    flow_parts = median["flow_parts_s"]
    assert set(flow_parts) == {
        "curation_s",
        "rollout_stage_s",
        "provision_s",
        "rollout_s",
        "trace_write_s",
    }
    assert all(v >= 0 for v in flow_parts.values())
    assert flow_parts["curation_s"] + flow_parts["rollout_stage_s"] <= median["flow_s"] + 0.02
    assert median["trace_write_wall_ms_per_trace"] >= 0
    assert out["mlflow_store_setup_s"] > 0 and out["stages_direct_inprocess_server_s"] > 0


def test_overhead_part_can_trace_into_a_server_too(bench, prefect_api, tmp_path):
    from mlflow import MlflowClient

    from twinkle.testing.mlflow_server import MLflowServer

    with MLflowServer(f"sqlite:///{tmp_path}/srv.db", str(tmp_path / "srv-art")) as server:
        out = bench.bench_overhead(
            tmp_path, n_rows=40, n_traj=2, concurrency=2, repeats=1, server_uri=server.uri
        )
    assert len(out["flow_server_runs_s"]) == len(out["overhead_server_ratio_runs"]) == 1
    direct = out["stages_direct_runs_s"][0]
    # Against the direct run of its round (times rounded to 10 ms: a tiny run moves more).
    assert out["overhead_server_ratio"] == pytest.approx(
        out["flow_server_runs_s"][0] / direct - 1, rel=0.05
    )
    client = MlflowClient(f"sqlite:///{tmp_path}/srv.db")
    exp = client.get_experiment_by_name("twinkle").experiment_id
    # Two flows traced into the server (round 0 and round 1), two trajectories each.
    assert len(client.search_traces(locations=[exp], filter_string="span.type = 'LLM'")) == 4


def test_tracing_part_times_traced_and_untraced_rollout_flows(bench, prefect_api, tmp_path):
    n_traj = 2
    out = bench.bench_tracing(tmp_path, n_traj=n_traj, concurrency=2, rounds=1)

    assert out["trajectories"] == out["traces"] == n_traj
    assert out["spans"] >= 4 * n_traj  # at least one span per model call (4 turns each)
    for label in ("untraced", "traced"):
        scored = rows(
            tmp_path / f"tracing-{label}" / "latest" / "trajectories" / "examples.scored.jsonl"
        )
        assert len(scored) == n_traj and all(r["turns"] == 4 for r in scored)
    assert out["endpoint_delay_ms"] == 200
    # One run of each; a rollout flow waits for its four 200 ms replies at least.
    assert set(out["runs_s"]) == {"untraced", "traced"}
    assert all(4 * 0.2 <= s < 600 for s in out["runs_s"].values())
    assert out["rollout_flow_untraced_s"] == out["runs_s"]["untraced"]
    assert out["rollout_flow_traced_s"] == out["runs_s"]["traced"]
    assert out["tracing_added_ratio"] == out["tracing_added_ratio_median"]
    assert out["tracing_added_ratio"] == pytest.approx(
        out["rollout_flow_traced_s"] / out["rollout_flow_untraced_s"] - 1, abs=0.01
    )
    assert -1 < out["tracing_added_ratio"] < 100
    assert out["target_ratio"] == 0.10 and isinstance(out["ok"], bool)
    assert out["write_cost_per_trace_ms"] > 0
    assert 0 < out["write_cost_per_span_ms"] <= out["write_cost_per_trace_ms"]
    assert len(out["tail_s"]) == 1 and 0 <= out["tail_s"][0] <= out["rollout_flow_traced_s"]


def test_tracing_part_against_a_server_sends_traces_to_its_otlp_endpoint(
    bench, prefect_api, tmp_path
):
    from mlflow import MlflowClient

    out = bench.bench_tracing(tmp_path, n_traj=2, concurrency=2, rounds=1, store="server")
    assert out["store"] == "server" and out["mlflow_server_start_s"] > 0
    assert out["trajectories"] == out["traces"] == 2
    client = MlflowClient(f"sqlite:///{tmp_path}/server.db")
    exp = client.get_experiment_by_name("twinkle")
    found = client.search_traces(locations=[exp.experiment_id], filter_string="span.type = 'LLM'")
    assert len(found) == 2  # span types read back as MLflow writes them
    # Sent to the OTLP endpoint, the run is linked by a header: MLflow's client export would
    # have put it in each trace's metadata.
    assert not any("mlflow.sourceRun" in t.info.trace_metadata for t in found)
    runs = [r.info.run_id for r in client.search_runs([exp.experiment_id])]
    linked = [len(client.search_traces(locations=[exp.experiment_id], run_id=r)) for r in runs]
    assert 2 in linked  # the traced flow's run shows its traces


def test_trace_write_part_counts_the_traces_it_wrote(bench, tmp_path):
    n_traj, batch = 8, 4
    out = bench.bench_trace_write(tmp_path, n_traj=n_traj, batch=batch)

    # The store holds the two warm-up traces and the timed ones, with their spans.
    with sqlite3.connect(tmp_path / "trace-write.db") as db:
        traces = db.execute("SELECT count(*) FROM trace_info").fetchone()[0]
        spans = db.execute("SELECT count(*) FROM spans").fetchone()[0]
    assert traces == n_traj + 2

    assert out["traces"] == n_traj and out["batch"] == batch
    assert 1 < out["spans_per_trace"] < 100  # a root span and its children
    assert spans >= round(out["spans_per_trace"] * n_traj)
    assert out["cpu_ms_per_trace"] > 0 and out["wall_ms_per_trace"] > 0
    assert out["traces_per_cpu_s"] == pytest.approx(1000 / out["cpu_ms_per_trace"], rel=0.05)


def test_figures_are_refused_when_runs_did_unequal_work(bench):
    ok, failing = {"trajectories": 3, "failed": 0}, {"trajectories": 3, "failed": 2}
    bench.check_same_work([ok, {**ok, "curated": 9}, {**ok, "curated": 9}], 3)
    with pytest.raises(RuntimeError, match="unequal work"):  # one side failed trajectories
        bench.check_same_work([ok, failing], 3)
    with pytest.raises(RuntimeError, match="unequal work"):  # or rolled out fewer
        bench.check_same_work([{"trajectories": 2, "failed": 0}], 3)
    with pytest.raises(RuntimeError, match="curated rows"):  # or curated other rows
        bench.check_same_work([{**ok, "curated": 9}, {**ok, "curated": 8}], 3)
