"""The lean transport of ``OpenAI(transport='lean')``: chat completions over one shared
``aiohttp.ClientSession`` (HTTP/1.1 keep-alive, C response parser) with ``orjson``, and none
of the SDK's layers.

Why: at a few hundred calls in flight a rollout worker is bound by client CPU per call, not
by the endpoint; a chat-completions call needs one ``POST`` with a JSON body and one JSON
reply. Why ``aiohttp`` and not ``httpx``: measured on the weather workload of
``bench/rollout.py --parts lean`` (``APIMultiTurnRollout``, 50 ms latency, concurrency 256,
2,048 calls; 2 shared cores at load 4-9; best of 3, three to four runs) against the issue's
targets, client CPU per call <= 1/3 of the SDK's and throughput >= 2x the bare
``AsyncOpenAI`` loop:

==============================================  ============  =========  ================
client                                          CPU per call  vs SDK     vs bare SDK loop
==============================================  ============  =========  ================
``OpenAI`` over the SDK (``httpx2`` inside)     2.2-2.7 ms    1          0.7-1.5x
``httpx`` 0.28 ``AsyncClient``, tuned [1]_      7.6-9.5 ms    3.6x       0.3x
``httpx2`` 2.16 ``AsyncClient``, tuned [1]_     1.2-1.8 ms    0.56-0.68  0.9-2.4x
``aiohttp`` 3.14 ``ClientSession`` (used)       0.20-0.28 ms  0.08-0.11  2.7-9.5x
a hand-written asyncio pool (used before)       0.10-0.12 ms  0.04-0.05  3.9-9.4x
==============================================  ============  =========  ================

.. [1] HTTP/1.1 only, ``Limits(max_connections=256, max_keepalive_connections=256)``, one
   client, ``content=orjson.dumps(...)``, ``aread()`` and ``orjson.loads``. ``httpcore``'s
   pool re-scans every connection for every queued request and polls each idle socket
   (``_assign_requests_to_connections``; encode/httpcore#1035): at 256 connections that is
   most of the client's CPU.

``aiohttp`` is the one library that meets both targets, so it is used, though it spends
about twice the CPU of the hand-written pool (and reaches 0.12-0.31 of the physical limit,
concurrency / latency, where the pool reached 0.18-0.46 and the SDK 0.03-0.07).

What it does: one session per event loop (``OpenAI`` keeps one per loop); a pool that grows
to the number of calls in flight (a rollout's ``concurrency``), or at most
``max_connections``; TLS for ``https`` URLs (the system's default certificates);
gzip/deflate replies; redirects followed, as the SDK follows them; no cookies kept and no
proxies (behind a proxy use the SDK transport). ``timeout`` bounds connecting (and waiting
for a pooled connection) and each wait for reply bytes, as the SDK's ``httpx.Timeout``
does. Idle connections are closed after 4 s, before ``uvicorn``-served endpoints (vLLM,
SGLang) drop theirs at 5 s; a request whose connection the server closed or reset without
a reply (mostly a kept-alive one it had just dropped) is sent once more, at once, as
``aiohttp`` does for idempotent methods.

Errors are raised as ``APICallError`` with the kind, HTTP status and message the SDK path
reports (``'RateLimitError: Error code: 429 - <message>'``, ``'APITimeoutError: Request
timed out.'``, ``'APIConnectionError: Connection error.'``...) and the server's
``Retry-After`` as ``retry_after``; ``OpenAI`` retries them exactly as it retries the SDK's.

Example:
    >>> client = LeanClient('http://127.0.0.1:8000/v1', {'Authorization': 'Bearer x'})
    >>> client.url
    'http://127.0.0.1:8000/v1/chat/completions'
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import orjson

from twinkle.protocol.base import APICallError, Completion

#: The SDK's exception class per HTTP status, so that messages read the same on both paths.
_STATUS_NAMES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
_TIMEOUT = "APITimeoutError: Request timed out."
_CONNECTION = "APIConnectionError: Connection error."
#: Below the 5 s keep-alive of uvicorn, which serves vLLM and SGLang.
_KEEPALIVE_S = 4.0


def status_error(status: int, body: bytes, headers: Any) -> APICallError:
    """The ``APICallError`` the SDK path reports for an HTTP error reply."""
    name = _STATUS_NAMES.get(status) or ("InternalServerError" if status >= 500 else "")
    message = f"Error code: {status}"
    try:
        data = json.loads(body.decode("utf-8", "replace").strip())
    except ValueError:
        pass
    else:
        error = data.get("error", data) if isinstance(data, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        if isinstance(text, str) and text:
            message += f" - {text}"
    kind = (
        "rate_limit"
        if status == 429
        else "server"
        if status >= 500 or status in (408, 409)
        else "client"
    )
    error = APICallError(kind, f"{name or 'APIStatusError'}: {message}", status=status)
    try:
        error.retry_after = float(headers.get("retry-after"))  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    return error


def parse_completion(data: Any) -> Completion:
    """A chat-completion JSON body as a ``Completion`` (what ``OpenAI.parse_response`` makes
    of the SDK's object); anything unusable raises ``APICallError('invalid_response')``."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise APICallError("invalid_response", f"no choices in reply: {str(data)[:200]!r}")
    messages = []
    for choice in choices:
        msg = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(msg, dict):
            raise APICallError("invalid_response", "a choice without a message")
        out: dict[str, Any] = {"role": "assistant"}
        content = msg.get("content")
        if content is not None:
            out["content"] = content
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        if reasoning:
            out["reasoning_content"] = reasoning
        calls = msg.get("tool_calls")
        if calls:
            try:
                out["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["function"]["name"],
                            "arguments": call["function"]["arguments"],
                        },
                    }
                    for call in calls
                ]
            except (KeyError, TypeError) as exc:
                raise APICallError(
                    "invalid_response", f"{type(exc).__name__}: a malformed tool call: {exc}"
                ) from exc
        if choice.get("finish_reason") is not None:
            out["finish_reason"] = choice["finish_reason"]
        messages.append(out)
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        messages=messages,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )


def decode_json(body: bytes) -> Any:
    """``orjson.loads``; on failure, the standard library's error (the SDK path's message)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            return json.loads(body.decode("utf-8", "replace"))
        except ValueError as exc:
            raise APICallError("invalid_response", f"{type(exc).__name__}: {exc}") from exc


def _timeout(timeout: Any) -> aiohttp.ClientTimeout:
    """``aiohttp``'s timeouts from a number, None, or an ``httpx.Timeout``-like object: its
    ``connect`` (pool wait and connecting) and ``read`` (each wait for reply bytes)."""
    if timeout is None or isinstance(timeout, (int, float)):
        connect = read = timeout
    else:
        connect, read = getattr(timeout, "connect", None), getattr(timeout, "read", None)
    return aiohttp.ClientTimeout(total=None, connect=connect, sock_read=read)


def _clean_headers(headers: dict[str, Any]) -> dict[str, str]:
    """String-valued headers; other values (the SDK's ``Omit``) remove a header, as they do
    in the SDK. A line break in a value raises ValueError before anything is sent."""
    out = {k: v for k, v in headers.items() if isinstance(v, str)}
    for key, value in out.items():
        if "\r" in key or "\n" in key or "\r" in value or "\n" in value:
            raise ValueError(f"header {key!r} holds a line break")
    return out


class LeanClient:
    """Chat completions for one event loop over one ``aiohttp`` keep-alive pool.

    Args:
        base_url: the endpoint's base URL (``.../v1``); ``/chat/completions`` is appended.
        headers: headers sent with every request (``Authorization``...).
        timeout: seconds for connecting and for each wait on the reply; a number, None or
            an ``httpx.Timeout`` (its ``connect`` and ``read``).
        max_connections: at most this many connections (None: one per call in flight).
        default_query: query parameters added to every request.
    """

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str] | None = None,
        timeout: Any = 180.0,
        max_connections: int | None = None,
        default_query: dict[str, Any] | None = None,
    ) -> None:
        url = base_url.rstrip("/") + "/chat/completions"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        query = urlencode(default_query or {})
        self.url = f"{url}{'&' if parts.query else '?'}{query}" if query else url
        self.headers = _clean_headers(
            {
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "twinkle-lean/1",
                **(headers or {}),
            }
        )
        self.timeout = _timeout(timeout)
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Built on first use: aiohttp binds a session to the running loop.
        connector = aiohttp.TCPConnector(
            limit=self.max_connections or 0, keepalive_timeout=_KEEPALIVE_S
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self.timeout, cookie_jar=aiohttp.DummyCookieJar()
        )
        return self._session

    async def create(self, **body: Any) -> Completion:
        """POST ``body`` (the SDK's ``chat.completions.create`` keyword arguments)."""
        headers, timeout = self.headers, body.pop("timeout", None)
        extra_headers, query = body.pop("extra_headers", None), body.pop("extra_query", None)
        if extra_headers:
            lowered = {k.lower(): k for k in headers}
            merged = dict(headers)
            for key, value in extra_headers.items():
                merged.pop(lowered.get(key.lower(), key), None)
                merged[key] = value
            headers = _clean_headers(merged)
        extra_body = body.pop("extra_body", None)
        if extra_body:
            body.update(extra_body)
        try:
            payload = orjson.dumps(body)
        except TypeError as exc:
            raise APICallError("invalid_response", f"TypeError: {exc}") from exc
        options: dict[str, Any] = {"data": payload, "headers": headers}
        if query:
            options["params"] = query
        if timeout is not None:
            options["timeout"] = _timeout(timeout)
        status, reply_headers, data = await self._send(options)
        if status >= 300:
            raise status_error(status, data, reply_headers)
        return parse_completion(decode_json(data))

    async def _send(self, options: dict[str, Any]) -> tuple[int, Any, bytes]:
        session = self._session or self._open()
        for resend in (True, False):
            try:
                async with session.post(self.url, **options) as resp:
                    return resp.status, resp.headers, await resp.read()
            except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one
                raise APICallError("timeout", _TIMEOUT) from exc
            except aiohttp.ClientConnectorError as exc:  # no connection: nothing was sent
                raise APICallError("connection", _CONNECTION) from exc
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # Closed or reset without a reply: mostly a kept-alive connection the server
                # had just dropped. The set aiohttp itself resends for idempotent methods.
                if not resend:
                    raise APICallError("connection", _CONNECTION) from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise APICallError("connection", _CONNECTION) from exc
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close every connection of the pool."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
            await asyncio.sleep(0)  # let the transports run their close callbacks
