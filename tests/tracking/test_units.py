"""twinkle.tracking against a real MLflow SQLite store: secrets, spans, sampling, caps,
idempotency."""

from __future__ import annotations

import os
import time

import pytest

from twinkle.tracking import (
    MLflowTracker,
    TraceWriter,
    build_spans,
    redact,
    sampled,
    scrub_secrets,
)


def _trajectory(i: int, error: str | None = None) -> dict:
    now = time.time_ns()
    traj = {
        "id": f"t{i}",
        "stop_reason": "api_error" if error else "stop",
        "turns": 2,
        "truncated": bool(error),
        "messages": [
            {"role": "user", "content": "run it, my key is sk-live-abcdef123456"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "run_command", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            {"role": "assistant", "content": "done"},
        ],
        "turn_log": [
            {
                "type": "llm",
                "turn": 1,
                "start_ns": now - 3_000_000_000,
                "latency_s": 0.5,
                "prompt_tokens": 12,
                "completion_tokens": 4,
                "finish_reason": "tool_calls",
            },
            {
                "type": "tool",
                "turn": 1,
                "name": "run_command",
                "arguments": '{"command": "ls"}',
                "tool_call_id": "c1",
                "start_ns": now - 2_400_000_000,
                "latency_s": 0.2,
                "error": False,
            },
            {
                "type": "llm",
                "turn": 2,
                "start_ns": now - 2_000_000_000,
                "latency_s": 0.4,
                "finish_reason": "stop",
            },
        ],
    }
    if error:
        traj["error"] = error
    return traj


def test_scrub_redacts_secret_names_and_values_but_keeps_token_counts():
    out = scrub_secrets(
        {
            "api_key": "abc",
            "headers": {"Authorization": "Bearer xyz123"},
            "max_tokens": 512,
            "note": "export OPENAI_API_KEY=sk-proj-123456789 and call",
            "nested": [{"client_secret": "s"}],
        }
    )
    assert out["api_key"] == "[REDACTED]"
    assert out["headers"]["Authorization"] == "[REDACTED]"
    assert out["max_tokens"] == 512
    assert "sk-proj" not in out["note"] and "[REDACTED]" in out["note"]
    assert out["nested"][0]["client_secret"] == "[REDACTED]"


def test_build_spans_uses_recorded_timings_and_caps_spans_and_payload():
    traj = _trajectory(0)
    spans = build_spans(traj)
    assert [s.span_type for s in spans] == ["AGENT", "LLM", "TOOL", "LLM"]
    assert spans[1].end_ns - spans[1].start_ns == 500_000_000
    assert spans[0].start_ns == spans[1].start_ns and spans[0].end_ns == spans[3].end_ns
    assert "sk-live" not in str(spans[0].inputs)
    capped = build_spans(traj, max_spans=2, max_payload_chars=10)
    assert len(capped) == 2 and capped[0].attributes["spans_dropped"] == 2
    assert "truncated by twinkle" in str(capped[1].inputs)


def test_sampling_is_deterministic_and_close_to_the_rate():
    keys = [f"k{i}" for i in range(2000)]
    first = [sampled(k, 0.3) for k in keys]
    assert first == [sampled(k, 0.3) for k in keys]
    assert 0.25 < sum(first) / len(keys) < 0.35
    assert all(sampled(k, 1.0) for k in keys[:10]) and not any(sampled(k, 0.0) for k in keys[:10])


@pytest.mark.slow
def test_trace_writer_writes_feedback_and_never_duplicates(tmp_path):
    import mlflow

    tracker = MLflowTracker(
        f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "art")
    )
    run = tracker.start_run(
        "key-1", name="unit", params={"api_key": "sk-abcdefgh1", "max_turns": 3}
    )
    writer = tracker.trace_writer(run, session="key-1", dataset="unit")
    trajs = [_trajectory(0), _trajectory(1, error="APIConnectionError: down, Bearer abcdefghij")]
    rewards = [{"fidelity": 1.0, "total": 1.0}, {"fidelity": None}]
    report = writer.write(trajs, rewards)
    assert report.written == 2 and report.spans == 8
    again = writer.write(trajs, rewards)
    assert again.written == 0 and again.skipped_existing == 2

    client = mlflow.MlflowClient(tracker.tracking_uri)
    traces = client.search_traces(locations=[tracker.experiment_id])
    assert len(traces) == 2
    by_row = {t.info.tags["row_id"]: t for t in traces}
    ok, failed = by_row["t0"], by_row["t1"]
    assert (
        len(ok.search_spans(span_type="LLM")) == 2 and len(ok.search_spans(span_type="TOOL")) == 1
    )
    assert {a.name: a.value for a in ok.info.assessments} == {"fidelity": 1.0, "total": 1.0}
    assert ok.info.trace_metadata["mlflow.trace.session"] == "key-1"
    assert ok.info.tags["dataset"] == "unit" and ok.info.tags["reward.total"] == "1.0"
    assert failed.info.state.value == "ERROR" and failed.info.tags["status"] == "failed"
    assert "abcdefghij" not in failed.info.tags["error"]
    assert client.get_run(run).data.params["api_key"] == "[REDACTED]"
    assert len(client.search_traces(locations=[tracker.experiment_id], run_id=run)) == 2


def test_runs_are_found_by_key_and_metrics_dedupe(tmp_path):
    tracker = MLflowTracker(
        f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "art")
    )
    run = tracker.start_run("same", name="r")
    stage = tracker.start_stage(run, "same", "curation")
    for _ in range(2):  # a retried task logs the same figures again
        assert tracker.start_run("same") == run
        assert tracker.start_stage(run, "same", "curation") == stage
        tracker.log_curation(
            stage,
            [
                {
                    "step": "HardFilter",
                    "rows_in": 5,
                    "rows_out": 3,
                    "dropped": {"shallow_reply": 2},
                    "seconds": 0.1,
                }
            ],
            5,
            3,
        )
    history = tracker.client.get_metric_history(stage, "drops.HardFilter.shallow_reply")
    assert [m.value for m in history] == [2.0]
    metrics = tracker.client.get_run(stage).data.metrics
    assert not [k for k in metrics if k.startswith("drop_reason.")]  # drops appear once
    runs = tracker.client.search_runs([tracker.experiment_id])
    assert len(runs) == 2
    artifacts = [a.path for a in tracker.client.list_artifacts(stage, "plots")]
    assert artifacts == ["plots/drop_reasons.png"]


def test_invalid_writer_settings_raise():
    with pytest.raises(ValueError, match="sample_rate"):
        TraceWriter("sqlite:///x.db", "1", "s", sample_rate=1.5)
    with pytest.raises(ValueError, match="session"):
        TraceWriter("sqlite:///x.db", "1", "")


@pytest.mark.slow
def test_trace_writer_process_writes_in_a_helper_and_falls_back_when_it_cannot_start(tmp_path):
    import mlflow

    from twinkle.tracking import TraceWriterProcess

    tracker = MLflowTracker(
        f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "art")
    )
    run = tracker.start_run("proc")
    with TraceWriterProcess() as proc:
        report = proc.write(
            tracker.tracking_uri,
            tracker.experiment_id,
            "s1",
            [_trajectory(0)],
            [{"total": 1.0}],
            run_id=run,
        )
        helper = proc._proc.pid
    assert report["written"] == 1 and helper != os.getpid()
    broken = TraceWriterProcess(python=str(tmp_path / "no-such-python"))
    report = broken.write(tracker.tracking_uri, tracker.experiment_id, "s2", [_trajectory(1)], None)
    assert report["written"] == 1  # written in-process instead
    assert (
        len(
            mlflow.MlflowClient(tracker.tracking_uri).search_traces(
                locations=[tracker.experiment_id]
            )
        )
        == 2
    )


@pytest.mark.slow
def test_charts_are_drawn_by_the_helper_and_in_process_when_it_cannot_start(tmp_path):
    from twinkle.tracking import TraceWriterProcess

    png = b"\x89PNG\r\n\x1a\n"
    with TraceWriterProcess() as proc:
        path = proc.chart("reward_histogram", {"total": [1.0, 0.0, 1.0]}, str(tmp_path / "h.png"))
        assert proc._proc.pid != os.getpid()
        with pytest.raises(RuntimeError, match="unknown chart 'pie'"):
            proc.chart("pie", {}, str(tmp_path / "p.png"))
    assert open(path, "rb").read(8) == png
    broken = TraceWriterProcess(python=str(tmp_path / "no-such-python"))
    path = broken.chart("drop_reasons", {"HardFilter/too_short": 3}, str(tmp_path / "d.png"))
    assert open(path, "rb").read(8) == png


