"""``ContainerEnvironment``: an environment that lives in another process or machine.

The client side of :mod:`twinkle.container.server`, over ``httpx`` (one pooled keep-alive
connection, a retry on connection errors, explicit timeouts). It implements the
:class:`~twinkle.core.environment.Environment` protocol; hidden states arrive as
:class:`~twinkle.container.serialization.OpaqueHidden`, and ``reward_functions`` is empty
because rewards are computed on the server.

Errors: an HTTP status of 400 or more raises :class:`ContainerEnvironmentError` with the
server's ``"Type: message"`` and traceback; a server that cannot be reached raises it too
(chained from the ``httpx`` error).

Example:
    >>> from twinkle.container.server import EnvironmentServer
    >>> from twinkle.core import Action
    >>> from twinkle.core.registry import environment_registry
    >>> with EnvironmentServer(environment_registry.get("math")) as server:
    ...     with ContainerEnvironment(server.url) as env:
    ...         state, info = env.reset(options={"task_index": 0})
    ...         env.step(state, Action.from_text("\\\\boxed{18}")).rewards.total
    1.0
"""

from __future__ import annotations

import time
from typing import Any

from twinkle.container.serialization import (
    decode_bundle,
    decode_spec,
    decode_state,
    decode_step_result,
    decode_tool,
    encode_action,
    encode_state,
    plain,
)
from twinkle.core.environment import EnvironmentSpec, StepResult
from twinkle.core.signals import RewardFunction, SignalBundle
from twinkle.core.state import Action, State
from twinkle.core.tools import ToolDefinition
from twinkle.errors import EnvError

__all__ = ["ContainerEnvironment", "ContainerEnvironmentError"]


class ContainerEnvironmentError(EnvError, RuntimeError):
    """The environment server answered with an error, or could not be reached.

    Example:
        >>> issubclass(ContainerEnvironmentError, RuntimeError)
        True
    """


class ContainerEnvironment:
    """A proxy to an environment served by ``twinkle env serve-functional NAME``.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8765``.
        timeout: seconds per request (a code environment's step runs tests: allow for it).

    Example:
        >>> env = ContainerEnvironment("http://127.0.0.1:8765")     # doctest: +SKIP
        >>> state, _ = env.reset(options={"task_index": 3})        # doctest: +SKIP
    """

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._httpx = httpx
        self._client = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=httpx.HTTPTransport(retries=1),  # one reconnect on a dropped connection
        )
        self._cache: dict[str, Any] = {}

    # -- transport ---------------------------------------------------------------------
    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = self._client.request(method, path, json=body)
        except self._httpx.HTTPError as exc:
            raise ContainerEnvironmentError(
                f"{type(exc).__name__}: {exc} ({self.url}{path})"
            ) from exc
        if response.status_code >= 400:
            try:
                data = response.json()
                message = (
                    f"{data.get('error', response.text)}\n{data.get('traceback', '')}".rstrip()
                )
            except ValueError:
                message = f"HTTP {response.status_code}: {response.text[:500]}"
            raise ContainerEnvironmentError(message)
        return response.json()

    def _cached(self, key: str, path: str) -> Any:
        if key not in self._cache:
            self._cache[key] = self._request("GET", path)
        return self._cache[key]

    def wait_ready(self, timeout: float = 30.0) -> ContainerEnvironment:
        """Poll ``/health`` until the server answers (``ContainerEnvironmentError`` on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._request("GET", "/health")
                return self
            except ContainerEnvironmentError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -- the Environment protocol --------------------------------------------------------
    @property
    def spec(self) -> EnvironmentSpec:
        if "spec" not in self._cache:
            self._cache["spec"] = decode_spec(self._request("GET", "/spec"))
        return self._cache["spec"]

    @property
    def reward_functions(self) -> tuple[RewardFunction, ...]:
        return ()

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]:
        return tuple(decode_tool(t) for t in self._cached("tools", "/tools"))

    @property
    def prompts(self) -> dict[str, str]:
        return dict(self._cached("prompts", "/prompts"))

    def __len__(self) -> int:
        return int(self._cached("len", "/len"))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[Any], dict[str, Any]]:
        body: dict[str, Any] = {}
        if seed is not None:
            body["seed"] = seed
        if options is not None:
            body["options"] = plain(options)
        data = self._request("POST", "/reset", body)
        return decode_state(data["state"]), dict(data.get("info") or {})

    def step(self, state: State[Any], action: Action) -> StepResult[Any]:
        data = self._request(
            "POST", "/step", {"state": encode_state(state), "action": encode_action(action)}
        )
        return decode_step_result(data)

    def compute_rewards(
        self, state: State[Any], action: Action, next_state: State[Any]
    ) -> SignalBundle:
        data = self._request(
            "POST",
            "/compute_rewards",
            {
                "state": encode_state(state),
                "action": encode_action(action),
                "next_state": encode_state(next_state),
            },
        )
        return decode_bundle(data.get("rewards"))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ContainerEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ContainerEnvironment({self.url!r})"
