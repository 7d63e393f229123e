"""The lean transport (``OpenAI(transport='lean')``): the same errors and messages as the SDK
path, HTTP/1.1 framing against a raw socket server, the pool, and rollouts over it."""

import asyncio
import gzip
import pickle

import pytest

from twinkle.data_format import SamplingParams
from twinkle.protocol.base import APICallError
from twinkle.protocol.lean import LeanClient, parse_completion, status_error
from twinkle.protocol.openai import OpenAI
from twinkle.rollout import APIMultiTurnRollout
from twinkle.testing.openai_server import Reply, failing_first, garbage, tool_then_answer
from twinkle.tools import ToolManager

pytestmark = pytest.mark.slow

USER = {"messages": [{"role": "user", "content": "hi"}]}
BODY = (
    b'{"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}'
)


def outcome(api):
    try:
        return "ok", asyncio.run(api.acomplete(USER, SamplingParams())).messages
    except APICallError as exc:
        return exc.kind, exc.status, exc.attempts, str(exc)


@pytest.mark.parametrize(
    "responder",
    [
        garbage(),
        failing_first(9, 400),
        failing_first(9, 401),
        failing_first(9, 404),
        failing_first(9, 409),
        failing_first(9, 422),
        failing_first(9, 429),
        failing_first(9, 500),
        lambda request: (503, "plain text"),
        lambda request: (418, {"error": {"message": "teapot"}}),
        lambda request: (408, {"detail": "slow"}),
        lambda request: Reply(raw="", status=502),
        # A redirect is followed, as the SDK follows it: POST /v1/models answers 405.
        lambda request: Reply(
            body={"error": {"message": "moved"}}, status=307, headers={"Location": "/v1/models"}
        ),
        lambda request: Reply(body=[1, 2, 3]),
        lambda request: Reply(body={"choices": [{"finish_reason": "stop"}]}),
        lambda request: {
            "content": "x",
            "reasoning_content": "why",
            "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": 1}}],
        },
    ],
)
def test_same_outcome_and_message_as_the_sdk(chat_server, responder):
    results = []
    for transport in ("sdk", "lean"):
        chat_server.responder = responder
        api = OpenAI(
            "m",
            api_key="x",
            base_url=chat_server.base_url,
            max_retries=1,
            backoff_s=0.001,
            transport=transport,
        )
        results.append(outcome(api))
    assert results[0] == results[1]


def test_both_transports_send_the_same_json(chat_server):
    request = {
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "function": {"name": "w", "arguments": {"a": 1}}}],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "w", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
    }
    sp = SamplingParams(
        max_tokens=9, seed=1, stop=["X"], logprobs=2, top_k=4, temperature=0.5, top_p=0.9
    )
    for transport in ("sdk", "lean"):
        api = OpenAI("m", api_key="x", base_url=chat_server.base_url, transport=transport)
        api(request, sp, extra_body={"temperature": 0.25, "custom": [1]}, user="u1")
    sdk, lean = chat_server.requests
    assert sdk == lean
    assert sdk["temperature"] == 0.25 and sdk["max_tokens"] == 9 and sdk["top_k"] == 4


def test_messages_are_the_sdks():
    error = status_error(429, b'{"error": {"message": "slow down"}}', {"retry-after": "2"})
    assert (error.kind, error.status, error.retry_after) == ("rate_limit", 429, 2.0)
    assert error.message == "RateLimitError: Error code: 429 - slow down"
    assert status_error(500, b"oops", {}).message == "InternalServerError: Error code: 500"
    with pytest.raises(APICallError, match="no choices in reply"):
        parse_completion({"choices": []})


def test_options_are_checked_and_the_client_pickles():
    with pytest.raises(ValueError, match="transport"):
        OpenAI("m", transport="fast")
    with pytest.raises(ValueError, match="http_client"):
        OpenAI("m", transport="lean", client_kwargs={"http_client": object()})
    api = pickle.loads(pickle.dumps(OpenAI("m", base_url="http://h:1/v1", transport="lean")))
    assert api.transport == "lean"


class RawServer:
    """A socket server that answers each request with the next scripted bytes, recording
    requests and the connections they came on."""

    def __init__(self, replies, close_after_reply=False):
        self.replies = list(replies)
        self.close_after_reply = close_after_reply
        self.requests = []
        self.connections = 0

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                self.requests.append(head + await reader.readexactly(length))
                reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
                if callable(reply):
                    reply = await reply()
                writer.write(reply)
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc):
        self.server.close()


def http(body, *headers, status=b"200 OK"):
    return b"HTTP/1.1 " + status + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def chunked(body):
    return b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7)
    )


