"""The ASGI app: E2B's control plane and the in-sandbox daemon's (envd) protocol on one port.

A request belongs to the control plane when its path is a control-plane path
(``/sandboxes...``, ``/v2/sandboxes...``) or it names no sandbox; otherwise the
``E2b-Sandbox-Id`` header routes it to that sandbox's envd routes (:mod:`.envd`). The app is
plain ASGI served by uvicorn rather than a framework: the routes are few, the handlers stay
cheap, and the process stream controls its own chunked response.

Authentication: every control-plane request needs ``X-API-KEY``; every envd request needs
the sandbox's ``X-Access-Token`` (handed out by create/connect) or the API key, checked
before the sandbox is looked up, so that an unknown id answers 401 like a wrong token.

Request values (timeouts, body sizes) are checked against the ranges documented in
:mod:`twinkle.sandbox.validation`; a value outside them answers 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import time
from typing import Any
from urllib.parse import parse_qs

from twinkle.sandbox.asgi_io import BodyTooLarge, read_body, send_empty, send_json
from twinkle.sandbox.envd import Envd
from twinkle.sandbox.sandbox import SandboxManager, SetupError
from twinkle.sandbox.validation import MAX_CONTROL_BODY, InvalidRequest, timeout_seconds

log = logging.getLogger(__name__)

_SANDBOX_PATH = re.compile(r"^/(?:v2/)?sandboxes(?:/(?P<id>[^/]+)(?:/(?P<action>[a-z]+))?)?/?$")


class SandboxApp:
    """ASGI app over a :class:`SandboxManager`.

    Args:
        manager: the sandboxes.
        api_key: the key every control-plane request must send as ``X-API-KEY``.

    Example::

        app = SandboxApp(manager, api_key='secret')
        uvicorn.run(app, host='127.0.0.1', port=49983)
    """

    def __init__(self, manager: SandboxManager, api_key: str) -> None:
        if not api_key:
            raise ValueError("api_key must not be empty")
        self.manager = manager
        self.api_key = api_key.encode()
        self.envd = Envd(manager)
        self._reaper: asyncio.Task[None] | None = None
        #: The serving event loop (set at startup), for shutting down from another thread.
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- ASGI plumbing -------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path, method = scope["path"], scope["method"]
        query = {k: v[0] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
        try:
            if _SANDBOX_PATH.match(path) or "e2b-sandbox-id" not in headers:
                await self._control(receive, send, method, path, headers)
            else:
                await self._envd(receive, send, method, path, headers, query)
        except Exception as exc:  # a handler bug must answer 500, not drop the connection
            log.exception("sandbox server error on %s %s", method, path)
            # Fails only if the reply had already started; the connection then just closes.
            with contextlib.suppress(Exception):
                await send_json(send, 500, {"code": 500, "message": f"internal error: {exc}"})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.loop = asyncio.get_running_loop()
                self._reaper = asyncio.create_task(self.manager.reap_forever())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._reaper is not None:
                    self._reaper.cancel()
                self.manager.shutdown(wait_files=False)  # stop() waits for the files
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _key_ok(self, headers: dict[str, str]) -> bool:
        return hmac.compare_digest(headers.get("x-api-key", "").encode(), self.api_key)

    # -- control plane -------------------------------------------------------------------
    async def _control(
        self,
        receive: Any,
        send: Any,
        method: str,
        path: str,
        headers: dict[str, str],
    ) -> None:
        oversize = None
        try:
            body = await read_body(receive, MAX_CONTROL_BODY)
        except BodyTooLarge as exc:
            body, oversize = b"", str(exc)
        if not self._key_ok(headers):
            await send_json(
                send, 401, {"code": 401, "message": "Invalid or missing API key (X-API-KEY)"}
            )
            return
        if oversize is not None:
            await send_json(send, 400, {"code": 400, "message": oversize})
            return
        if path == "/health":
            await send_json(send, 200, {"status": "ok", "sandboxes": len(self.manager.sandboxes)})
            return
        match = _SANDBOX_PATH.match(path)
        if match is None:
            await send_json(send, 404, {"code": 404, "message": f"no route {method} {path}"})
            return
        sid, action = match["id"], match["action"]
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            data = None
        if not isinstance(data, dict):
            await send_json(
                send, 400, {"code": 400, "message": "request body is not a JSON object"}
            )
            return
        try:
            await self._sandboxes(send, method, path, sid, action, data)
        except InvalidRequest as exc:
            await send_json(send, 400, {"code": 400, "message": str(exc)})

    async def _sandboxes(
        self,
        send: Any,
        method: str,
        path: str,
        sid: str | None,
        action: str | None,
        data: dict[str, Any],
    ) -> None:
        if sid is None and method == "POST":
            await self._create(send, data)
        elif sid is None and method == "GET":
            listed = [
                s.info(detail=True)
                for s in list(self.manager.sandboxes.values())
                if s.end_at > time.time()
            ]
            await send_json(send, 200, listed)
        elif sid is not None and action is None and method == "DELETE":
            if self.manager.kill(sid):
                await send_empty(send, 204)
            else:
                await send_json(send, 404, {"code": 404, "message": f"sandbox {sid} not found"})
        else:
            try:
                sbx = self.manager.get(sid or "")
            except KeyError:
                await send_json(send, 404, {"code": 404, "message": f"sandbox {sid} not found"})
                return
            if action is None and method == "GET":
                await send_json(send, 200, sbx.info(detail=True))
            elif action in ("timeout", "refreshes") and method == "POST":
                name = "timeout" if "timeout" in data else "duration"
                seconds = timeout_seconds(data.get(name), name)
                sbx.end_at = time.time() + seconds
                await send_empty(send, 204)
            elif action == "connect" and method == "POST":
                seconds = timeout_seconds(data.get("timeout"))
                sbx.end_at = max(sbx.end_at, time.time() + seconds)
                await send_json(send, 200, sbx.info())
            else:
                await send_json(send, 404, {"code": 404, "message": f"no route {method} {path}"})

    async def _create(self, send: Any, data: dict[str, Any]) -> None:
        template = data.get("templateID") or "base"
        if not isinstance(template, str):
            raise InvalidRequest(f"templateID must be a string, got {template!r:.100}")
        seconds = timeout_seconds(data.get("timeout"))
        envs, metadata = (_str_map(data, key) for key in ("envVars", "metadata"))
        try:
            sbx = await self.manager.create(
                template, seconds, envs, metadata, allow_internet=data.get("allow_internet_access")
            )
        except KeyError as exc:
            await send_json(send, 404, {"code": 404, "message": str(exc.args[0])})
        except OverflowError as exc:
            await send_json(send, 429, {"code": 429, "message": str(exc)})
        except SetupError as exc:
            await send_json(send, 500, {"code": 500, "message": str(exc)})
        else:
            await send_json(send, 201, sbx.info())

    # -- envd ----------------------------------------------------------------------------
    async def _envd(
        self,
        receive: Any,
        send: Any,
        method: str,
        path: str,
        headers: dict[str, str],
        query: dict[str, str],
    ) -> None:
        sid = headers["e2b-sandbox-id"]
        token = headers.get("x-access-token", "").encode()
        # Checked before the lookup, the same way for live, ended and unknown ids: a caller
        # without this id's token (or the API key) cannot learn whether the sandbox exists.
        if not (
            hmac.compare_digest(token, self.manager.access_token(sid).encode())
            or self._key_ok(headers)
        ):
            await read_body(receive)
            await send_json(send, 401, {"code": 401, "message": "Invalid or missing access token"})
            return
        try:
            sbx = self.manager.get(sid)
        except KeyError:
            await read_body(receive)
            # The SDK reads this 502 wording as "sandbox not running" (killed or expired).
            await send_json(send, 502, {"code": 502, "message": f"The sandbox {sid} was not found"})
            return
        await self.envd.handle(receive, send, method, path, headers, query, sbx)


def _str_map(data: dict[str, Any], key: str) -> dict[str, str]:
    """A JSON object of the request as a ``str -> str`` dict (absent or null: empty)."""
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise InvalidRequest(f"{key} must be an object, got {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}
