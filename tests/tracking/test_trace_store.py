"""TraceWriter against a real MLflow SQLite store, and against a real ``mlflow server`` over
that kind of store (traces sent to its OTLP endpoint, ``twinkle.tracking.otlp``), through
MLflow's public API only: what the public read API returns is what ``build_spans`` built
(span tree, types, payloads, timings, status, attributes), with the trace's tags, metadata,
session, state, token usage, feedback (values, rationales, errors), run link and search
filters."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from twinkle.testing.mlflow_server import MLflowServer
from twinkle.tracking import MLflowTracker, TraceWriter, build_spans

_NOW = time.time_ns()
REPO = Path(__file__).resolve().parents[2]


def _trajectory(i: int, failed: bool = False) -> dict:
    now = _NOW + i * 1_000_000 - (3 * 86400 * 10**9 if i == 2 else 0)  # an old one too
    return {
        "id": f"row-{i}",
        "stop_reason": "api_error" if failed else "stop",
        "turns": 1,
        "error": "endpoint down" if failed else None,
        "reward_outcome": "failed" if failed else "correct",
        "reward_error": "endpoint down" if failed else None,
        "extracted_answer": None if failed else str(i),
        "messages": [
            {"role": "system", "content": "Answer with the number."},
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


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow-server")
    with MLflowServer(f"sqlite:///{tmp}/server.db", str(tmp / "artifacts")) as server:
        yield server


def _writer(tmp: Path, uri: str | None = None) -> tuple[TraceWriter, str, str]:
    uri = uri or f"sqlite:///{tmp}/store.db"
    # An experiment per test: a shared server keeps the others' traces.
    tracker = MLflowTracker(uri, f"traces-{tmp.name}", str(tmp / "art"))
    run = tracker.start_run("k", name="r")
    return tracker.trace_writer(run, session="session-1", dataset="unit"), uri, run


@pytest.mark.parametrize("store", ["sqlite", "server", "server-otlp"])
def test_what_is_read_back_is_what_was_built(tmp_path, store, request, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("TWINKLE_TRACE_TRANSPORT", "otlp" if store == "server-otlp" else "store")
    server = request.getfixturevalue("mlflow_server") if store != "sqlite" else None
    writer, uri, run = _writer(tmp_path, server.uri if server else None)
    sent = store == "server-otlp"
    assert writer.transport == ("otlp" if sent else "store")
    trajs = [_trajectory(i, failed=(i == 1)) for i in range(3)]
    rewards = [{"total": 1.0, "judge": None, "label": "ok"}, {"total": None}, {"total": 0.0}]
    report = writer.write(trajs, rewards, keys=["k0", "k1", "k2"])
    assert report.written == 3 and all(report.trace_ids)
    client = MlflowClient(uri)
    for traj, reward, key, trace_id in zip(trajs, rewards, ["k0", "k1", "k2"], report.trace_ids):
        got = client.get_trace(trace_id)
        built = build_spans(traj)
        spans = sorted(got.data.spans, key=lambda s: (s.parent_id is not None, s.start_time_ns))
        by_id = {s.span_id: s for s in spans}
        assert [(s.name, s.span_type) for s in spans] == [(b.name, b.span_type) for b in built]
        for s, b in zip(spans, built):
            assert (s.start_time_ns, s.end_time_ns) == (b.start_ns, b.end_ns)
            assert s.inputs == b.inputs and s.outputs == b.outputs
            assert (s.status.status_code.value == "ERROR") == bool(b.error)
            for k, v in b.attributes.items():
                assert s.attributes[k] == v
            parent = by_id.get(s.parent_id)
            assert (parent.name if parent else None) == (
                built[b.parent].name if b.parent is not None else None
            )
        # The LLM span's inputs are the messages the model was sent.
        llm = got.search_spans(span_type="LLM")[0]
        assert llm.inputs == {"messages": traj["messages"][:2]}
        info = got.info
        failed = traj["stop_reason"] == "api_error"
        assert info.state.value == ("ERROR" if failed else "OK")
        assert info.tags["twinkle.trace_key"] == key and info.tags["row_id"] == traj["id"]
        assert info.tags["status"] == ("failed" if failed else "ok")
        assert info.tags["dataset"] == "unit"
        assert info.trace_metadata["mlflow.trace.session"] == "session-1"
        assert info.tags["mlflow.traceName"] == "trajectory"
        if not sent:  # through OTLP the run is linked instead: searched by run below
            assert info.trace_metadata["mlflow.sourceRun"] == run
        assert f"say {traj['id'][-1]}" in (info.request_preview or "")
        assert info.request_time == built[0].start_ns // 1_000_000
        assert info.token_usage == {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}
        feedback = {a.name: a for a in info.assessments}
        assert set(feedback) == set(reward)
        for name, value in reward.items():
            a = feedback[name]
            assert a.source.source_type == "CODE" and a.source.source_id == "twinkle"
            if value is None:
                assert a.value is None and a.error.error_code == "REWARD_UNAVAILABLE"
                assert a.error.error_message == (traj["reward_error"] or "reward not computed")
            else:
                assert a.value == value
                assert a.rationale.startswith(f"{name} = {value}: outcome correct")
                assert f"extracted answer '{traj['extracted_answer']}'" in a.rationale
    # Search filters, sessions and the run link work on what was written.
    found = client.search_traces(
        locations=[writer.experiment_id], filter_string="tag.status = 'failed'"
    )
    assert [t.info.tags["twinkle.trace_key"] for t in found] == ["k1"]
    found = client.search_traces(
        locations=[writer.experiment_id], filter_string="span.type = 'LLM'"
    )
    assert len(found) == 3
    assert len(client.search_traces(locations=[writer.experiment_id], run_id=run)) == 3
    # Written once per session and key: a retry writes nothing.
    again = writer.write(trajs, rewards, keys=["k0", "k1", "k2"])
    assert again.written == 0 and again.skipped_existing == 3


def test_the_tracing_uri_is_restored_after_a_batch(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    other = f"sqlite:///{tmp_path}/other.db"
    mlflow.set_tracking_uri(other)
    try:
        writer, _, _ = _writer(tmp_path)
        writer.write([_trajectory(0)], [{"total": 1.0}], keys=["k0"])
        assert mlflow.get_tracking_uri() == other
    finally:
        mlflow.set_tracking_uri(None)


def test_llm_inputs_keep_the_latest_messages_within_the_payload_cap():
    messages = [{"role": "user", "content": "x" * 300} for _ in range(10)]
    messages.append({"role": "assistant", "content": "done"})
    traj = {"messages": messages, "turn_log": [{"type": "llm", "turn": 1}]}
    llm = build_spans(traj, max_payload_chars=1000)[1]
    kept = llm.inputs["messages"]
    assert 1 <= len(kept) < 10 and kept == messages[10 - len(kept) : 10]
    assert llm.inputs["omitted_messages"] == 10 - len(kept)
    huge = {"messages": [{"role": "user", "content": "y" * 5000}, messages[-1]]}
    huge["turn_log"] = [{"type": "llm", "turn": 1}]
    cut = build_spans(huge, max_payload_chars=1000)[1].inputs
    assert cut["messages"] == [] and "truncated by twinkle" in cut["last_message"]


def test_tracking_uses_only_public_mlflow_names():
    """No private MLflow module, attribute or store: MLflow can be upgraded freely."""
    files = sorted((REPO / "twinkle" / "tracking").glob("*.py")) + [REPO / "flows" / "tracking.py"]
    private = []
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlflow"):
                names = [node.module, *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("mlflow")]
            elif isinstance(node, ast.Attribute) and node.attr in (
                "_tracking_client",
                "store",
                "_span",
            ):
                names = [node.attr]
            else:
                continue
            bad = [
                n
                for n in names
                if n == "store"
                or any(part.startswith("_") for part in n.split("."))
                or n.startswith(("mlflow.store", "mlflow.tracing.utils", "mlflow.tracing.provider"))
            ]
            private += [f"{path.name}:{node.lineno}: {n}" for n in bad]
    assert private == []


def test_the_transport_is_otlp_for_a_server_unless_told(tmp_path, monkeypatch):
    from twinkle.tracking.otlp import transport_for

    monkeypatch.delenv("TWINKLE_TRACE_TRANSPORT", raising=False)
    assert transport_for("http://127.0.0.1:5000") == "otlp"
    monkeypatch.setenv("TWINKLE_TRACE_TRANSPORT", "store")
    assert transport_for("https://mlflow.example") == "store"
    monkeypatch.setenv("TWINKLE_TRACE_TRANSPORT", "otlp")
    assert transport_for(f"sqlite:///{tmp_path}/m.db") == "store"  # no server to send to
    monkeypatch.setenv("TWINKLE_TRACE_TRANSPORT", "grpc")
    with pytest.raises(ValueError, match="TWINKLE_TRACE_TRANSPORT"):
        transport_for("http://127.0.0.1:5000")


def test_a_server_and_a_sqlite_store_alternate_in_one_process(tmp_path, mlflow_server, monkeypatch):
    """The OTLP settings are process-wide: a batch to a SQLite store after one to a server
    (and back) must land in its own store, through MLflow's default export again."""
    from mlflow import MlflowClient

    monkeypatch.setenv("TWINKLE_TRACE_TRANSPORT", "otlp")

    for k, uri in enumerate([mlflow_server.uri, None, mlflow_server.uri]):
        sub = tmp_path / str(k)
        sub.mkdir()
        writer, used, _ = _writer(sub, uri)
        report = writer.write([_trajectory(k)], [{"total": 1.0}], keys=[f"a{k}"])
        got = MlflowClient(used).get_trace(report.trace_ids[0])
        assert got.info.tags["twinkle.trace_key"] == f"a{k}"
        assert ("mlflow.sourceRun" in got.info.trace_metadata) == (uri is None)
