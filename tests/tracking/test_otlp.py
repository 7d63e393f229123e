"""``twinkle.tracking.otlp``: what its requests carry reads back from a real ``mlflow server``
exactly as written, a failing server is retried or named, and a server without the OTLP
endpoint gets its traces through MLflow's client instead."""

from __future__ import annotations

import http.server
import threading

import pytest

from twinkle.testing.mlflow_server import MLflowServer
from twinkle.tracking import MLflowTracker, otlp
from twinkle.tracking.spans import SpanRecord

TRICKY = {
    "zero": 0,
    "negative": -7,
    "huge": 2**70,
    "ratio": 0.25,
    "flag": False,
    "nothing": None,
    "text": '名字 é "quoted" \\ back',
    "json_text": '{"not": "parsed"}',
    "nested": {"a": [1, "x", {"y": None, "z": [True, 2.5]}], "": "empty key"},
    "empty_map": {},
    "empty_list": [],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("otlp-server")
    with MLflowServer(f"sqlite:///{tmp}/server.db", str(tmp / "artifacts")) as srv:
        yield srv


def test_values_read_back_as_written(server, tmp_path):
    from mlflow import MlflowClient

    exp = MLflowTracker(server.uri, "otlp-values", str(tmp_path / "art")).experiment_id
    root = SpanRecord("root", "AGENT", None, 1_000, 9_000, inputs=TRICKY, outputs=[1, None])
    child = SpanRecord("tool", "TOOL", 0, 2_000, 3_000, attributes=dict(TRICKY), error="boom")
    body, (trace_id,) = otlp.encode([([root, child], {"session.id": "s-1", "custom": 3})])
    otlp.send(server.uri, exp, body)
    got = MlflowClient(server.uri).get_trace(trace_id)
    spans = {s.name: s for s in got.data.spans}
    expected = {**TRICKY, "huge": str(2**70)}  # past int64: sent as its text, not rounded
    assert spans["root"].inputs == expected and spans["root"].outputs == [1, None]
    assert spans["root"].span_type == "AGENT" and spans["tool"].span_type == "TOOL"
    # MLflow reads a text attribute that is JSON as JSON, as it does its own spans'.
    attributes = {**expected, "json_text": {"not": "parsed"}}
    assert {k: spans["tool"].attributes[k] for k in TRICKY} == attributes
    assert spans["root"].attributes["custom"] == 3
    # What MLflow's client puts on each span too: its start, and its level for the UI's filter.
    assert spans["tool"].attributes["mlflow.spanStartTimeNs"] == 2_000
    assert spans["tool"].attributes["mlflow.spanLogLevel"] == 20
    assert spans["tool"].parent_id == spans["root"].span_id
    assert spans["tool"].status.status_code.value == "ERROR"
    assert spans["tool"].status.description == "boom"
    assert (spans["tool"].start_time_ns, spans["tool"].end_time_ns) == (2_000, 3_000)
    assert got.info.trace_metadata["mlflow.trace.session"] == "s-1"
    assert got.info.state.value == "OK"  # the root's status, not a child's


def test_a_trace_sent_again_overwrites_itself(server, tmp_path):
    from mlflow import MlflowClient

    exp = MLflowTracker(server.uri, "otlp-again", str(tmp_path / "art")).experiment_id
    spans = [SpanRecord("root", "AGENT", None, 1_000, 9_000), SpanRecord("llm", "LLM", 0, 2, 3)]
    ids = set()
    for attempt in ("first", "second"):  # re-encoded, as a retried batch is
        body, (trace_id,) = otlp.encode([(spans, {"attempt": attempt})], ["exp/session/key-1"])
        otlp.send(server.uri, exp, body)
        ids.add(trace_id)
    other_body, (other,) = otlp.encode([(spans, {})], ["exp/session/key-2"])
    assert len(ids) == 1 and other not in ids
    found = MlflowClient(server.uri).search_traces(locations=[exp])
    assert [t.info.trace_id for t in found] == list(ids)
    assert len(found[0].data.spans) == 2
    assert found[0].data.spans[0].attributes["attempt"] == "second"


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next status of ``codes`` (the last one repeats)."""

    codes: list[int] = []
    seen: list[dict[str, str]] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append(dict(self.headers))
        code = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"no" if code != 200 else b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Scripted.seen = []
    yield server, f"http://user:hunter2@127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_failing_server_is_retried_then_named_without_credentials(scripted):
    server, uri = scripted
    _Scripted.codes = [503, 429, 200]
    otlp.send(uri, "7", b"x", run_id="run-1")
    assert len(_Scripted.seen) == 3
    assert _Scripted.seen[0]["x-mlflow-experiment-id"] == "7"
    assert _Scripted.seen[0]["x-mlflow-run-id"] == "run-1"
    _Scripted.seen, _Scripted.codes = [], [500]
    with pytest.raises(RuntimeError, match="HTTP 500") as err:
        otlp.send(uri, "7", b"x")
    assert len(_Scripted.seen) == 3 and "hunter2" not in str(err.value)
    assert "TWINKLE_TRACE_TRANSPORT=store" in str(err.value)
    _Scripted.seen, _Scripted.codes = [], [400]
    with pytest.raises(RuntimeError, match="HTTP 400"):
        otlp.send(uri, "7", b"x")
    assert len(_Scripted.seen) == 1  # a bad request is not sent again
    _Scripted.codes = [404]
    with pytest.raises(otlp.OTLPUnsupported):
        otlp.send(uri, "7", b"x")
    _Scripted.seen, _Scripted.codes = [], [413]
    with pytest.raises(otlp.OTLPTooLarge):
        otlp.send(uri, "7", b"x")
    assert len(_Scripted.seen) == 1


def test_nothing_listening_is_named(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RuntimeError, match=f"127.0.0.1:{port}/v1/traces.*ConnectError"):
        otlp.send(f"http://127.0.0.1:{port}", "1", b"x", attempts=2)


def test_a_batch_too_large_for_the_server_goes_in_halves(server, tmp_path, monkeypatch):
    """A proxy before the server that takes at most ~1.5 traces' worth of bytes: a batch of
    five goes again in smaller requests until each fits, and all five are stored."""
    from mlflow import MlflowClient

    real, sizes = otlp.send, []

    def capped(uri, exp, body, **kwargs):
        sizes.append(len(body))
        limit = sizes[0] * 3 // 10  # the whole batch is five similar traces: 1.5 fit
        if len(body) > limit:
            raise otlp.OTLPTooLarge(f"{uri} refused {len(body)} bytes (HTTP 413)")
        return real(uri, exp, body, **kwargs)

    tracker = MLflowTracker(server.uri, "otlp-halves", str(tmp_path / "art"))
    writer = tracker.trace_writer(tracker.start_run("k", name="r"), session="s")
    trajs = [
        {"id": f"r{i}", "stop_reason": "stop", "messages": [{"role": "user", "content": "x" * 500}]}
        for i in range(5)
    ]
    monkeypatch.setattr(otlp, "send", capped)
    report = writer.write(trajs, [{"total": 1.0}] * 5, keys=[f"k{i}" for i in range(5)])
    assert report.written == 5 and len(set(report.trace_ids)) == 5
    # Refused whole, then in halves until each trace went alone: five requests stored.
    assert sum(size <= sizes[0] * 3 // 10 for size in sizes) == 5
    found = MlflowClient(server.uri).search_traces(locations=[writer.experiment_id])
    assert sorted(t.info.trace_id for t in found) == sorted(report.trace_ids)
    assert all(len(t.info.assessments) == 1 for t in found)


def test_a_server_without_the_endpoint_gets_traces_through_the_client(
    server, tmp_path, monkeypatch
):
    from mlflow import MlflowClient

    from twinkle.tracking import traces

    def unsupported(uri, *args, **kwargs):
        raise otlp.OTLPUnsupported(f"{uri} has no OTLP trace endpoint (HTTP 404)")

    monkeypatch.setattr(otlp, "send", unsupported)
    monkeypatch.setattr(traces, "_NO_OTLP", set())
    monkeypatch.delenv("TWINKLE_TRACE_TRANSPORT", raising=False)
    tracker = MLflowTracker(server.uri, "otlp-fallback", str(tmp_path / "art"))
    writer = tracker.trace_writer(tracker.start_run("k", name="r"), session="s")
    assert writer.transport == "otlp"
    traj = {"id": "r0", "stop_reason": "stop", "messages": [{"role": "user", "content": "hi"}]}
    for key in ("a", "b"):  # the second batch goes straight to the client
        report = writer.write([traj], [{"total": 1.0}], keys=[key])
        got = MlflowClient(server.uri).get_trace(report.trace_ids[0])
        assert got.info.tags["twinkle.trace_key"] == key
        assert [a.value for a in got.info.assessments] == [1.0]
    assert traces._NO_OTLP == {server.uri}
