"""The lean transport of ``OpenAI(transport='lean')``: chat completions over a small HTTP/1.1
keep-alive pool on asyncio, with ``orjson``, and none of the SDK's layers.

Why not the SDK, or ``httpx``: at a few hundred calls in flight a rollout worker is bound by
client CPU per call, not by the endpoint. The SDK spends about 2 ms of CPU per call on a busy
two-core machine (request transformation, response models, and an ``httpcore`` pool that
probes every idle connection on every request). ``httpx`` 0.28 with its default pool is worse
at that concurrency (its pool scans requests times connections); ``httpx2`` (the SDK's own
HTTP stack) with ``orjson`` still spends about 0.6 of the SDK's CPU. A chat-completions call
needs very little of HTTP: one ``POST`` with a JSON body, one JSON reply. Here a call costs a
pool pop, one socket write, header parsing and one ``orjson`` decode.

What it does: HTTP/1.1 with keep-alive; ``Content-Length``, ``chunked`` and read-until-close
bodies; gzip/deflate bodies (it asks for none); TLS for ``https`` URLs (the system's default
certificates); one pool per event loop, which grows to the number of calls in flight (a
rollout's ``concurrency``) and keeps them all alive, or at most ``max_connections`` when that
is given (further calls wait for a free connection). A timer bounds connecting and waiting
for the reply (``timeout``). No HTTP proxies: behind a proxy use the SDK transport.

Errors are raised as ``APICallError`` with the kind, HTTP status and message the SDK path
reports (``'RateLimitError: Error code: 429 - <message>'``, ``'APITimeoutError: Request
timed out.'``, ``'APIConnectionError: Connection error.'``...) and the server's
``Retry-After`` as ``retry_after``; ``OpenAI`` retries them exactly as it retries the SDK's.

Example:
    >>> client = LeanClient('http://127.0.0.1:8000/v1', {'Authorization': 'Bearer x'})
    >>> client.host, client.port, client.path
    ('127.0.0.1', 8000, '/v1/chat/completions')
"""

from __future__ import annotations

import asyncio
import json
import ssl
import zlib
from typing import Any
from urllib.parse import urlencode, urlsplit

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
_MAX_HEAD = 64 * 1024
_TIMEOUT = "APITimeoutError: Request timed out."
_CONNECTION = "APIConnectionError: Connection error."


def status_error(status: int, body: bytes, headers: dict[str, str]) -> APICallError:
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


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; ``request`` sends bytes and returns a future of
    ``(status, headers, body)``."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.lost = False
        self.waiter: asyncio.Future[Any] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.buf = bytearray()
        self.status, self.length, self.chunked, self.start, self.pos = 0, -1, False, 0, 0
        self.keep_alive, self.parts, self.headers = True, [], {}

    # -- asyncio callbacks -----------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._fail(ConnectionError(f"connection lost: {exc}"))

    def eof_received(self) -> bool:
        self.lost = True
        if self.waiter is not None and self.status and self.length < 0 and not self.chunked:
            self._done(bytes(self.buf[self.start :]))  # the body ran until the server closed
        else:
            self._fail(ConnectionError("the server closed the connection"))
        return False

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection is not reusable
            self.close()
            return
        self.buf += data
        try:
            self._advance()
        except (ValueError, IndexError) as exc:
            self._fail(ConnectionError(f"malformed HTTP reply: {exc}"))
            self.close()

    # -- requests ----------------------------------------------------------------------------
    def request(self, data: bytes, timeout: float | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        self.buf.clear()
        self.status, self.length, self.chunked, self.start, self.pos = 0, -1, False, 0, 0
        self.keep_alive, self.parts = True, []
        self.waiter = waiter = loop.create_future()
        if timeout is not None:
            self.timer = loop.call_later(timeout, self._timed_out)
        self.transport.write(data)
        return waiter

    def _advance(self) -> None:
        buf = self.buf
        while not self.status:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("response head too large")
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            version, status = lines[0].split(" ", 2)[:2]
            status_code = int(status)
            if 100 <= status_code < 200:  # an interim reply: the real one follows
                del buf[: end + 4]
                continue
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.status, self.headers, self.start = status_code, headers, end + 4
            connection = headers.get("connection", "").lower()
            self.keep_alive = (
                "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
            )
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.chunked, self.pos = True, end + 4
            elif "content-length" in headers:
                self.length = int(headers["content-length"])
            elif status_code in (204, 304):
                self.length = 0
            else:
                self.keep_alive = False  # read until the server closes
        if self.chunked:
            self._chunks()
        elif self.length >= 0 and len(buf) - self.start >= self.length:
            self._done(bytes(buf[self.start : self.start + self.length]))

    def _chunks(self) -> None:
        buf, pos = self.buf, self.pos
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
            if size == 0:
                if buf.find(b"\r\n\r\n", eol) >= 0:  # the end, after any trailers
                    self._done(b"".join(self.parts))
                break
            if len(buf) < eol + 4 + size:
                break
            self.parts.append(bytes(buf[eol + 2 : eol + 2 + size]))
            pos = eol + 4 + size
        self.pos = pos

    def _done(self, body: bytes) -> None:
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.headers, body))

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _timed_out(self) -> None:
        self.timer = None
        self._fail(TimeoutError())
        self.close()

    @property
    def reusable(self) -> bool:
        return not self.lost and self.keep_alive and self.waiter is None

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