def test_tracker_draws_its_charts_with_the_renderer_it_is_given(tmp_path):
    tracker = MLflowTracker(
        f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "art")
    )
    run = tracker.start_run("render")
    calls = []

    def render(kind, data, path):
        calls.append((kind, data))
        with open(path, "wb") as f:
            f.write(b"chart")
        return path

    tracker.log_rewards(run, [{"total": 1.0}, {"total": 0.5}], render=render)
    tracker.log_curation(
        run, [{"step": "s", "rows_in": 2, "rows_out": 1, "dropped": {"r": 1}}], 2, 1, render=render
    )
    assert calls == [("reward_histogram", {"total": [1.0, 0.5]}), ("drop_reasons", {"s/r": 1})]
    names = sorted(a.path for a in tracker.client.list_artifacts(run, "plots"))
    assert names == ["plots/drop_reasons.png", "plots/reward_histogram.png"]


class _InProcessWriter:
    """``TraceWriterProcess.write`` without the helper process (same call, real MLflow store)."""

    def __init__(self, fail_first: bool = False) -> None:
        self.batches: list[int] = []
        self.fail_first = fail_first

    def write(self, *args, **kwargs):
        from twinkle.tracking.traces import write_trace_batch

        self.batches.append(len(args[3]))
        if self.fail_first and len(self.batches) == 1:
            raise OSError("store unavailable")
        return write_trace_batch(*args, **kwargs)


@pytest.mark.slow
def test_trace_stream_writes_batches_while_trajectories_arrive_and_reports_failures(tmp_path):
    from twinkle.tracking import TraceStream

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = MLflowTracker(
        uri, experiment="stream", artifact_location=str(tmp_path / "mlruns")
    ).experiment_id
    writer = _InProcessWriter()
    stream = TraceStream(writer, uri, exp, "session-s", batch_size=2, max_wait_s=0.05)
    for i in range(5):
        stream.put(_trajectory(i), {"total": float(i % 2)}, key=f"{i}:t{i}")
    report = stream.close()
    assert report["written"] == 5 and sum(writer.batches) == 5 and max(writer.batches) <= 2
    assert report["tail_s"] >= 0  # how long close() waited for the writer
    import mlflow

    traces = mlflow.MlflowClient(uri).search_traces(locations=[exp])
    assert sorted(float(t.info.tags["reward.total"]) for t in traces) == [0.0, 0.0, 0.0, 1.0, 1.0]

    again = TraceStream(_InProcessWriter(), uri, exp, "session-s", batch_size=8)
    for i in range(5):  # a retry: the same keys, nothing new
        again.put(_trajectory(i), {"total": 0.0}, key=f"{i}:t{i}")
    assert again.close()["existing"] == 5

    broken = TraceStream(_InProcessWriter(fail_first=True), uri, exp, "session-b", batch_size=8)
    broken.put(_trajectory(9), None, key="9:t9")
    with pytest.raises(OSError, match="store unavailable"):
        broken.close()


@pytest.mark.slow
def test_trace_stream_over_two_writer_processes_writes_each_trace_once(tmp_path):
    """Two real helper processes write one stream into one SQLite store at the same time
    (the flow's last wave is split between them): every trace lands once, with its
    feedback, both processes take part, and a retry of the stream writes nothing new."""
    import mlflow

    from twinkle.tracking import TraceStream, TraceWriterProcess

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = MLflowTracker(
        uri, experiment="two", artifact_location=str(tmp_path / "mlruns")
    ).experiment_id

    class Counting:
        def __init__(self, proc):
            self.proc, self.batches = proc, 0

        def write(self, *args, **kwargs):
            self.batches += 1
            return self.proc.write(*args, **kwargs)

    with TraceWriterProcess() as a, TraceWriterProcess(nice_first=True) as b:
        writers = [Counting(a), Counting(b)]
        stream = TraceStream(writers, uri, exp, "session-2", batch_size=4, max_wait_s=0.05)
        for i in range(24):
            stream.put(_trajectory(i), {"total": float(i % 2)}, key=f"{i}:t{i}")
        report = stream.close()
        assert report["written"] == 24
        assert all(w.batches > 0 for w in writers), [w.batches for w in writers]
        again = TraceStream([a, b], uri, exp, "session-2", batch_size=4, max_wait_s=0.05)
        for i in range(24):
            again.put(_trajectory(i), {"total": 0.0}, key=f"{i}:t{i}")
        assert again.close()["written"] == 0
    traces = mlflow.MlflowClient(uri).search_traces(locations=[exp], max_results=100)
    assert sorted(t.info.tags["twinkle.trace_key"] for t in traces) == sorted(
        f"{i}:t{i}" for i in range(24)
    )
    assert all(
        [x.name for x in t.info.assessments if x.name == "total"] == ["total"] for t in traces
    )


