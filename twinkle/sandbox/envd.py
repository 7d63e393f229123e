"""The in-sandbox daemon's (envd) protocol: processes and files of one sandbox.

envd speaks Connect-RPC with the JSON codec. Unary calls are plain JSON; server streams
(``process.Process/Start``) are enveloped: a flag byte, a 4-byte big-endian length, then
JSON, ending with an end-stream envelope (flag ``0x02``) that carries ``{}`` or an error. The
framing is a few lines, so it is written here rather than built on generated server stubs.
Request values (body sizes, ``depth``, ``pid``, the timeout headers) are checked against the
ranges documented in :mod:`twinkle.sandbox.validation`; a value outside them answers 400.
File operations go through :mod:`twinkle.sandbox.files`,
which never follows a sandbox-made symlink on the host.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import json
import signal
import struct
import time
import zlib
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from twinkle.errors import SandboxError
from twinkle.sandbox.asgi_io import BodyTooLarge, read_body, send_empty, send_json, send_raw
from twinkle.sandbox.files import (
    IN_SANDBOX_SCRIPT,
    OutsideSandbox,
    ThroughSymlink,
    in_sandbox_entries,
    normalize,
)
from twinkle.sandbox.processes import CommandRefused, InitError, Process
from twinkle.sandbox.sandbox import Sandbox, SandboxManager
from twinkle.sandbox.validation import (
    MAX_LIST_DEPTH,
    MAX_PID,
    MAX_RPC_BODY,
    MAX_UPLOAD,
    InvalidRequest,
    connect_timeout_s,
    integer,
    keepalive_s,
)

_CONNECT_STATUS = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "already_exists": 409,
    "failed_precondition": 412,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "deadline_exceeded": 504,
    "resource_exhausted": 429,
}
_SIGNALS = {
    "SIGNAL_SIGKILL": signal.SIGKILL,
    "SIGNAL_SIGTERM": signal.SIGTERM,
    9: signal.SIGKILL,
    15: signal.SIGTERM,
}


class RpcError(SandboxError):
    """A Connect error: a code string from the Connect spec and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def envelope(payload: dict[str, Any], flags: int = 0) -> bytes:
    """One Connect stream envelope."""
    data = json.dumps(payload, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def parse_envelope(body: bytes) -> dict[str, Any]:
    """The JSON message of the first envelope of a Connect stream request body."""
    if len(body) < 5:
        raise RpcError("invalid_argument", "empty stream request")
    flags, length = struct.unpack(">BI", body[:5])
    if flags & 0x01:
        raise RpcError("unimplemented", "compressed messages are not supported")
    message = json.loads(body[5 : 5 + length] or b"{}")
    if not isinstance(message, dict):
        raise RpcError("invalid_argument", "the stream request is not a JSON object")
    return message


class Envd:
    """The envd routes, for requests already matched to a sandbox and authenticated.

    Args:
        manager: the sandboxes (commands are started through it).

    Example::

        envd = Envd(manager)
        await envd.handle(receive, send, 'POST', '/process.Process/List', {}, {}, sbx)
    """

    def __init__(self, manager: SandboxManager) -> None:
        self.manager = manager

    async def handle(
        self,
        receive: Any,
        send: Any,
        method: str,
        path: str,
        headers: dict[str, str],
        query: dict[str, str],
        sbx: Sandbox,
    ) -> None:
        """Answer one envd request for ``sbx``."""
        try:
            await self._route(receive, send, method, path, headers, query, sbx)
        except BodyTooLarge as exc:  # raised only before any reply was started
            await send_json(send, 400, {"code": "invalid_argument", "message": str(exc)})

    async def _route(
        self,
        receive: Any,
        send: Any,
        method: str,
        path: str,
        headers: dict[str, str],
        query: dict[str, str],
        sbx: Sandbox,
    ) -> None:
        if path == "/files" or path.startswith("/filesystem.Filesystem/"):
            try:  # the sandbox's files live in its own mounts: wait until its init is up
                await sbx.files.ready()
            except InitError as exc:
                await send_json(send, 502, {"code": "unavailable", "message": str(exc)})
                return
        if path == "/health":
            await _read_small(receive)
            await send_empty(send, 204)
        elif path == "/files" and method == "GET":
            await _read_small(receive)
            await self._read_file(send, sbx, query.get("path", ""))
        elif path == "/files" and method == "POST":
            await self._write_files(receive, send, sbx, headers, query)
        elif path == "/process.Process/Start":
            await self._start(receive, send, sbx, headers)
        elif path.startswith(("/process.Process/", "/filesystem.Filesystem/")):
            try:
                body = await read_body(receive, MAX_RPC_BODY)
                request = json.loads(body or b"{}")
                if not isinstance(request, dict):
                    raise InvalidRequest("the request body is not a JSON object")
                result = await self._unary(
                    sbx, path.rsplit("/", 1)[1], path.startswith("/process."), request
                )
            except RpcError as exc:
                await send_json(
                    send,
                    _CONNECT_STATUS.get(exc.code, 500),
                    {"code": exc.code, "message": exc.message},
                )
            except ValueError as exc:
                await send_json(send, 400, {"code": "invalid_argument", "message": str(exc)})
            else:
                await send_json(send, 200, result)
        else:
            await _read_small(receive)
            await send_json(
                send, 404, {"code": "unimplemented", "message": f"no envd route {method} {path}"}
            )

    async def _read_file(self, send: Any, sbx: Sandbox, raw_path: str) -> None:
        try:
            path = normalize(raw_path)
            try:
                data = sbx.files.read(path)
            except (ThroughSymlink, OutsideSandbox):
                data = await self._in_sandbox(sbx, ["cat", "--", path])
        except FileNotFoundError:
            await send_json(
                send, 404, {"code": 404, "message": f"path '{raw_path}' does not exist"}
            )
        except (IsADirectoryError, NotADirectoryError, ValueError) as exc:
            await send_json(send, 400, {"code": 400, "message": f"cannot read '{raw_path}': {exc}"})
        except PermissionError as exc:
            await send_json(send, 403, {"code": 403, "message": f"cannot read '{raw_path}': {exc}"})
        except InitError as exc:  # the sandbox's init died meanwhile (its view with it)
            await send_json(send, 502, {"code": 502, "message": f"cannot read: {exc}"})
        else:
            await send_raw(send, 200, data, b"application/octet-stream")

    async def _write_files(
        self,
        receive: Any,
        send: Any,
        sbx: Sandbox,
        headers: dict[str, str],
        query: dict[str, str],
    ) -> None:
        try:
            items = await self._uploads(receive, headers, query)
        except ValueError as exc:  # BodyTooLarge included
            await send_json(send, 400, {"code": 400, "message": f"cannot write: {exc}"})
            return
        await self._write_items(send, sbx, items)

    async def _uploads(
        self, receive: Any, headers: dict[str, str], query: dict[str, str]
    ) -> list[tuple[str, bytes]]:
        """The ``(path, bytes)`` items of an upload (each body at most ``MAX_UPLOAD``)."""
        ctype = headers.get("content-type", "")
        items: list[tuple[str, bytes]] = []
        if ctype.startswith("multipart/form-data"):
            # The stdlib MIME parser reads form-data; no multipart package needed.
            body = await read_body(receive, MAX_UPLOAD)
            head = f"Content-Type: {ctype}\r\n\r\n".encode("latin-1")
            parts = list(BytesParser(policy=HTTP).parsebytes(head + body).iter_parts())
            for part in parts:
                target = query.get("path") if len(parts) == 1 and query.get("path") else None
                items.append(
                    (target or part.get_filename() or "", part.get_payload(decode=True) or b"")
                )
        else:
            data = await read_body(receive, MAX_UPLOAD)
            if headers.get("content-encoding") == "gzip":
                data = _gunzip(data, MAX_UPLOAD)
            items.append((query.get("path", ""), data))
        return items

    async def _write_items(self, send: Any, sbx: Sandbox, items: list[tuple[str, bytes]]) -> None:
        written = []
        try:
            for raw_path, data in items:
                path = normalize(raw_path)
                try:
                    written.append(sbx.files.write(path, data))
                except ThroughSymlink:
                    await self._in_sandbox(
                        sbx,
                        ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "w", path],
                        stdin=data,
                    )
                    written.append({"name": path.rsplit("/", 1)[-1], "type": "file", "path": path})
        except OutsideSandbox as exc:
            await send_json(
                send, 403, {"code": 403, "message": f"cannot write '{exc}': read-only file system"}
            )
        except (IsADirectoryError, NotADirectoryError, ValueError, FileExistsError) as exc:
            await send_json(send, 400, {"code": 400, "message": f"cannot write: {exc}"})
        except PermissionError as exc:
            await send_json(send, 403, {"code": 403, "message": f"cannot write: {exc}"})
        except InitError as exc:  # the sandbox's init died meanwhile (its view with it)
            await send_json(send, 502, {"code": 502, "message": f"cannot write: {exc}"})
        except OSError as exc:  # ENOSPC: the sandbox's disk (its tmpfs size) is full
            status = 507 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 500
            await send_json(send, status, {"code": status, "message": f"cannot write: {exc}"})
        else:
            await send_json(send, 200, written)

    async def _in_sandbox(self, sbx: Sandbox, argv: list[str], stdin: bytes | None = None) -> bytes:
        """Run a helper command inside the sandbox, with its view and rights; stdout or OSError."""
        proc = await self.manager.start(sbx, argv[0], argv[1:], {}, None, stdin=stdin is not None)
        if stdin is not None:
            with contextlib.suppress(OSError):  # the helper may have failed before reading
                proc.write_stdin(stdin)
            proc.close_stdin()
        out, err = bytearray(), bytearray()
        while (event := await proc.next_event())[0] != "end":
            (out if event[0] == "stdout" else err).extend(event[1])
        if event[1] != 0:
            message = err.decode(errors="replace").strip()
            if "No such file" in message:
                raise FileNotFoundError(message)
            if "Is a directory" in message:
                raise IsADirectoryError(message)
            raise PermissionError(message or f"exit code {event[1]}")
        return bytes(out)

    async def _inspect(self, sbx: Sandbox, op: str, path: str, depth: int) -> list[Any]:
        """Stat or list ``path`` inside the sandbox, in its view and with its rights.

        Used for everything the host must not resolve: paths outside ``/home/user`` and
        ``/tmp`` (``/proc/self/root/...`` there is the sandbox's root, not the server's) and
        paths through symlinks. FileNotFoundError for what the sandbox cannot see.
        """
        argv = ["-I", "-S", "-c", IN_SANDBOX_SCRIPT, op, path, str(depth)]
        proc = await self.manager.start(sbx, "python3", argv, {}, "/", stdin=False)
        out, err = bytearray(), bytearray()
        while (event := await proc.next_event())[0] != "end":
            (out if event[0] == "stdout" else err).extend(event[1])
        return in_sandbox_entries(event[1], bytes(out), bytes(err), path)

    async def _unary(
        self, sbx: Sandbox, method: str, is_process: bool, req: dict[str, Any]
    ) -> dict[str, Any]:
        if is_process:
            return self._process_call(sbx, method, req)
        return await self._filesystem_call(sbx, method, req)

    def _process_call(self, sbx: Sandbox, method: str, req: dict[str, Any]) -> dict[str, Any]:
        if method == "List":
            return {
                "processes": [
                    {"pid": p.pid, "config": p.config, **({"tag": p.tag} if p.tag else {})}
                    for p in sbx.processes.values()
                ]
            }
        proc = _select(sbx, req.get("process") or {})
        if method == "SendSignal":
            proc.signal(_SIGNALS.get(req.get("signal"), signal.SIGKILL))
        elif method == "SendInput":
            chunk = (
                (req.get("input") or {}).get("stdin") or (req.get("input") or {}).get("pty") or ""
            )
            if not proc.stdin_open:
                raise RpcError("failed_precondition", f"stdin of process {proc.pid} is not open")
            proc.write_stdin(base64.b64decode(chunk))
        elif method == "CloseStdin":
            proc.close_stdin()
        else:
            raise RpcError("unimplemented", f"process.Process/{method} is not supported")
        return {}

    async def _filesystem_call(
        self, sbx: Sandbox, method: str, req: dict[str, Any]
    ) -> dict[str, Any]:
        files = sbx.files
        try:
            if method == "Stat":
                path = normalize(req.get("path", ""))
                try:
                    return {"entry": files.stat(path)}
                except (OutsideSandbox, ThroughSymlink):
                    return {"entry": (await self._inspect(sbx, "stat", path, 1))[0]}
            if method == "ListDir":
                path = normalize(req.get("path", ""))
                depth = integer(req.get("depth") or 0, "depth", 0, MAX_LIST_DEPTH) or 1
                try:
                    return {"entries": files.list_dir(path, depth)}
                except (OutsideSandbox, ThroughSymlink):
                    return {"entries": await self._inspect(sbx, "list", path, depth)}
            if method == "MakeDir":
                path = normalize(req.get("path", ""))
                files.make_dir(path)
                return {"entry": files.stat(path)}
            if method == "Remove":
                files.remove(normalize(req.get("path", "")))
                return {}
            if method == "Move":
                destination = normalize(req.get("destination", ""))
                files.move(normalize(req.get("source", "")), destination)
                return {"entry": files.stat(destination)}
        except FileNotFoundError as exc:
            raise RpcError("not_found", f"path not found: {exc}") from exc
        except FileExistsError as exc:
            raise RpcError("already_exists", f"path already exists: {exc}") from exc
        except (OutsideSandbox, PermissionError) as exc:
            raise RpcError(
                "permission_denied", f"read-only file system or no permission: {exc}"
            ) from exc
        except ThroughSymlink as exc:
            raise RpcError("failed_precondition", f"path goes through a symlink: {exc}") from exc
        except (NotADirectoryError, IsADirectoryError) as exc:
            raise RpcError("invalid_argument", str(exc)) from exc
        except InitError as exc:
            raise RpcError("unavailable", str(exc)) from exc
        except OSError as exc:
            raise RpcError("internal", f"{method} failed: {exc}") from exc
        raise RpcError("unimplemented", f"filesystem.Filesystem/{method} is not supported")

    # -- the process stream --------------------------------------------------------------
    async def _start(self, receive: Any, send: Any, sbx: Sandbox, headers: dict[str, str]) -> None:
        oversize: BodyTooLarge | None = None
        try:
            body = await read_body(receive, MAX_RPC_BODY)
        except BodyTooLarge as exc:
            body, oversize = b"", exc  # answered in the stream below
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/connect+json")],
            }
        )
        try:
            timeout = connect_timeout_s(headers.get("connect-timeout-ms"))
            keepalive = keepalive_s(headers.get("keepalive-ping-interval"))
            if oversize is not None:
                raise oversize
            req = parse_envelope(body)
            config = req.get("process") or {}
            if not isinstance(config, dict):
                raise InvalidRequest("process must be an object")
            if not config.get("cmd"):
                raise RpcError("invalid_argument", "process.cmd is required")
            proc = await self.manager.start(
                sbx,
                str(config["cmd"]),
                [str(a) for a in config.get("args") or []],
                {str(k): str(v) for k, v in (config.get("envs") or {}).items()},
                config.get("cwd"),
                stdin=bool(req.get("stdin", True)),
                tag=req.get("tag"),
            )
        except (RpcError, ValueError, OSError) as exc:
            if isinstance(exc, RpcError):
                error = exc
            else:
                code = "unavailable" if isinstance(exc, InitError) else "invalid_argument"
                if isinstance(exc, CommandRefused):  # the sandbox is up, at its process limit
                    code = "failed_precondition"
                error = RpcError(code, str(exc))
            await end_stream(send, {"error": {"code": error.code, "message": error.message}})
            return
        deadline = time.monotonic() + timeout if timeout is not None else None
        # A client that goes away does not stop the command (E2B semantics: a background
        # command outlives its handle); its deadline does. Sends after a disconnect are no-ops,
        # so the loop keeps draining the pipes until the command ends or the deadline kills it.
        await self._stream(send, proc, deadline, keepalive)

    async def _stream(
        self, send: Any, proc: Process, deadline: float | None, keepalive: float
    ) -> None:
        async def emit(event: dict[str, Any]) -> None:
            await send(
                {
                    "type": "http.response.body",
                    "body": envelope({"event": event}),
                    "more_body": True,
                }
            )

        await emit({"start": {"pid": proc.pid}})
        while True:
            # Checked before every wait, so a command that never stops printing still ends.
            if deadline is not None and time.monotonic() >= deadline:
                proc.signal(signal.SIGKILL)
                error = {"code": "deadline_exceeded", "message": "command timed out and was killed"}
                await end_stream(send, {"error": error})
                return
            wait = keepalive if deadline is None else min(keepalive, deadline - time.monotonic())
            try:
                kind, value = await asyncio.wait_for(proc.next_event(), timeout=wait)
            except TimeoutError:
                if deadline is None or time.monotonic() < deadline:
                    await emit({"keepalive": {}})
                continue
            if kind == "end":
                status = (
                    f"exit status {value}"
                    if value >= 0
                    else f"signal: {signal.Signals(-value).name.lower()}"
                )
                end: dict[str, Any] = {
                    "exited": value >= 0,
                    "status": status,
                    "exitCode": value if value >= 0 else 128 - value,
                }
                await emit({"end": end})
                await end_stream(send, {})
                return
            await emit({"data": {kind: base64.b64encode(value).decode()}})


def _select(sbx: Sandbox, selector: dict[str, Any]) -> Process:
    if "pid" in selector:
        proc = sbx.processes.get(integer(selector["pid"], "pid", 1, MAX_PID))
    else:
        proc = next(
            (p for p in sbx.processes.values() if p.tag and p.tag == selector.get("tag")), None
        )
    if proc is None:
        raise RpcError("not_found", f"process {selector} not found")
    return proc


async def _read_small(receive: Any) -> None:
    """Read (and drop) the body of a request that has none; refuse a large one."""
    await read_body(receive, MAX_RPC_BODY)


def _gunzip(data: bytes, limit: int) -> bytes:
    """Decompress a gzip body, refusing one that would grow past ``limit`` bytes."""
    try:
        inflater = zlib.decompressobj(wbits=31)
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InvalidRequest(f"the gzip body is corrupt: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise InvalidRequest(f"the decompressed upload is over the limit of {limit} bytes")
    return out


async def end_stream(send: Any, payload: dict[str, Any]) -> None:
    await send(
        {"type": "http.response.body", "body": envelope(payload, flags=0x02), "more_body": False}
    )
