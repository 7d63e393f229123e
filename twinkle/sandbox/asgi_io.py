"""Small ASGI helpers shared by the control plane and the envd routes: read a body, reply."""

from __future__ import annotations

import json
from typing import Any

from twinkle.errors import SandboxError


class BodyTooLarge(SandboxError, ValueError):
    """A request body over its limit (the body was read to its end and discarded)."""


async def read_body(receive: Any, limit: int | None = None) -> bytes:
    """The whole request body; past ``limit`` bytes, BodyTooLarge once the rest is discarded.

    The rest is read rather than left unread so that the reply reaches a client that is still
    sending, and the connection stays usable; only ``limit`` bytes are ever held.
    """
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is None or size <= limit:
            chunks.append(chunk)
        else:
            chunks.clear()
        if not message.get("more_body"):
            break
    if limit is not None and size > limit:
        raise BodyTooLarge(f"request body of {size} bytes is over the limit of {limit} bytes")
    return b"".join(chunks)


async def send_raw(send: Any, status: int, body: bytes, ctype: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Any, status: int, payload: Any) -> None:
    await send_raw(
        send, status, json.dumps(payload, separators=(",", ":")).encode(), b"application/json"
    )


async def send_empty(send: Any, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b""})
