"""``OpenAI``: the ``API`` over any ``/v1/chat/completions`` endpoint, via the official SDK.

The official ``openai`` package is used (imported on first use, so this module is light)
because every compatible server (vLLM, SGLang, Ollama, OpenAI) is tested against it.
``acomplete`` uses ``openai.AsyncOpenAI`` so a rollout keeps hundreds of calls in flight on
one thread; ``__call__`` uses the synchronous client.

Retries are ours rather than the SDK's (the SDK's are switched off unless ``client_kwargs``
sets ``max_retries``) so that the bound and back-off are explicit arguments, the attempt
count is reported, and tests can use short delays. Transient failures (429, 5xx, 408/409,
timeouts, refused or dropped connections) are retried ``max_retries`` times with
exponential back-off and full jitter, honouring ``Retry-After`` up to ``backoff_max_s``;
then an ``APICallError`` is raised (see ``twinkle.protocol.base``).

Request mapping from ``SamplingParams``: ``n=num_samples``, ``temperature``, ``top_p``;
``max_tokens``, ``seed``, ``stop`` (strings only) when set; ``logprobs``/``top_logprobs``
when ``logprobs`` is set; ``top_k`` and ``repetition_penalty`` when not at their defaults go
in ``extra_body`` (vLLM and SGLang read them there). ``trajectory['tools']`` becomes
``tools``. Keyword arguments (``extra_body=...`` and so on) pass straight to the SDK. The
history, tools and sampling scalars reach the SDK through ``extra_body`` (already plain JSON,
they skip its typed-parameter transformation, which costs a tenth of its CPU per call): the
request on the wire is the one ``create(messages=..., tools=..., ...)`` would send.

``OpenAI(..., transport='lean')`` sends the same requests without the SDK, over one
``aiohttp`` keep-alive session per event loop with ``orjson`` (``twinkle.protocol.lean``, which
says why not ``httpx``): same retries, ``Retry-After``, error kinds and messages, ``n``,
reasoning and tool calls, at about a tenth of the client CPU per call. The SDK stays the
default (proxies, and anything the SDK adds).

Example:
    >>> api = OpenAI(model='qwen3-8b', base_url='http://127.0.0.1:8000/v1', api_key='EMPTY')
    >>> api.model
    'qwen3-8b'
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import weakref
from typing import Any

from twinkle.data_format import Message, SamplingParams, Trajectory
from twinkle.errors import require
from twinkle.protocol.base import API, APICallError, Completion, request_message
from twinkle.utils.aio import run_sync

#: The SDK's stand-in key for a keyless endpoint; never sent (the header is omitted).
_KEYLESS = "keyless"
#: SDK client options that the lean transport sends as headers: (option, env var, header).
_LEAN_HEADERS = (
    ("organization", "OPENAI_ORG_ID", "OpenAI-Organization"),
    ("project", "OPENAI_PROJECT_ID", "OpenAI-Project"),
)
#: Fields of a request that are plain JSON already: the history (built by ``request_message``),
#: the tool schemas and the scalars from ``SamplingParams``. The SDK path sends them in
#: ``extra_body``, which the SDK merges into the JSON as is: the same request on the wire,
#: without the SDK's per-field type transformation of its typed parameters (for the chat
#: types an identity on plain JSON: no aliases, no formats), which walks every message and
#: schema on every call: 0.2-0.3 ms of CPU per call with a short tool-using history, a
#: tenth of the SDK's whole cost per call, and growing with the history.
_PLAIN_FIELDS = ("messages", "tools", "n", "temperature", "top_p", "max_tokens", "seed", "stop")
_PLAIN_FIELDS += ("logprobs", "top_logprobs")


def _sdk_body(body: dict[str, Any]) -> dict[str, Any]:
    """``build_request``'s keyword arguments with the plain fields moved to ``extra_body``
    (its own entries still win, as they do in the SDK). ``messages``, which ``create``
    requires, is passed as the SDK's ``omit``.

    Example:
        >>> out = _sdk_body({'model': 'm', 'messages': [], 'n': 1, 'extra_body': {'n': 2}})
        >>> out['extra_body'], type(out['messages']).__name__
        ({'messages': [], 'n': 2}, 'Omit')
    """
    plain = {}
    for key in _PLAIN_FIELDS:
        if key in body:
            plain[key] = body.pop(key)
    if plain:
        extra = body.get("extra_body")
        if extra:
            plain.update(extra)
        body["extra_body"] = plain
    if "messages" in plain:
        body["messages"] = _import_openai().omit
    return body


_LEAN_OPTIONS = frozenset(
    {"api_key", "base_url", "timeout", "max_retries", "default_headers", "default_query"}
    | {"organization", "project", "max_connections"}
)


def _import_openai() -> Any:
    # openai is a core dependency, not an extra: the hint names the package itself.
    return require("openai", "twinkle.protocol.openai", package="openai")


class OpenAI(API):
    """Chat client for an OpenAI-compatible endpoint, with bounded retries.

    Keyless endpoints work as written: with no ``api_key`` and no ``OPENAI_API_KEY``, requests
    carry **no** ``Authorization`` header (what ``vllm serve`` without ``--api-key``, SGLang and
    Ollama expect); an endpoint that needs a key then answers 401, reported as an
    ``APICallError``.

    Args:
        model: model name sent with each request.
        api_key: API key; None reads ``OPENAI_API_KEY``, and without it sends no key at all.
        base_url: endpoint base URL, e.g. ``http://localhost:8000/v1``.
        client_kwargs: extra keyword arguments for the SDK client (``timeout``, ``http_client``...).
        max_retries: retries after the first attempt for transient failures.
        backoff_s: first back-off; attempt k waits a random time in ``[0, backoff_s * 2**k]``.
        backoff_max_s: cap on one back-off (and on an honoured ``Retry-After``).
        keep_reasoning: re-send earlier ``reasoning_content`` in the history.
        transport: ``'sdk'`` (the default: the official client) or ``'lean'``
            (``twinkle.protocol.lean``, over ``aiohttp``: the same requests, replies, retries and
            errors at about a tenth of the SDK's CPU per call; for rollouts with hundreds of
            calls in flight). The lean transport takes ``client_kwargs`` ``timeout``,
            ``default_headers``, ``default_query``, ``organization``, ``project`` and
            ``max_connections`` (default: one connection per call in flight).

    Example:
        >>> from twinkle.data_format import SamplingParams
        >>> api = OpenAI(model='m', base_url='http://127.0.0.1:9/v1', api_key='x', max_retries=0)
        >>> row = {'messages': [{'role': 'user', 'content': 'hi'}]}
        >>> api(row, SamplingParams())  # doctest: +SKIP
        {'role': 'assistant', 'content': 'Hello!', 'finish_reason': 'stop'}
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        client_kwargs: dict[str, Any] | None = None,
        *,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        keep_reasoning: bool = False,
        transport: str = "sdk",
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff_s < 0 or backoff_max_s < 0:
            raise ValueError(
                f"backoff_s and backoff_max_s must be >= 0, got {backoff_s}, {backoff_max_s}"
            )
        self.model = model
        self.api_key = api_key
        self.base_url = base_url
        self.client_kwargs = dict(client_kwargs or {})
        self.client_kwargs.setdefault("max_retries", 0)
        # The SDK's default read timeout is 600 s; a stalled endpoint should fail (and be
        # retried) well before that, long generations included.
        self.client_kwargs.setdefault("timeout", 180.0)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.keep_reasoning = keep_reasoning
        if transport not in ("sdk", "lean"):
            raise ValueError(f"transport must be 'sdk' or 'lean', got {transport!r}")
        self.transport = transport
        unknown = set(self.client_kwargs) - _LEAN_OPTIONS if transport == "lean" else set()
        if unknown:
            raise ValueError(
                f"client_kwargs {sorted(unknown)} are SDK client options that the lean "
                f"transport does not use; it takes {sorted(_LEAN_OPTIONS)}"
            )
        self._client: Any = None
        self._lean_clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        # An httpx async pool belongs to the loop that opened it, so keep one client per loop.
        self._async_clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._last_async: tuple[weakref.ref[Any], Any] | None = (
            None  # skips the dict on the hot path
        )

    # -- clients -----------------------------------------------------------------------------
    @property
    def keyless(self) -> bool:
        """No key given and none in ``OPENAI_API_KEY``: requests carry no ``Authorization``."""
        return not (
            self.api_key or self.client_kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY")
        )

    def _kwargs(self) -> dict[str, Any]:
        kwargs = {"api_key": self.api_key or None, "base_url": self.base_url, **self.client_kwargs}
        if kwargs["api_key"] is None and self.keyless:
            # The SDK refuses to build a keyless client; this placeholder is never sent,
            # because build_request omits the header.
            kwargs["api_key"] = _KEYLESS
        elif kwargs["api_key"] is None:
            del kwargs["api_key"]  # the SDK reads OPENAI_API_KEY
        return kwargs

    @property
    def client(self) -> Any:
        """The synchronous ``openai.OpenAI`` client (built on first use)."""
        if self._client is None:
            self._client = _import_openai().OpenAI(**self._kwargs())
        return self._client

    def async_client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client of the running event loop."""
        loop = asyncio.get_running_loop()
        last = self._last_async
        if last is not None and last[0]() is loop:
            return last[1]
        client = self._async_clients.get(loop)
        if client is None:
            client = _import_openai().AsyncOpenAI(**self._kwargs())
            self._async_clients[loop] = client
        self._last_async = (weakref.ref(loop), client)
        return client

    def lean_client(self) -> Any:
        """The running event loop's ``LeanClient`` (``transport='lean'``), built on first use."""
        loop = asyncio.get_running_loop()
        client = self._lean_clients.get(loop)
        if client is None:
            from twinkle.protocol.lean import LeanClient

            options = dict(self.client_kwargs)
            options.pop("max_retries", None)
            key = self.api_key or options.pop("api_key", None) or os.environ.get("OPENAI_API_KEY")
            headers = dict(options.pop("default_headers", None) or {})
            for name, env, header in _LEAN_HEADERS:
                value = options.pop(name, None) or os.environ.get(env)
                if value:
                    headers.setdefault(header, value)
            if key:  # keyless: no Authorization header, as on the SDK path
                headers.setdefault("Authorization", f"Bearer {key}")
            base_url = (
                self.base_url
                or options.pop("base_url", None)
                or os.environ.get("OPENAI_BASE_URL")
                or "https://api.openai.com/v1"
            )
            options.pop("base_url", None)
            client = LeanClient(base_url, headers, **options)
            self._lean_clients[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's async client (call before the loop ends)."""
        loop = asyncio.get_running_loop()
        client = self._async_clients.pop(loop, None)
        self._last_async = None
        if client is not None:
            await client.close()
        lean = self._lean_clients.pop(loop, None)
        if lean is not None:
            await lean.aclose()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_async_clients"] = None
        state["_last_async"] = None
        state["_lean_clients"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._async_clients = weakref.WeakKeyDictionary()
        self._lean_clients = weakref.WeakKeyDictionary()

    # -- request and response ------------------------------------------------------------------
    def build_request(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> dict[str, Any]:
        """The keyword arguments for ``chat.completions.create``."""
        sp = sampling_params or SamplingParams()
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                request_message(m, self.keep_reasoning) for m in trajectory.get("messages") or []
            ],
            "n": sp.num_samples,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
        }
        if trajectory.get("tools"):
            body["tools"] = list(trajectory["tools"])
        if sp.max_tokens is not None:
            body["max_tokens"] = sp.max_tokens
        if sp.seed is not None:
            body["seed"] = sp.seed
        stops = [s for s in (sp.stop or []) if isinstance(s, str)]
        if stops:
            body["stop"] = stops
        if sp.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = sp.logprobs
        extra: dict[str, Any] = {}
        if sp.top_k != -1:
            extra["top_k"] = sp.top_k
        if sp.repetition_penalty != 1.0:
            extra["repetition_penalty"] = sp.repetition_penalty
        extra.update(kwargs.pop("extra_body", None) or {})
        if extra:
            body["extra_body"] = extra
        headers = kwargs.pop("extra_headers", None) or {}
        if self.keyless and self.transport == "sdk":
            # An endpoint without auth (vLLM's default): send no Authorization header at all
            # (the lean client has none to begin with).
            headers = {"Authorization": _import_openai().Omit(), **headers}
        if headers:
            body["extra_headers"] = headers
        body.update(kwargs)
        return body

    @staticmethod
    def parse_response(response: Any) -> Completion:
        """Map an SDK ``ChatCompletion`` to a ``Completion``; garbage raises ``APICallError``."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise APICallError("invalid_response", f"no choices in reply: {str(response)[:200]!r}")
        messages = []
        for choice in choices:
            msg = getattr(choice, "message", None)
            if msg is None:
                raise APICallError("invalid_response", "a choice without a message")
            out: Message = {"role": "assistant"}
            if msg.content is not None:
                out["content"] = msg.content
            extra = getattr(msg, "model_extra", None) or {}
            reasoning = (
                getattr(msg, "reasoning_content", None)
                or extra.get("reasoning_content")
                or extra.get("reasoning")
            )
            if reasoning:
                out["reasoning_content"] = reasoning
            if msg.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.function.name, "arguments": tc.function.arguments},
                    }
                    for tc in msg.tool_calls
                ]
            if choice.finish_reason is not None:
                out["finish_reason"] = choice.finish_reason
            messages.append(out)
        usage = getattr(response, "usage", None)
        return Completion(
            messages=messages,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
        )

    # -- retries -----------------------------------------------------------------------------
    def _translate(self, exc: Exception, attempts: int) -> tuple[APICallError, float | None]:
        """Our error for an SDK exception, and the server's ``Retry-After`` in seconds."""
        openai = _import_openai()
        if isinstance(exc, APICallError):
            exc.attempts = attempts
            return exc, getattr(exc, "retry_after", None)  # the lean transport's errors
        message = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, openai.APITimeoutError):
            return APICallError("timeout", message, attempts=attempts), None
        if isinstance(exc, openai.APIConnectionError):
            return APICallError("connection", message, attempts=attempts), None
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            kind = (
                "rate_limit"
                if status == 429
                else "server"
                if status >= 500 or status in (408, 409)
                else "client"
            )
            retry_after = None
            try:
                retry_after = float(exc.response.headers.get("retry-after"))
            except (TypeError, ValueError, AttributeError):
                pass
            return APICallError(kind, message, status=status, attempts=attempts), retry_after
        # Validation errors, undecodable bodies and other surprises: the reply is unusable.
        return APICallError("invalid_response", message, attempts=attempts), None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.backoff_max_s)
        return random.uniform(0.0, min(self.backoff_max_s, self.backoff_s * 2**attempt))

    async def acomplete(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> Completion:
        body = self.build_request(trajectory, sampling_params, **kwargs)
        lean = self.lean_client() if self.transport == "lean" else None
        if lean is not None:
            create = lean.create
        else:
            body, create = _sdk_body(body), self.async_client().chat.completions.create
        for attempt in range(self.max_retries + 1):
            try:
                # The lean transport parses the reply into a Completion itself.
                if lean is not None:
                    completion = await create(**body)
                else:
                    completion = self.parse_response(await create(**body))
                completion.attempts = attempt + 1
                return completion
            except Exception as exc:
                error, retry_after = self._translate(exc, attempt + 1)
                if not error.transient or attempt == self.max_retries:
                    if error is exc:
                        raise
                    raise error from exc
            await asyncio.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")

    def complete(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> Completion:
        """Synchronous ``acomplete``."""
        if self.transport == "lean":  # its own event loop, and a pool closed after the call
            return run_sync(self._complete_and_close(trajectory, sampling_params, **kwargs))
        body = _sdk_body(self.build_request(trajectory, sampling_params, **kwargs))
        for attempt in range(self.max_retries + 1):
            try:
                completion = self.parse_response(self.client.chat.completions.create(**body))
                completion.attempts = attempt + 1
                return completion
            except Exception as exc:
                error, retry_after = self._translate(exc, attempt + 1)
                if not error.transient or attempt == self.max_retries:
                    if error is exc:
                        raise
                    raise error from exc
            time.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")

    async def _complete_and_close(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> Completion:
        try:
            return await self.acomplete(trajectory, sampling_params, **kwargs)
        finally:
            await self.aclose()

    def __call__(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any
    ) -> Message | list[Message]:
        completion = self.complete(trajectory, sampling_params, **kwargs)
        if sampling_params is not None and sampling_params.num_samples > 1:
            return completion.messages
        return completion.messages[0]
