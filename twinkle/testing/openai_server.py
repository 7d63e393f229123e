"""A scriptable OpenAI-compatible HTTP server (FastAPI + uvicorn) for tests and benchmarks.

It speaks ``POST /v1/chat/completions`` (``n > 1`` too) and ``GET /v1/models`` over real
HTTP, and ``POST /v1/completions`` for token-id prompts with ``echo``/``logprobs`` and vLLM's
``prompt_logprobs`` (deterministic logprobs from ``logprob_fn``, default
``toy_prompt_logprobs``; what ``ScoreFilter``'s logprob scorers read), so code under test
runs through the real ``openai`` SDK. FastAPI and uvicorn are used
because they are already dependencies (the sandbox server) and are what vLLM serves with.

Scripting: a *responder* gets the request JSON and returns one of

* a message shorthand ``{'content': ..., 'tool_calls': [...], 'finish_reason': ...}``
  (wrapped into a chat completion, copied into each of the ``n`` choices), or a list of
  shorthands, one per choice; ``tool_calls`` items may give ``arguments`` as a dict;
* a full response body (any dict with ``choices``), returned as is;
* ``(status, body)``: an HTTP error (or anything else), body a dict or a string;
* a ``Reply(...)`` for full control: status, body, raw text (garbage), headers, extra delay.

The responder may be a plain function or a coroutine function; it runs on the server's
event loop, so stateful responders need no locks. Every request body is appended to
``server.requests``. Ready-made responders: ``tool_then_answer`` (tool calls for the first
k turns, then a final answer), ``weather`` (the same with a ``get_weather`` call),
``judge`` (``"Score: 8/10"``), ``echo``, ``scripted`` (a list of replies in order),
``failing_first`` (k errors, then another responder), ``length_stop`` and ``garbage``.

In-process (a background thread; for tests)::

    with OpenAIServer(tool_then_answer(turns=2), delay_ms=0) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key='x')   # base_url ends in /v1

In its own process (for benchmarks, so the server does not share the client's GIL)::

    python -m twinkle.testing.openai_server --port 0 --delay-ms 50 --policy tool_then_answer
    # prints one line, the base URL, when ready
    with OpenAIServer.subprocess(delay_ms=50, policy='tool_then_answer') as server:
        ...

Example:
    >>> with OpenAIServer(judge(score=8)) as server:
    ...     import httpx
    ...     request = {'model': 'm', 'messages': [{'role': 'user', 'content': 'rate'}]}
    ...     body = httpx.post(server.base_url + '/chat/completions', json=request).json()
    >>> body['choices'][0]['message']['content'].splitlines()[0]
    'Score: 8/10'
"""

import argparse
import asyncio
import inspect
import itertools
import json
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

Responder = Callable[[dict[str, Any]], Any]


@dataclass
class Reply:
    """A fully specified answer: ``raw`` (text) wins over ``body`` (JSON)."""

    body: Any = None
    status: int = 200
    raw: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


_ids = itertools.count()


def _tool_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    return {
        "id": call.get("id") or f"call_{next(_ids)}_{index}",
        "type": "function",
        "function": {
            "name": function.get("name"),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def _approx_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4) if value else 0


def chat_completion(
    request: dict[str, Any], replies: list[dict[str, Any]], model: str
) -> dict[str, Any]:
    """A chat completion body from message shorthands (one per choice)."""
    choices = []
    for i, reply in enumerate(replies):
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        calls = [_tool_call(c, j) for j, c in enumerate(reply.get("tool_calls") or [])]
        if calls:
            message["tool_calls"] = calls
        if reply.get("reasoning_content"):
            message["reasoning_content"] = reply["reasoning_content"]
        finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
        choices.append({"index": i, "message": message, "finish_reason": finish, "logprobs": None})
    completion_tokens = sum(
        _approx_tokens(c["message"].get("content")) + _approx_tokens(c["message"].get("tool_calls"))
        for c in choices
    )
    prompt_tokens = _approx_tokens(request.get("messages"))
    return {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


# -- ready-made responders ----------------------------------------------------------------------


def _count(request: dict[str, Any], role: str) -> int:
    return sum(
        1 for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == role
    )


def tool_then_answer(
    turns: int = 1,
    tool_name: str | None = None,
    arguments: dict[str, Any] | None = None,
    answer: str = "Done.",
) -> Responder:
    """Call a tool while fewer than ``turns`` assistant turns exist, then answer ``answer``.

    The tool is ``tool_name`` or else the first tool in the request's ``tools`` (``echo``
    when there are none); ``arguments`` defaults to ``{"text": "turn <k>"}``.
    """

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        done = _count(request, "assistant")
        if done >= turns:
            return {"content": answer}
        name = tool_name
        if name is None:
            tools = request.get("tools") or []
            name = tools[0]["function"]["name"] if tools else "echo"
        return {
            "content": "",
            "tool_calls": [{"name": name, "arguments": arguments or {"text": f"turn {done + 1}"}}],
        }

    return respond


def weather(turns: int = 1) -> Responder:
    """``tool_then_answer`` for a weather agent: ``get_weather`` with a city, then an answer."""
    answer = "It is 14 C and partly cloudy in Oslo; take a light jacket for the evening."
    return tool_then_answer(turns, "get_weather", {"city": "Oslo", "unit": "celsius"}, answer)


def judge(score: int = 8, scale: int = 10, reason: str = "Clear and correct.") -> Responder:
    """Answer like an LLM judge: ``"Score: <score>/<scale>"`` then a reason line."""
    return lambda request: {"content": f"Score: {score}/{scale}\n{reason}"}


def echo() -> Responder:
    """Answer with the last user message's text."""

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        users = [
            m
            for m in request.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        content = users[-1].get("content") if users else ""
        return {"content": content if isinstance(content, str) else json.dumps(content)}

    return respond


def scripted(replies: list[Any], then: Any = None) -> Responder:
    """Return ``replies`` one per request, in order; afterwards ``then`` (default: an error 500)."""
    queue = list(replies)

    def respond(request: dict[str, Any]) -> Any:
        if queue:
            return queue.pop(0)
        return then if then is not None else (500, {"error": {"message": "script exhausted"}})

    return respond


def failing_first(
    k: int, status: int = 429, then: Responder | None = None, retry_after: float | None = None
) -> Responder:
    """Fail the first ``k`` requests with ``status``, then answer with ``then`` (default echo)."""
    state = {"left": k}
    inner = then or echo()

    def respond(request: dict[str, Any]) -> Any:
        if state["left"] > 0:
            state["left"] -= 1
            headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
            return Reply(
                body={"error": {"message": f"scripted {status}", "type": "scripted"}},
                status=status,
                headers=headers,
            )
        return inner(request)

    return respond


def length_stop(content: str = "This answer was cut off mid") -> Responder:
    """Every reply stops on the token limit (``finish_reason='length'``)."""
    return lambda request: {"content": content, "finish_reason": "length"}


def garbage(text: str = "<html>502 Bad Gateway</html> not json {") -> Responder:
    """HTTP 200 with a body that is not JSON at all."""
    return lambda request: Reply(raw=text, headers={"content-type": "application/json"})


POLICIES: dict[str, Callable[..., Responder]] = {
    "tool_then_answer": tool_then_answer,
    "weather": weather,
    "judge": judge,
    "echo": echo,
    "length_stop": length_stop,
    "garbage": garbage,
}


def toy_prompt_logprobs(ids: list[int]) -> list[float | None]:
    """Deterministic prompt logprobs: a token seen earlier in the prompt is likely (-0.5),
    an unseen one less so (-2 to -3.5 by id); None for the first token, as servers report."""
    seen: set[int] = set()
    out: list[float | None] = []
    for i, token in enumerate(ids):
        out.append(None if i == 0 else (-0.5 if token in seen else -2.0 - (token % 7) / 4))
        seen.add(token)
    return out


def _prompts(prompt: Any) -> list[list[int]] | None:
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return [prompt]
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt)
    ):
        return prompt
    return None


# -- the server -----------------------------------------------------------------------------------


class OpenAIServer:
    """A real OpenAI-compatible server on 127.0.0.1 answering through ``responder``.

    Args:
        responder: the script (see the module docstring); default ``echo()``.
        delay_ms: fixed delay before every answer (models a model's latency).
        host, port: where to listen; port 0 picks a free port.
        model: the model id listed by ``/v1/models``.

    Example:
        >>> with OpenAIServer(scripted([(500, {'error': {'message': 'boom'}})])) as server:
        ...     import httpx
        ...     httpx.post(server.base_url + '/chat/completions', json={'messages': []}).status_code
        500
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        delay_ms: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "twinkle-test",
        logprob_fn: Callable[[list[int]], list[float | None]] | None = None,
    ) -> None:
        self.responder = responder or echo()
        self.logprob_fn = logprob_fn or toy_prompt_logprobs
        self.delay_s = delay_ms / 1000.0
        self.host = host
        self.port = port
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._server: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> Any:
        """The FastAPI application."""
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, Response

        app = FastAPI(title="twinkle scripted OpenAI server")

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "created": 0, "owned_by": "twinkle"}
                ],
            }

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Any:
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                return JSONResponse(
                    {"error": {"message": "'messages' must be a list"}}, status_code=400
                )
            self.requests.append(body)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            result = self.responder(body)
            if inspect.isawaitable(result):
                result = await result
            reply = self._to_reply(body, result)
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.raw is not None:
                return Response(
                    reply.raw,
                    status_code=reply.status,
                    headers=reply.headers,
                    media_type=reply.headers.get("content-type", "text/plain"),
                )
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

        @app.post("/v1/completions")
        async def text_completions(request: Request) -> Any:
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
            prompts = _prompts(body.get("prompt")) if isinstance(body, dict) else None
            if prompts is None:
                message = "this test server scores token-id prompts only (a list of ints)"
                return JSONResponse({"error": {"message": message}}, status_code=400)
            self.requests.append(body)
            choices = []
            for i, ids in enumerate(prompts):
                lps = self.logprob_fn(list(ids))
                choice: dict[str, Any] = {"index": i, "text": "", "finish_reason": "length"}
                if body.get("echo") and body.get("logprobs") is not None:
                    choice["logprobs"] = {
                        "tokens": [str(t) for t in ids],
                        "token_logprobs": lps,
                        "top_logprobs": None,
                        "text_offset": [0] * len(ids),
                    }
                if body.get("prompt_logprobs") is not None:
                    choice["prompt_logprobs"] = [
                        None if lp is None else {str(t): {"logprob": lp, "rank": 1}}
                        for t, lp in zip(ids, lps)
                    ]
                choices.append(choice)
            n_tokens = sum(len(p) for p in prompts)
            return {
                "id": f"cmpl-{next(_ids)}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or self.model,
                "choices": choices,
                "usage": {
                    "prompt_tokens": n_tokens,
                    "completion_tokens": 0,
                    "total_tokens": n_tokens,
                },
            }

        return app

    def _to_reply(self, request: dict[str, Any], result: Any) -> Reply:
        if isinstance(result, Reply):
            return result
        if isinstance(result, tuple) and len(result) == 2:
            status, body = result
            return (
                Reply(raw=body, status=status)
                if isinstance(body, str)
                else Reply(body=body, status=status)
            )
        if isinstance(result, dict) and "choices" in result:
            return Reply(body=result)
        n = int(request.get("n") or 1)
        replies = result if isinstance(result, list) else [result] * n
        return Reply(body=chat_completion(request, replies, self.model))

    # -- thread mode ------------------------------------------------------------------------------
    def start(self) -> Self:
        from twinkle.utils.serving import ThreadedServer

        self._server = ThreadedServer(
            self.app(),
            self.host,
            self.port,
            name="openai-test-server",
            lifespan="off",
            timeout_graceful_shutdown=1,
        ).start()
        self.port = self._server.port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- process mode -----------------------------------------------------------------------------
    @staticmethod
    def subprocess(
        delay_ms: float = 0.0, policy: str = "tool_then_answer", port: int = 0, turns: int = 1
    ) -> "ServerProcess":
        """Run a server with a named policy in a child process (a context manager)."""
        return ServerProcess(delay_ms=delay_ms, policy=policy, port=port, turns=turns)


class ServerProcess:
    """Handle on ``python -m twinkle.testing.openai_server`` running as a child process."""

    def __init__(self, delay_ms: float, policy: str, port: int, turns: int) -> None:
        self.args = [
            sys.executable,
            "-m",
            "twinkle.testing.openai_server",
            "--port",
            str(port),
            "--delay-ms",
            str(delay_ms),
            "--policy",
            policy,
            "--turns",
            str(turns),
        ]
        self.base_url = ""
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        self._proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, text=True)
        # Wait for the ready line, but never forever: a child that hangs is an error too.
        poller = select.poll()  # not select: it refuses descriptors numbered past 1024
        poller.register(self._proc.stdout, select.POLLIN)
        ready = poller.poll(60_000)
        line = self._proc.stdout.readline().strip() if ready and self._proc.stdout else ""
        if not line.startswith("http"):
            self.__exit__()
            raise RuntimeError(f"the test OpenAI server process did not start (got {line!r})")
        self.base_url = line
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--policy", choices=sorted(POLICIES), default="tool_then_answer")
    parser.add_argument("--turns", type=int, default=1, help="tool turns for tool_then_answer")
    args = parser.parse_args(argv)
    responder = (
        POLICIES[args.policy](args.turns)
        if args.policy in ("tool_then_answer", "weather")
        else POLICIES[args.policy]()
    )
    server = OpenAIServer(responder, delay_ms=args.delay_ms, host=args.host, port=args.port)
    server.start()
    print(server.base_url, flush=True)
    try:
        while server._server is not None and server._server.running:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
