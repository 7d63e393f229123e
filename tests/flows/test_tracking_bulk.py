"""twinkle.tracking.bulk against real MLflow SQLite stores: the bulk path stores what ``start_trace`` stores."""

from __future__ import annotations

import time
from pathlib import Path

from twinkle.tracking import MLflowTracker, TraceWriter, build_spans
from twinkle.tracking.bulk import start_traces

_NOW = time.time_ns()


def _trajectory(i: int, failed: bool = False) -> dict:
    now = _NOW + i * 1_000_000
    return {
        "id": f"row-{i}", "stop_reason": "api_error" if failed else "stop", "turns": 1,
        "error": "endpoint down" if failed else None,
        "messages": [{"role": "user", "content": f"say {i}"}, {"role": "assistant", "content": str(i)}],
        "turn_log": [{"type": "llm", "turn": 1, "start_ns": now - 1_000_000_000, "latency_s": 0.25,
                      "prompt_tokens": 5, "completion_tokens": 1, "finish_reason": "stop"}],
    }


def _store(tmp: Path, name: str):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp}/{name}.db"
    eid = MLflowTracker(uri, "bulk", str(tmp / f"{name}-art")).experiment_id
    return uri, eid, MlflowClient(uri)._tracking_client.store


def _infos(uri: str, eid: str, n: int) -> tuple[TraceWriter, list]:
    writer = TraceWriter(uri, eid, "session-1", run_id=None, dataset="unit")
    out = []
    for i in range(n):
        traj = _trajectory(i, failed=(i == 1))
        reward = {"total": float(i % 2), "judge": None, "label": "ok"}
        out.append(writer._entities(writer.trace_id_for(f"k{i}"), f"k{i}", traj, build_spans(traj), reward))
    return writer, out


def _view(info) -> dict:
    """Everything a reader of the trace sees, minus what names its own store (artifact path)."""
    return {
        "tags": {k: v for k, v in info.tags.items() if k != "mlflow.artifactLocation"},
        "artifact_suffix": info.tags["mlflow.artifactLocation"].rsplit("/", 3)[-3:],
        "metadata": dict(info.trace_metadata), "state": info.state, "request_time": info.request_time,
        "duration": info.execution_duration, "previews": (info.request_preview, info.response_preview),
        "client_request_id": info.client_request_id,
        "assessments": sorted((a.name, getattr(a, "value", None), a.error.error_code if a.error else None,
                               a.source.source_type) for a in info.assessments),
    }


def test_bulk_rows_read_back_like_start_trace_rows(tmp_path):
    from mlflow import MlflowClient

    uri_a, eid_a, store_a = _store(tmp_path, "a")
    uri_b, eid_b, store_b = _store(tmp_path, "b")
    _, infos_a = _infos(uri_a, eid_a, 3)
    _, infos_b = _infos(uri_b, eid_b, 3)
    assert start_traces(store_a, eid_a, [i for i, _ in infos_a]) == "bulk"
    for info, _ in infos_b:
        store_b.start_trace(info)
    for (info_a, spans_a), (info_b, spans_b) in zip(infos_a, infos_b):
        store_a.log_spans(eid_a, spans_a)
        store_b.log_spans(eid_b, spans_b)
    for (info_a, _), (info_b, _) in zip(infos_a, infos_b):
        got_a = MlflowClient(uri_a).get_trace(info_a.trace_id)
        got_b = MlflowClient(uri_b).get_trace(info_b.trace_id)
        assert _view(got_a.info) == _view(got_b.info)
        assert [s.name for s in got_a.data.spans] == [s.name for s in got_b.data.spans]
    # Sessions and search filters (promoted columns) agree too.
    for uri, eid in ((uri_a, eid_a), (uri_b, eid_b)):
        found = MlflowClient(uri).search_traces(locations=[eid], filter_string="tag.status = 'failed'")
        assert [t.info.tags["twinkle.trace_key"] for t in found] == ["k1"]
        assert {t.info.trace_metadata.get("mlflow.trace.session")
                for t in MlflowClient(uri).search_traces(locations=[eid])} == {"session-1"}


def test_bulk_meets_an_existing_trace_and_merges_one_by_one(tmp_path):
    from mlflow import MlflowClient

    uri, eid, store = _store(tmp_path, "c")
    _, infos = _infos(uri, eid, 4)
    store.start_trace(infos[2][0])  # another writer got there first
    assert start_traces(store, eid, [i for i, _ in infos]) == "per-trace"
    store.log_spans(eid, [s for _, spans in infos for s in spans])
    traces = MlflowClient(uri).search_traces(locations=[eid], max_results=100)
    assert sorted(t.info.tags["twinkle.trace_key"] for t in traces) == ["k0", "k1", "k2", "k3"]


def test_stores_without_sql_rows_get_start_trace_calls():
    class RecordingStore:  # stands in for a REST or file store: only the public entity API
        def __init__(self):
            self.started = []

        def start_trace(self, info):
            self.started.append(info)

    store = RecordingStore()
    assert start_traces(store, "1", ["a", "b"]) == "per-trace" and store.started == ["a", "b"]
    assert start_traces(store, "1", []) == "none"