def _timeouts(timeout: Any) -> tuple[float | None, float | None]:
    """(connect, reply) seconds from a number, None, or an ``httpx.Timeout``-like object."""
    if timeout is None or isinstance(timeout, (int, float)):
        return timeout, timeout
    return getattr(timeout, "connect", None), getattr(timeout, "read", None)


class LeanClient:
    """Chat completions for one event loop over a keep-alive connection pool.

    Args:
        base_url: the endpoint's base URL (``.../v1``); ``/chat/completions`` is appended.
        headers: headers sent with every request (``Authorization``...).
        timeout: seconds for connecting and for the reply; a number, None or an
            ``httpx.Timeout`` (its ``connect`` and ``read``).
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
        url = urlsplit(base_url.rstrip("/") + "/chat/completions")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.path = url.path
        query = "&".join(q for q in (url.query, urlencode(default_query or {})) if q)
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.timeout = timeout
        default_port = self.port == (443 if self.ssl else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.headers = {
            "Host": host if default_port else f"{host}:{self.port}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": "twinkle-lean/1",
            **(headers or {}),
        }
        self._query = query
        self._head = self._make_head(self.headers, query)
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._open: set[_Connection] = set()

    def _make_head(self, headers: dict[str, Any], query: str) -> bytes:
        lines = [f"POST {self.path}{'?' + query if query else ''} HTTP/1.1"]
        # Non-string values (the SDK's ``Omit``) remove a header, as they do in the SDK.
        lines += [f"{k}: {v}" for k, v in headers.items() if isinstance(v, str)]
        if any("\r" in line or "\n" in line for line in lines):
            raise ValueError(f"a header or the URL holds a line break: {lines!r}")
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def create(self, **body: Any) -> Completion:
        """POST ``body`` (the SDK's ``chat.completions.create`` keyword arguments)."""
        head, timeout = self._head, body.pop("timeout", self.timeout)
        headers, query = body.pop("extra_headers", None), body.pop("extra_query", None)
        if headers or query:
            merged = {**self.headers}
            lowered = {k.lower(): k for k in merged}
            for key, value in (headers or {}).items():
                merged.pop(lowered.get(key.lower(), key), None)
                merged[key] = value
            extra = urlencode(query or {})
            head = self._make_head(merged, "&".join(q for q in (self._query, extra) if q))
        extra_body = body.pop("extra_body", None)
        if extra_body:
            body.update(extra_body)
        try:
            payload = orjson.dumps(body)
        except TypeError as exc:
            raise APICallError("invalid_response", f"TypeError: {exc}") from exc
        status, reply_headers, data = await self._send(
            head + str(len(payload)).encode() + b"\r\n\r\n" + payload, timeout
        )
        encoding = reply_headers.get("content-encoding", "").lower()
        if encoding in ("gzip", "deflate"):
            data = zlib.decompress(data, 16 + zlib.MAX_WBITS if encoding == "gzip" else 0)
        if status >= 300:
            raise status_error(status, data, reply_headers)
        return parse_completion(decode_json(data))

    async def _send(self, data: bytes, timeout: Any) -> tuple[int, dict[str, str], bytes]:
        connect_timeout, reply_timeout = _timeouts(timeout)
        if self._slots is not None:
            await self._slots.acquire()
        try:
            for _ in range(2):
                conn = None
                while self._idle:
                    candidate = self._idle.pop()
                    if not candidate.lost:
                        conn = candidate
                        break
                    self._open.discard(candidate)
                reused = conn is not None
                if conn is None:
                    conn = await self._connect(connect_timeout)
                try:
                    result = await conn.request(data, reply_timeout)
                except TimeoutError as exc:
                    self._discard(conn)
                    raise APICallError("timeout", _TIMEOUT) from exc
                except OSError as exc:
                    self._discard(conn)
                    if reused and not conn.status and not conn.buf:
                        continue  # a kept-alive connection the server had closed: once more
                    raise APICallError("connection", _CONNECTION) from exc
                except BaseException:  # cancelled mid-request: the reply would arrive unasked
                    self._discard(conn)
                    raise
                if conn.reusable:
                    self._idle.append(conn)
                else:
                    self._discard(conn)
                return result
            raise APICallError("connection", _CONNECTION)
        finally:
            if self._slots is not None:
                self._slots.release()

    async def _connect(self, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            connecting = loop.create_connection(
                _Connection,
                self.host,
                self.port,
                ssl=self.ssl,
                server_hostname=self.host if self.ssl else None,
            )
            _, conn = await asyncio.wait_for(connecting, timeout)
        except TimeoutError as exc:
            raise APICallError("timeout", _TIMEOUT) from exc
        except OSError as exc:
            raise APICallError("connection", _CONNECTION) from exc
        self._open.add(conn)
        return conn

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    async def aclose(self) -> None:
        """Close every connection of the pool."""
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks
