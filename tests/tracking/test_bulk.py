"""twinkle.tracking.bulk against real MLflow SQLite stores: the bulk path stores what
``start_trace`` + ``log_spans`` store."""

from __future__ import annotations

import time
from pathlib import Path

from twinkle.tracking import MLflowTracker, TraceWriter, build_spans
from twinkle.tracking.bulk import write_traces

_NOW = time.time_ns()


def _trajectory(i: int, failed: bool = False) -> dict:
    now = (
        _NOW + i * 1_000_000 - (3 * 86400 * 10**9 if i == 2 else 0)
    )  # an old one: rollups queue its day
    return {
        "id": f"row-{i}",
        "stop_reason": "api_error" if failed else "stop",
        "turns": 1,
        "error": "endpoint down" if failed else None,
        "messages": [
            {"role": "user", "content": f"say {i}"},
            {"role": "assistant", "content": str(i)},
        ],
        "turn_log": [
            {
                "type": "llm",
                "turn": 1,
                "start_ns": now - 1_000_000_000,
                "latency_s": 0.25,
                "prompt_tokens": 5,
                "completion_tokens": 1,
                "finish_reason": "stop",
            }
        ],
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
        out.append(
            writer._entities(writer.trace_id_for(f"k{i}"), f"k{i}", traj, build_spans(traj), reward)
        )
    return writer, out


def _view(info) -> dict:
    """Everything a reader of the trace sees, minus what names its own store (artifact path)."""
    return {
        "tags": {k: v for k, v in info.tags.items() if k != "mlflow.artifactLocation"},
        "artifact_suffix": info.tags["mlflow.artifactLocation"].rsplit("/", 3)[-3:],
        "metadata": dict(info.trace_metadata),
        "state": info.state,
        "request_time": info.request_time,
        "duration": info.execution_duration,
        "previews": (info.request_preview, info.response_preview),
        "client_request_id": info.client_request_id,
        "assessments": sorted(
            (
                a.name,
                getattr(a, "value", None),
                a.error.error_code if a.error else None,
                a.source.source_type,
            )
            for a in info.assessments
        ),
        "token_usage": info.token_usage,
    }


def test_bulk_rows_read_back_like_start_trace_and_log_spans_rows(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv(
        "MLFLOW_SQL_TRACE_ROLLUPS_ENABLED", "true"
    )  # opt-in: its rebuild queue is compared too

    uri_a, eid_a, store_a = _store(tmp_path, "a")
    uri_b, eid_b, store_b = _store(tmp_path, "b")
    _, infos_a = _infos(uri_a, eid_a, 3)
    _, infos_b = _infos(uri_b, eid_b, 3)
    assert write_traces(store_a, eid_a, infos_a) == "bulk"
    for info, _ in infos_b:
        store_b.start_trace(info)
    store_b.log_spans(eid_b, [s for _, spans in infos_b for s in spans])
    for (info_a, _), (info_b, _) in zip(infos_a, infos_b):
        got_a = MlflowClient(uri_a).get_trace(info_a.trace_id)
        got_b = MlflowClient(uri_b).get_trace(info_b.trace_id)
        assert _view(got_a.info) == _view(got_b.info)
        assert got_a.info.token_usage == {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}
        assert [s.to_dict() for s in got_a.data.spans] == [s.to_dict() for s in got_b.data.spans]
        assert len(got_a.data.spans) == 2
    # Sessions, search filters (promoted columns) and span-content search agree too.
    for uri, eid in ((uri_a, eid_a), (uri_b, eid_b)):
        found = MlflowClient(uri).search_traces(
            locations=[eid], filter_string="tag.status = 'failed'"
        )
        assert [t.info.tags["twinkle.trace_key"] for t in found] == ["k1"]
        assert {
            t.info.trace_metadata.get("mlflow.trace.session")
            for t in MlflowClient(uri).search_traces(locations=[eid])
        } == {"session-1"}
        found = MlflowClient(uri).search_traces(locations=[eid], filter_string="span.type = 'LLM'")
        assert len(found) == 3
    # The rows no read API shows: every table's row count, payload generations, token
    # columns, span rows, metadata rows, and the rollup rebuild queue.
    import sqlite3

    def hidden(uri: str) -> dict:
        db = sqlite3.connect(uri.removeprefix("sqlite:///"))
        try:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            out = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
            out["trace_info"] = db.execute(
                "SELECT request_id, timestamp_ms, execution_time_ms, status, "
                "db_payload_generation, session_id, trace_name, input_tokens, output_tokens, "
                "total_tokens "
                "FROM trace_info ORDER BY request_id"
            ).fetchall()
            out["spans"] = db.execute("SELECT * FROM spans ORDER BY trace_id, span_id").fetchall()
            out["trace_request_metadata"] = db.execute(
                "SELECT * FROM trace_request_metadata ORDER BY request_id, key"
            ).fetchall()
            out["sql_trace_rollup_rebuild_queue"] = sorted(
                db.execute("SELECT * FROM sql_trace_rollup_rebuild_queue").fetchall()
            )
        finally:
            db.close()
        return out

    assert hidden(uri_a) == hidden(uri_b)
    assert hidden(uri_a)["sql_trace_rollup_rebuild_queue"]  # the old trace's day is queued


def test_unfinished_traces_without_previews_get_them_from_the_root_span_as_log_spans_does(tmp_path):
    from mlflow import MlflowClient
    from mlflow.entities.trace_state import TraceState

    stores = [_store(tmp_path, "e"), _store(tmp_path, "f")]
    written = []
    for uri, eid, _ in stores:
        _, infos = _infos(uri, eid, 2)
        for info, _ in infos:
            info.state, info.request_preview, info.response_preview = (
                TraceState.IN_PROGRESS,
                None,
                None,
            )
        written.append(infos)
    (uri_a, eid_a, store_a), (uri_b, eid_b, store_b) = stores
    assert write_traces(store_a, eid_a, written[0]) == "bulk"
    for info, _ in written[1]:
        store_b.start_trace(info)
    store_b.log_spans(eid_b, [s for _, spans in written[1] for s in spans])
    for (info_a, _), (info_b, _) in zip(*written):
        got_a = MlflowClient(uri_a).get_trace(info_a.trace_id).info
        got_b = MlflowClient(uri_b).get_trace(info_b.trace_id).info
        assert _view(got_a) == _view(got_b)
        assert got_a.state in (TraceState.OK, TraceState.ERROR) and got_a.request_preview


def test_bulk_meets_an_existing_trace_and_merges_one_by_one(tmp_path):
    from mlflow import MlflowClient

    uri, eid, store = _store(tmp_path, "c")
    _, infos = _infos(uri, eid, 4)
    store.start_trace(infos[2][0])  # another writer got there first
    assert write_traces(store, eid, infos) == "per-trace"
    traces = MlflowClient(uri).search_traces(locations=[eid], max_results=100)
    assert sorted(t.info.tags["twinkle.trace_key"] for t in traces) == ["k0", "k1", "k2", "k3"]
    assert all(len(MlflowClient(uri).get_trace(t.info.trace_id).data.spans) == 2 for t in traces)


def test_spans_with_data_only_log_spans_derives_go_through_it(tmp_path):
    from mlflow import MlflowClient

    uri, eid, store = _store(tmp_path, "d")
    _, infos = _infos(uri, eid, 2)
    root = infos[1][1][0]
    root._span._attributes["mlflow.llm.cost"] = (
        '{"input_cost": 0.5, "output_cost": 0.25, "total_cost": 0.75}'
    )
    assert write_traces(store, eid, infos) == "per-trace"
    got = MlflowClient(uri).get_trace(infos[1][0].trace_id)
    assert got.info.cost == {"input_cost": 0.5, "output_cost": 0.25, "total_cost": 0.75}


def test_stores_without_sql_rows_get_start_trace_and_log_spans_calls():
    class RecordingStore:  # stands in for a REST or file store: only the public entity API
        def __init__(self):
            self.started, self.spans = [], []

        def start_trace(self, info):
            self.started.append(info)

        def log_spans(self, location, spans):
            self.spans.append((location, list(spans)))

    store = RecordingStore()
    assert write_traces(store, "1", [("a", ["s1", "s2"]), ("b", ["s3"])]) == "per-trace"
    assert store.started == ["a", "b"] and store.spans == [("1", ["s1", "s2", "s3"])]
    assert write_traces(store, "1", []) == "none"
