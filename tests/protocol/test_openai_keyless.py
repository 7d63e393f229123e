"""``OpenAI(model, base_url)`` with no key anywhere talks to a keyless endpoint (vLLM's default)
without an ``Authorization`` header; a key, given or in ``OPENAI_API_KEY``, is sent as usual."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from twinkle.data_format import SamplingParams
from twinkle.protocol.openai import OpenAI
from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle.tools import ToolManager

REPLY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}
    ],
}


class _Recorder(BaseHTTPRequestHandler):
    """A keyless chat endpoint that records the Authorization header of every request."""

    seen: list[str | None] = []

    def do_POST(self) -> None:  # the name http.server calls
        self.rfile.read(int(self.headers["content-length"]))
        type(self).seen.append(self.headers.get("authorization"))
        body = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


ROW = {"messages": [{"role": "user", "content": "Capital of France?"}]}


@pytest.mark.parametrize("transport", ["sdk", "lean"])
def test_no_key_anywhere_sends_no_authorization(endpoint, monkeypatch, transport):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    api = OpenAI("m", base_url=endpoint, max_retries=0, transport=transport)
    assert api.keyless
    rollout = APIMultiTurnRollout(api=api, tool_manager=ToolManager(), max_turns=2)
    out = rollout([ROW, ROW])
    assert [t["stop_reason"] for t in out] == ["stop", "stop"]
    if transport == "sdk":
        assert api(ROW, SamplingParams())["content"] == "Paris."  # the synchronous client too
    assert _Recorder.seen and set(_Recorder.seen) == {None}


@pytest.mark.parametrize("transport", ["sdk", "lean"])
def test_a_key_is_sent_given_or_from_the_environment(endpoint, monkeypatch, transport):
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert OpenAI("m", base_url=endpoint, max_retries=0, transport=transport)(ROW, SamplingParams())
    monkeypatch.delenv("OPENAI_API_KEY")
    OpenAI("m", api_key="given", base_url=endpoint, max_retries=0, transport=transport)(
        ROW, SamplingParams()
    )
    assert _Recorder.seen == ["Bearer from-env", "Bearer given"]


def test_caller_headers_are_kept_beside_the_omitted_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    body = OpenAI("m", base_url="http://127.0.0.1:9/v1").build_request(
        ROW, None, extra_headers={"X-Trace": "1"}
    )
    assert body["extra_headers"]["X-Trace"] == "1" and "Authorization" in body["extra_headers"]
    keyed = OpenAI("m", api_key="k", base_url="http://127.0.0.1:9/v1").build_request(ROW, None)
    assert "extra_headers" not in keyed