@pytest.mark.parametrize(
    "reply",
    [
        http(BODY, b"Content-Length: %d" % len(BODY)),
        http(chunked(BODY) + b"0\r\n\r\n", b"Transfer-Encoding: chunked"),
        http(chunked(BODY) + b"0\r\nX-Trailer: 1\r\n\r\n", b"Transfer-Encoding: chunked"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + http(BODY, b"Content-Length: %d" % len(BODY)),
        http(
            gzip.compress(BODY),
            b"Content-Encoding: gzip",
            b"Content-Length: %d" % len(gzip.compress(BODY)),
        ),
    ],
)
async def test_http_framing(reply):
    async with RawServer([reply]) as server:
        client = LeanClient(server.base_url, {"Authorization": "Bearer k"})
        for _ in range(3):  # the same kept-alive connection each time
            completion = await client.create(model="m", messages=[])
            assert completion.messages == [
                {"role": "assistant", "content": "ok", "finish_reason": "stop"}
            ]
        await client.aclose()
    assert server.connections == 1 and len(server.requests) == 3
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Authorization: Bearer k\r\n" in server.requests[0]


async def test_read_until_close_and_connection_close():
    replies = [
        http(BODY, b"Connection: close"),
        http(BODY, b"Content-Length: %d" % len(BODY), b"Connection: close"),
    ]
    for reply in replies:
        async with RawServer([reply], close_after_reply=True) as server:
            client = LeanClient(server.base_url)
            for _ in range(2):
                assert (await client.create(model="m", messages=[])).messages[0]["content"] == "ok"
            await client.aclose()
        assert server.connections == 2


async def test_a_connection_the_server_dropped_is_replaced_without_a_retry():
    # Keep-alive promised, then closed: the next call must not fail (nor count an attempt).
    async with RawServer(
        [http(BODY, b"Content-Length: %d" % len(BODY))], close_after_reply=True
    ) as server:
        api = OpenAI("m", base_url=server.base_url, max_retries=0, transport="lean")
        for _ in range(3):
            completion = await api.acomplete(USER, SamplingParams())
            assert completion.attempts == 1
        await api.aclose()
    assert server.connections == 3


async def test_keyless_sends_no_authorization(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with RawServer([http(BODY, b"Content-Length: %d" % len(BODY))]) as server:
        api = OpenAI("m", base_url=server.base_url, transport="lean")
        await api.acomplete(USER, SamplingParams(), extra_headers={"X-Trace": "t1"})
        await api.aclose()
        keyed = OpenAI("m", api_key="sk-1", base_url=server.base_url, transport="lean")
        await keyed.acomplete(USER, SamplingParams())
        await keyed.aclose()
    assert b"authorization" not in server.requests[0].lower()
    assert b"X-Trace: t1\r\n" in server.requests[0]
    assert b"Authorization: Bearer sk-1\r\n" in server.requests[1]


async def test_max_connections_caps_the_pool():
    async def slow():
        await asyncio.sleep(0.05)
        return http(BODY, b"Content-Length: %d" % len(BODY))

    async with RawServer([slow]) as server:
        client = LeanClient(server.base_url, max_connections=2)
        await asyncio.gather(*(client.create(model="m", messages=[]) for _ in range(6)))
        await client.aclose()
        unbounded = LeanClient(server.base_url)
        await asyncio.gather(*(unbounded.create(model="m", messages=[]) for _ in range(6)))
        await unbounded.aclose()
    assert server.connections == 2 + 6


async def test_a_cancelled_call_does_not_poison_the_pool():
    async def slow():
        await asyncio.sleep(0.3)
        return http(BODY, b"Content-Length: %d" % len(BODY))

    async with RawServer([slow]) as server:
        client = LeanClient(server.base_url)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await client.create(model="m", messages=[])
        assert (await client.create(model="m", messages=[])).messages[0]["content"] == "ok"
        await client.aclose()
    assert server.connections == 2


def test_rollout_over_both_transports_is_the_same(chat_server):
    class Weather:
        blocking = False

        def __call__(self, name, arguments):
            return f"sunny in {arguments['city']}"

        def tool_info(self):
            return {"type": "function", "function": {"name": "get_weather", "parameters": {}}}

    chat_server.responder = tool_then_answer(2, "get_weather", {"city": "Oslo"}, answer="Warm.")
    outs = []
    for transport in ("sdk", "lean"):
        api = OpenAI("m", api_key="x", base_url=chat_server.base_url, transport=transport)
        rollout = APIMultiTurnRollout(api, ToolManager({"get_weather": Weather()}), concurrency=4)
        out = rollout([{"id": f"t{i}", **USER} for i in range(6)])
        for o in out:
            for m in o["messages"]:  # the server numbers its calls: ids differ between runs
                m.pop("tool_call_id", None)
                for call in m.get("tool_calls") or []:
                    call.pop("id")
            for entry in o["turn_log"]:
                for key in ("start_ns", "latency_s", "tool_call_id"):
                    entry.pop(key, None)
        outs.append(out)
    assert outs[0] == outs[1]
    assert outs[1][0]["stop_reason"] == "stop" and outs[1][0]["turns"] == 3
    assert outs[1][0]["messages"][2]["content"] == "sunny in Oslo"