def test_trace_stream_never_sends_a_writer_what_the_sample_rate_leaves_out():
    """Unsampled trajectories are counted in the stream, not pickled to a writer process;
    the choice is the writer's own (``sampled`` on session and key)."""
    from twinkle.tracking import TraceStream
    from twinkle.tracking.spans import sampled

    class Recorder:
        def __init__(self):
            self.keys = []

        def write(self, uri, exp, session, trajectories, rewards, keys, **kwargs):
            self.keys += keys
            return {"written": len(keys)}

    writer = Recorder()
    stream = TraceStream(writer, "sqlite:///unused.db", "1", "s-rate", sample_rate=0.3)
    keys = [f"{i}:t{i}" for i in range(200)]
    for key in keys:
        stream.put({"id": key}, None, key)
    report = stream.close()
    chosen = [k for k in keys if sampled(f"s-rate/{k}", 0.3)]
    assert sorted(writer.keys) == sorted(chosen) and 20 < len(chosen) < 100
    assert report["written"] == len(chosen) and report["unsampled"] == 200 - len(chosen)


@pytest.mark.slow
def test_trace_stream_close_flushes_at_once_instead_of_waiting_for_a_full_batch(tmp_path):
    """close() must not wait out ``max_wait_s`` for a batch that cannot fill any more: the
    flow's rollout stage waits on it (a 1 s wait was 11% of a 9 s rollout)."""
    import threading

    from twinkle.tracking import TraceStream

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = MLflowTracker(
        uri, experiment="flush", artifact_location=str(tmp_path / "mlruns")
    ).experiment_id
    stream = TraceStream(_InProcessWriter(), uri, exp, "session-f", batch_size=64, max_wait_s=600)
    stream.put(_trajectory(0), {"total": 1.0}, key="0:t0")
    closer = threading.Thread(target=lambda: stream.report.update(closed=stream.close()))
    closer.start()
    closer.join(timeout=120)  # far below max_wait_s: only a flush on close gets here in time
    assert not closer.is_alive(), "close() waited for the batch to fill"
    assert stream.report["closed"]["written"] == 1


@pytest.mark.slow
def test_helper_mode_waits_for_a_batch_whose_last_key_is_scrubbed(tmp_path, monkeypatch):
    """In the helper, a batch waits for its traces by looking up its last trace key as
    stored, i.e. scrubbed; looking up the raw key would never match and would wait out
    ``STORE_TIMEOUT_S``, then fall back to ``mlflow.flush_trace_async_logging`` (made to
    raise here, so that path fails the test)."""
    import mlflow

    from twinkle.tracking import traces

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = MLflowTracker(uri, experiment="helper", artifact_location=str(tmp_path / "mlruns"))
    secret_key = "1:key sk-ant-api03-abcdefghijklmnopqrstuv"
    monkeypatch.setattr(traces, "HELPER_PROCESS", True)
    monkeypatch.setattr(traces, "STORE_TIMEOUT_S", 60.0)

    def no_flush():
        raise AssertionError("the batch's traces were never found in the store")

    monkeypatch.setattr(mlflow, "flush_trace_async_logging", no_flush)
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    try:
        report = TraceWriter(uri, exp.experiment_id, "session-h").write(
            [_trajectory(0), _trajectory(1)],
            [{"total": 1.0}, {"total": 0.0}],
            keys=["0:t0", secret_key],
            existing=set(),
        )
    finally:
        mlflow.set_tracking_uri(previous)
    assert report.written == 2
    stored = mlflow.MlflowClient(uri).search_traces(locations=[exp.experiment_id])
    assert {t.info.tags["twinkle.trace_key"] for t in stored} == {"0:t0", "1:key [REDACTED]"}
    assert all(len(t.info.assessments) == 1 for t in stored)  # feedback on both


def test_sqlite_store_is_put_in_wal_mode_unless_turned_off(tmp_path, monkeypatch):
    import sqlite3

    from twinkle.tracking.tracker import sqlite_wal

    def mode(path):
        with sqlite3.connect(path) as db:
            return db.execute("PRAGMA journal_mode").fetchone()[0]

    assert MLflowTracker(f"sqlite:///{tmp_path / 'a.db'}", experiment="w").experiment_id
    assert mode(tmp_path / "a.db") == "wal"
    monkeypatch.setenv("TWINKLE_SQLITE_WAL", "0")
    assert MLflowTracker(f"sqlite:///{tmp_path / 'b.db'}", experiment="w").experiment_id
    assert mode(tmp_path / "b.db") == "delete"
    monkeypatch.delenv("TWINKLE_SQLITE_WAL")
    assert not sqlite_wal(f"sqlite:///{tmp_path / 'missing.db'}")
    assert not (tmp_path / "missing.db").exists()  # never creates a store


def test_scrub_text_prefilter_never_changes_the_result():
    """The trigger-word scan only skips work: the three substitutions give the same text."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from twinkle.tracking import scrub as scrub_mod

    parts = st.sampled_from(
        [
            "sk-",
            "SK_",
            "rk_",
            "pk-",
            "e2b_",
            "Bearer ",
            "bearer\t",
            "api_key",
            "API-KEY",
            "token",
            "Secret",
            "passwd",
            "password",
            "=",
            ": ",
            '"',
            "abcdef123456",
            " ",
            "x",
        ]
    )

    def full(text: str) -> str:
        for pattern, repl in scrub_mod._SECRET_VALUE_RES:
            text = pattern.sub(repl, text)
        return text

    @settings(max_examples=300, deadline=None)
    @given(st.lists(parts, max_size=12).map("".join))
    def check(text):
        assert scrub_mod.scrub_text(text) == full(text)

    check()


def test_redact_hides_url_credentials_but_keeps_variable_names():
    params = {
        "policy": {"base_url": "http://user:PASS1234@host:8000/v1", "api_key_env": "OPENAI_KEY"},
        "sandbox": {"api_url": "https://tok_abcdefgh12@e2b.dev", "api_key_env": "E2B_API_KEY"},
        "note": "see http://host/x and mail a@b.com",
        "odd_env": "sk-live-abcdef123456",
        "api_key": "plain",
    }
    assert redact(params) == {
        "policy": {"base_url": "http://user:[REDACTED]@host:8000/v1", "api_key_env": "OPENAI_KEY"},
        "sandbox": {"api_url": "https://[REDACTED]@e2b.dev", "api_key_env": "E2B_API_KEY"},
        "note": "see http://host/x and mail a@b.com",
        "odd_env": "[REDACTED]",
        "api_key": "[REDACTED]",
    }


def test_runs_carry_names_tags_datasets_and_the_stage_s_own_times(tmp_path):
    tracker = MLflowTracker(
        f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "art")
    )
    tags = {"prefect.flow_run_id": "fr-1", "prefect.flow_run_url": "http://u:pw123456@ui/x"}
    run = tracker.start_run("k", name="chirpy-guan", tags=tags, params={"url": "http://a:b@h"})
    again = tracker.start_run("k", name="brave-otter", tags={"prefect.flow_run_id": "fr-2"})
    got = tracker.client.get_run(run)
    assert again == run and got.info.run_name == "brave-otter"
    assert got.data.tags["prefect.flow_run_id"] == "fr-2"
    assert got.data.tags["prefect.flow_run_url"] == "http://u:[REDACTED]@ui/x"
    assert got.data.params["url"] == "http://a:[REDACTED]@h"
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": 1}\n')
    fields = tracker.log_dataset(run, str(data), context="input")
    inputs = tracker.client.get_run(run).inputs.dataset_inputs
    assert [(d.dataset.name, d.dataset.digest) for d in inputs] == [
        ("rows.jsonl", fields["digest"])
    ]
    assert str(data) in inputs[0].dataset.source and inputs[0].tags[0].value == "input"
    start = time.time() - 13.0
    stage = tracker.start_stage(run, "k", "curation", start_time=start)
    tracker.end_run(stage, end_time=start + 13.0)
    info = tracker.client.get_run(stage).info
    assert info.end_time - info.start_time == 13000
