"""OpenAI protocol client against a real local server, over both transports: the real openai
SDK (the default) and the lean one (``transport='lean'``)."""

import asyncio
import socket

import pytest

from twinkle.data_format import SamplingParams
from twinkle.protocol.base import APICallError, request_message
from twinkle.protocol.openai import OpenAI
from twinkle.testing.openai_server import Reply, failing_first, garbage, scripted, tool_then_answer

USER = {"messages": [{"role": "user", "content": "hi"}]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]


TRANSPORT = "sdk"


@pytest.fixture(autouse=True, params=["sdk", "lean"])
def transport(request):
    """Every test runs over both transports: the lean one must behave exactly as the SDK's."""
    global TRANSPORT
    TRANSPORT, previous = request.param, TRANSPORT
    yield request.param
    TRANSPORT = previous


def api_for(server, **kw):
    kw.setdefault("max_retries", 3)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("transport", TRANSPORT)
    return OpenAI("test-model", api_key="x", base_url=server.base_url, **kw)


def test_request_mapping():
    api = OpenAI("m", api_key="x", base_url="http://127.0.0.1:9/v1")
    sp = SamplingParams(
        max_tokens=16, seed=3, stop=["END"], logprobs=2, top_k=5, repetition_penalty=1.1
    )
    body = api.build_request(
        {"messages": [{"role": "user", "content": "q"}], "tools": TOOLS},
        sp,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert body["tools"] == TOOLS and body["max_tokens"] == 16 and body["seed"] == 3
    assert body["stop"] == ["END"] and body["logprobs"] is True and body["top_logprobs"] == 2
    assert body["extra_body"] == {
        "top_k": 5,
        "repetition_penalty": 1.1,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert "tools" not in api.build_request({"messages": [], "tools": []}, SamplingParams())


def test_history_is_cleaned_before_sending():
    message = {
        "role": "assistant",
        "content": None,
        "finish_reason": "tool_calls",
        "reasoning_content": "hmm",
        "tool_calls": '[{"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}]',
    }
    clean = request_message(message)
    assert clean == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    }
    assert request_message(message, keep_reasoning=True)["reasoning_content"] == "hmm"
    tool = request_message({"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok"})
    assert tool == {"role": "tool", "content": "ok", "tool_call_id": "c1"}


@pytest.mark.slow
def test_tool_calls_reasoning_finish_reason_and_usage(chat_server):
    chat_server.responder = scripted(
        [
            {
                "content": "",
                "reasoning_content": "need weather",
                "tool_calls": [
                    {"id": "call_9", "name": "get_weather", "arguments": {"city": "Oslo"}}
                ],
            }
        ]
    )
    reply = api_for(chat_server)({**USER, "tools": TOOLS}, SamplingParams(max_tokens=8))
    assert reply["tool_calls"] == [
        {
            "id": "call_9",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
        }
    ]
    assert reply["reasoning_content"] == "need weather" and reply["finish_reason"] == "tool_calls"
    assert chat_server.requests[0]["tools"] == TOOLS and chat_server.requests[0]["max_tokens"] == 8


@pytest.mark.slow
async def test_async_multi_sample_and_extra_body(chat_server):
    chat_server.responder = tool_then_answer(turns=0, answer="fine")
    api = api_for(chat_server)
    replies = await api.acall(USER, SamplingParams(num_samples=3), extra_body={"custom_field": 7})
    assert [r["content"] for r in replies] == ["fine"] * 3
    assert chat_server.requests[-1]["n"] == 3 and chat_server.requests[-1]["custom_field"] == 7
    completion = await api.acomplete(USER, SamplingParams())
    assert (
        completion.prompt_tokens > 0
        and completion.completion_tokens > 0
        and completion.attempts == 1
    )


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 500, 503])
async def test_transient_errors_are_retried(chat_server, status):
    chat_server.responder = failing_first(2, status, then=tool_then_answer(turns=0, answer="ok"))
    completion = await api_for(chat_server).acomplete(USER, SamplingParams())
    assert completion.messages[0]["content"] == "ok" and completion.attempts == 3
    assert len(chat_server.requests) == 3


