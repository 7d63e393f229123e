"""``OpenEnvClient``: one WebSocket session with an OpenEnv server, as a twinkle ``Env``.

The server (uvicorn) owns the sessions, so use one client per concurrent trajectory and do
not pool it. Errors are data: a bad action (a server ``VALIDATION_ERROR``,
``EXECUTION_ERROR`` or ``INVALID_JSON``) comes back as an ``Error: ...`` observation with
``done=False`` so the model can correct it; a broken session (timeout, lost connection,
server full) ends the episode with ``info['error']`` (and ``info[ENV_FAILED]``: a rollout
ends that trajectory as an error, unscored) instead of failing the batch, and the client
reconnects on the next ``reset``. ``openenv`` is imported on first use.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any

from twinkle.envs.base import Env, StepResult
from twinkle.envs.openenv_discovery import (
    ToolInfo,
    action_cls_of,
    action_tools,
    describe_error,
    error_result,
    find_action_cls,
    find_client_cls,
    format_observation,
    import_env_package,
    import_openenv,
    load_object,
    reward_value,
    tool_names,
)

__all__ = ["ActionMapper", "Handler", "OpenEnvClient"]

logger = logging.getLogger("twinkle.envs")

_SERVER_ERROR_RE = re.compile(r"\(code: ([A-Z_]+)\)")
#: Server error codes after which the session is still usable (the action was at fault).
_RECOVERABLE_CODES = frozenset({"VALIDATION_ERROR", "EXECUTION_ERROR", "INVALID_JSON"})

#: ``(tool_name, arguments) -> action``: an Action, or a dict of the Action's fields.
ActionMapper = Callable[[str, dict[str, Any]], Any]
#: ``(env, arguments) -> observation`` for a tool answered locally (``register_tool``).
Handler = Callable[[Any, dict[str, Any]], str]


class OpenEnvClient(Env):
    """One WebSocket session with an OpenEnv server, as a twinkle ``Env``.

    Args:
        env_name: environment package whose typed ``EnvClient`` and Action are discovered.
        env_cls: the EnvClient class (or ``'module:Class'``); None and no ``env_name``: the
            generic client, which sends dict actions.
        base_url: the server (``http://host:port``); default ``$OPENENV_BASE_URL``.
        action_cls: the Action class (default: discovered; None with the generic client).
        action_mapper: ``(tool_name, arguments) -> action``.
        tools: tool definitions; default derived from the action schema (the server's
            ``/schema`` for the generic client).
        reset_kwargs: keyword arguments for every ``reset`` (a public, mutable dict).
        connect_timeout_s: WebSocket connect timeout.
        message_timeout_s: per-message timeout; raise it for long-running actions.
        client_kwargs: other EnvClient constructor arguments.

    Example:
        >>> env = OpenEnvClient('number_guess', base_url='http://127.0.0.1:8000')  # doctest: +SKIP
        >>> env.reset(target=3).observation  # doctest: +SKIP
        'Guess a number between 1 and 100. You have 7 attempts.'
        >>> env.step('guess', {'guess': 3}).reward, env.episode_reward  # doctest: +SKIP
        (1.0, 1.0)
        >>> env.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        env_name: str | None = None,
        env_cls: type | str | None = None,
        base_url: str | None = None,
        action_cls: type | str | None = None,
        action_mapper: ActionMapper | None = None,
        tools: list[ToolInfo] | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 120.0,
        client_kwargs: dict[str, Any] | None = None,
    ) -> None:
        base_url = base_url or os.environ.get("OPENENV_BASE_URL")
        if not base_url:
            raise ValueError("OpenEnvClient needs base_url (or the OPENENV_BASE_URL variable)")
        self.base_url = base_url.rstrip("/")
        import_openenv()
        package = import_env_package(env_name) if env_name else None
        if env_cls is not None:
            self.client_cls = load_object(env_cls)
        else:
            self.client_cls = find_client_cls(package) if package is not None else None
        if self.client_cls is None:
            from openenv.core import GenericEnvClient

            self.client_cls = GenericEnvClient
        self.is_generic = getattr(self.client_cls, "__name__", "") == "GenericEnvClient"
        if action_cls is not None:
            self.action_cls = load_object(action_cls)
        else:
            found = find_action_cls(package) if package is not None else None
            self.action_cls = None if self.is_generic else found or action_cls_of(self.client_cls)
        self.action_mapper = action_mapper
        self._tools = list(tools) if tools is not None else None
        self.reset_kwargs = dict(reset_kwargs or {})
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.client_kwargs = dict(client_kwargs or {})
        self._handlers: dict[str, Handler] = {}
        self._custom_tools: dict[str, ToolInfo] = {}
        self._client: Any = None
        self._last_result: Any = None
        self._episode_reward = 0.0
        self._derived_tools: list[ToolInfo] | None = None

    # -- the session --------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The synchronous OpenEnv client (connected lazily; rebuilt after a broken session)."""
        if self._client is None:
            self._client = self.client_cls(
                base_url=self.base_url,
                connect_timeout_s=self.connect_timeout_s,
                message_timeout_s=self.message_timeout_s,
                **self.client_kwargs,
            ).sync()
        return self._client

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - a dead socket may fail to close; it is gone
                logger.debug("closing a broken OpenEnv session failed: %r", exc)

    # -- Env interface ------------------------------------------------------------------------

    def reset(self, trajectory: dict[str, Any] | None = None, **kwargs: Any) -> StepResult:
        """Start an episode in this session. Connection errors propagate (after the session is
        dropped, so the next ``reset`` reconnects). The trajectory is not used."""
        self._episode_reward = 0.0
        try:
            result = self.client.reset(**{**self.reset_kwargs, **kwargs})
        except Exception:
            self._drop_client()
            raise
        self._last_result = result
        return StepResult(
            observation=format_observation(result.observation),
            reward=reward_value(result.reward),
            done=bool(result.done),
            info={"episode_reward": 0.0},
        )

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        arguments = arguments or {}
        handler = self._handlers.get(tool_name)
        if handler is not None:
            try:
                observation = str(handler(self, arguments))
            except Exception as exc:  # noqa: BLE001 - a local tool's failure is an observation
                return error_result(f"{type(exc).__name__}: {exc}", self._episode_reward, False)
            return StepResult(
                observation=observation, info={"episode_reward": self._episode_reward}
            )
        try:
            action = self.build_action(tool_name, arguments)
        except Exception as exc:  # noqa: BLE001 - bad arguments: the model can retry
            return error_result(
                f"invalid arguments for {tool_name!r}: {describe_error(exc)}",
                self._episode_reward,
                False,
            )
        try:
            result = self.execute(action)
        except Exception as exc:  # noqa: BLE001 - _failure sorts a bad action from a dead session
            return self._failure(exc)
        reward = reward_value(result.reward)
        self._episode_reward += reward
        return StepResult(
            observation=format_observation(result.observation),
            reward=reward,
            done=bool(result.done),
            info={"episode_reward": self._episode_reward},
        )

    def _failure(self, exc: Exception) -> StepResult:
        """A bad action continues the episode (the model can correct it); anything else ends
        it, so one broken session never stalls the batch."""
        match = _SERVER_ERROR_RE.search(str(exc)) if isinstance(exc, RuntimeError) else None
        if match and match.group(1) in _RECOVERABLE_CODES:
            return error_result(str(exc), self._episode_reward, False)
        # Timeouts and lost connections leave the socket in an unknown state: a later call
        # would silently land in a fresh, un-reset server session.
        self._drop_client()
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return error_result(message, self._episode_reward, True, message)

    def build_action(self, tool_name: str, arguments: dict[str, Any]) -> Any:
        """The action sent for a tool call (mapper, then ``action_cls`` over a dict)."""
        action = self.action_mapper(tool_name, arguments) if self.action_mapper else dict(arguments)
        if isinstance(action, dict) and self.action_cls is not None:
            action = self.action_cls(**action)
        return action

    def execute(self, action: Any) -> Any:
        """Send ``action`` (an Action, or a dict of its fields) and return OpenEnv's raw
        StepResult; raises on transport errors. Its reward is not added to
        ``episode_reward`` (scoring code run in the session is not part of the episode)."""
        if isinstance(action, dict):
            if self.action_cls is not None:
                action = self.action_cls(**action)
            elif not self.is_generic:
                raise ValueError(
                    f"No action_cls available to build a {self.client_cls.__name__} "
                    "action from a dict; pass action_cls"
                )
        self._last_result = self.client.step(action)
        return self._last_result

    def register_tool(self, tool_info: ToolInfo, handler: Handler) -> OpenEnvClient:
        """Answer tool ``tool_info`` locally with ``handler(env, arguments) -> str``; a server
        tool of the same name is hidden. Returns self."""
        name = (
            (tool_info.get("function") or {}).get("name") if isinstance(tool_info, dict) else None
        )
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool schema without a function name: {tool_info!r}")
        if not callable(handler):
            raise ValueError(f"handler for tool {name!r} must be callable")
        self._handlers[name] = handler
        self._custom_tools[name] = tool_info
        return self

    def tools(self) -> list[ToolInfo]:
        if self._tools is not None:
            server = self._tools
        else:
            if self._derived_tools is None:
                self._derived_tools = self._server_tools()
            server = self._derived_tools
        return [t for t in server if tool_names([t]).isdisjoint(self._custom_tools)] + list(
            self._custom_tools.values()
        )

    def _server_tools(self) -> list[ToolInfo]:
        if self.action_cls is not None and hasattr(self.action_cls, "model_json_schema"):
            return action_tools(self.action_cls.model_json_schema())
        import httpx

        url = re.sub(r"^ws", "http", self.base_url) + "/schema"
        try:
            schema = (
                httpx.get(url, timeout=self.connect_timeout_s).raise_for_status().json()["action"]
            )
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            logger.warning("could not read the action schema from %s (%r); pass tools=", url, exc)
            return []
        if schema.get("title") == "CallToolAction":
            logger.warning("%s is an MCP server; pass its tools with tools=", self.base_url)
            return []
        return action_tools(schema)

    def close(self) -> None:
        """End the session (frees the server slot and the client's loop thread)."""
        self._drop_client()

    @property
    def episode_reward(self) -> float:
        """Sum of step rewards since the last reset (None rewards count 0.0)."""
        return self._episode_reward

    @property
    def last_result(self) -> Any:
        """The last raw OpenEnv StepResult (from reset, step or execute)."""
        return self._last_result
