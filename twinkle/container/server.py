"""Serve any environment over HTTP/JSON (FastAPI + uvicorn), for :class:`ContainerEnvironment`.

FastAPI and uvicorn are already dependencies (the sandbox server, the test OpenAI server),
and uvicorn is what the environment servers of OpenEnv run under, so one stack serves all.

Endpoints: ``GET /health``, ``/spec``, ``/tools``, ``/prompts``, ``/len``; ``POST /reset``
``{seed?, options?}`` -> ``{state, info}``, ``POST /step`` ``{state, action}``, ``POST
/compute_rewards`` ``{state, action, next_state}``. An error answers with status 400 (bad
request) or 500 (the environment raised; ``NotImplementedError`` gives 501) and a body
``{"error": "Type: message", "traceback": ...}``.

Hidden states stay on the server: every state the server hands out gets a ``ref``, and the
real state object is kept (in a bounded LRU) so a client's state maps back to it exactly.
A state whose ref is unknown is rebuilt from its JSON, with the hidden part re-created
from its dict when the environment's hidden type is a dataclass. Calls to an environment
without ``pure_step`` are serialised with a lock (environments need not be thread-safe).

Example:
    >>> from twinkle.core.environments import MathEnvironment
    >>> with EnvironmentServer(MathEnvironment()) as server:   # a thread on 127.0.0.1:0
    ...     import httpx
    ...     httpx.get(server.url + "/len").json()
    30
"""

# No postponed annotations here: FastAPI reads the endpoints' annotations at runtime, and
# ``Request`` is imported inside create_app to keep this module light.
import contextlib
import dataclasses
import threading
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from twinkle.container.serialization import (
    decode_action,
    decode_state,
    encode_bundle,
    encode_spec,
    encode_state,
    encode_step_result,
    encode_tool,
    plain,
)
from twinkle.utils.serving import ThreadedServer, bind_socket

__all__ = ["EnvironmentServer", "create_app", "serve"]

_MAX_STATES = 16384


class _StateStore:
    """Real states by ref, least recently used dropped first."""

    def __init__(self, capacity: int = _MAX_STATES) -> None:
        self._states: OrderedDict[str, Any] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()  # requests of pure environments run concurrently
        self.hidden_type: type | None = None

    def put(self, state: Any) -> str:
        ref = uuid.uuid4().hex
        with self._lock:
            self._states[ref] = state
            if len(self._states) > self._capacity:
                self._states.popitem(last=False)
            self.hidden_type = type(state.hidden)
        return ref

    def get(self, raw: Any) -> Any:
        if not isinstance(raw, Mapping):
            raise TypeError("a state must be a JSON object")
        ref = raw.get("ref")
        with self._lock:
            known = self._states.get(ref) if isinstance(ref, str) else None
            if known is not None:
                self._states.move_to_end(ref)
        if known is not None:
            return known
        hidden = raw.get("hidden")
        if (
            self.hidden_type is not None
            and dataclasses.is_dataclass(self.hidden_type)
            and isinstance(hidden, Mapping)
        ):
            names = {f.name for f in dataclasses.fields(self.hidden_type)}
            return decode_state(
                raw, self.hidden_type(**{k: v for k, v in hidden.items() if k in names})
            )
        return decode_state(raw, hidden if hidden is not None else {})


def create_app(environment: Any) -> Any:
    """A FastAPI app serving ``environment``."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title=f"twinkle environment: {environment.spec.name}")
    store = _StateStore()
    lock = threading.Lock()

    def error(exc: BaseException, status: int) -> JSONResponse:
        return JSONResponse(
            status_code=status,
            content={"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
        )

    async def body(request: Request) -> dict[str, Any]:
        data = await request.json()
        if not isinstance(data, dict):
            raise TypeError("the request body must be a JSON object")
        return data

    # Pure environments are functions of (state, action), so their calls may overlap (a
    # code environment's tests or a judge then run in parallel); others are serialised.
    guard = contextlib.nullcontext() if environment.spec.pure_step else lock

    def call(fn: Any) -> Any:
        try:
            with guard:
                return fn()
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            return error(exc, 400)
        except NotImplementedError as exc:
            return error(exc, 501)
        except Exception as exc:  # noqa: BLE001 - any env failure becomes a 500 with its traceback
            return error(exc, 500)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "name": environment.spec.name}

    @app.get("/spec")
    def spec() -> Any:
        return encode_spec(environment.spec)

    @app.get("/tools")
    def tools() -> Any:
        return [encode_tool(t) for t in environment.available_tools]

    @app.get("/prompts")
    def prompts() -> Any:
        return plain(getattr(environment, "prompts", {}) or {})

    @app.get("/len")
    def length() -> Any:
        return call(lambda: len(environment))

    @app.post("/reset")
    async def reset(request: Request) -> Any:
        try:
            data = await body(request)
        except (TypeError, ValueError) as exc:
            return error(exc, 400)

        def run() -> Any:
            state, info = environment.reset(seed=data.get("seed"), options=data.get("options"))
            return {"state": encode_state(state, store.put(state)), "info": plain(info)}

        return await run_in_threadpool(call, run)

    @app.post("/step")
    async def step(request: Request) -> Any:
        try:
            data = await body(request)
        except (TypeError, ValueError) as exc:
            return error(exc, 400)

        def run() -> Any:
            result = environment.step(
                store.get(data.get("state")), decode_action(data.get("action") or {})
            )
            return encode_step_result(result, store.put(result.next_state))

        return await run_in_threadpool(call, run)

    @app.post("/compute_rewards")
    async def compute_rewards(request: Request) -> Any:
        try:
            data = await body(request)
        except (TypeError, ValueError) as exc:
            return error(exc, 400)

        def run() -> Any:
            bundle = environment.compute_rewards(
                store.get(data.get("state")),
                decode_action(data.get("action") or {}),
                store.get(data.get("next_state")),
            )
            return {"rewards": encode_bundle(bundle)}

        return await run_in_threadpool(call, run)

    return app


def serve(
    environment: Any, host: str = "127.0.0.1", port: int = 0, *, announce: Any = print
) -> None:
    """Serve ``environment`` until interrupted; ``announce`` gets the URL once bound."""
    import uvicorn

    sock = bind_socket(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(environment), log_level="warning"))
    announce(url)
    server.run(sockets=[sock])


class EnvironmentServer(ThreadedServer):
    """An in-process server for ``environment`` on a background thread (tests, notebooks).

    Args:
        environment: the environment to serve.
        host: interface to bind; port 0 picks a free port.

    Example:
        >>> from twinkle.core.registry import environment_registry
        >>> server = EnvironmentServer(environment_registry.get("math")).start()
        >>> server.url.startswith("http://127.0.0.1:")
        True
        >>> server.stop()
    """

    def __init__(self, environment: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(create_app(environment), host, port, name="environment server")
        self.environment = environment