@pytest.mark.slow
def test_retry_after_is_honoured_and_sync_path_retries(chat_server):
    chat_server.responder = failing_first(
        1, 429, retry_after=0.01, then=tool_then_answer(turns=0, answer="ok")
    )
    assert api_for(chat_server)(USER, SamplingParams())["content"] == "ok"
    assert len(chat_server.requests) == 2


@pytest.mark.slow
async def test_retries_are_bounded_then_reported(chat_server):
    chat_server.responder = failing_first(100, 500)
    with pytest.raises(APICallError) as info:
        await api_for(chat_server, max_retries=2).acomplete(USER, SamplingParams())
    assert info.value.kind == "server" and info.value.status == 500 and info.value.attempts == 3
    assert len(chat_server.requests) == 3


@pytest.mark.slow
async def test_client_errors_are_not_retried(chat_server):
    chat_server.responder = failing_first(5, 400)
    with pytest.raises(APICallError) as info:
        await api_for(chat_server).acomplete(USER, SamplingParams())
    assert (
        info.value.kind == "client" and info.value.attempts == 1 and len(chat_server.requests) == 1
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "responder",
    [garbage(), lambda request: Reply(body={"choices": []}), lambda request: Reply(body=[1, 2, 3])],
)
async def test_garbage_is_an_invalid_response(chat_server, responder):
    chat_server.responder = responder
    with pytest.raises(APICallError) as info:
        await api_for(chat_server).acomplete(USER, SamplingParams())
    assert info.value.kind == "invalid_response"


@pytest.mark.slow
async def test_timeouts_are_retried_then_reported(chat_server):
    chat_server.delay_s = 2.0
    api = api_for(chat_server, max_retries=1, client_kwargs={"timeout": 0.2})
    with pytest.raises(APICallError) as info:
        await api.acomplete(USER, SamplingParams())
    assert info.value.kind == "timeout" and info.value.attempts == 2


async def test_refused_connection_is_reported():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = OpenAI(
        "m",
        api_key="x",
        base_url=f"http://127.0.0.1:{port}/v1",
        max_retries=1,
        backoff_s=0.01,
        transport=TRANSPORT,
    )
    with pytest.raises(APICallError) as info:
        await api.acomplete(USER, SamplingParams())
    assert info.value.kind == "connection" and info.value.attempts == 2


@pytest.mark.slow
def test_one_async_client_per_event_loop(chat_server):
    chat_server.responder = tool_then_answer(turns=0, answer="ok")
    api = api_for(chat_server)
    # Two separate asyncio.run calls: a client bound to the first (closed) loop must not be reused.
    assert asyncio.run(api.acall(USER, SamplingParams()))["content"] == "ok"
    assert asyncio.run(api.acall(USER, SamplingParams()))["content"] == "ok"


@pytest.mark.slow
def test_models_endpoint(chat_server):
    import openai

    client = openai.OpenAI(base_url=chat_server.base_url, api_key="x", max_retries=0)
    assert [m.id for m in client.models.list()] == ["twinkle-test"]


@pytest.mark.slow
def test_server_in_its_own_process():
    from twinkle.testing.openai_server import OpenAIServer

    with OpenAIServer.subprocess(delay_ms=10, policy="judge") as server:
        assert server.base_url.endswith("/v1")
        api = OpenAI("m", api_key="x", base_url=server.base_url, max_retries=0, transport=TRANSPORT)
        assert api(USER, SamplingParams())["content"].startswith("Score: 8/10")


def test_the_sdk_path_sends_what_the_sdks_typed_call_sends(chat_server, transport):
    """Messages, tools and sampling scalars go through ``extra_body`` (see ``_sdk_body``): the
    body on the wire is the one ``create`` builds from its typed parameters."""
    import openai

    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    sp = SamplingParams(max_tokens=9, seed=1, temperature=0.5)
    api_for(chat_server)({"messages": history, "tools": TOOLS}, sp)
    client = openai.OpenAI(api_key="x", base_url=chat_server.base_url)
    client.chat.completions.create(
        model="test-model",
        messages=history,
        tools=TOOLS,
        n=1,
        temperature=0.5,
        top_p=1.0,
        max_tokens=9,
        seed=1,
    )
    ours, typed = chat_server.requests
    assert ours == typed
