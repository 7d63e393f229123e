"""OpenEnv adapters: ``OpenEnv`` (embedded), ``OpenEnvClient`` (server), ``EnvPool`` (Ray shards).

OpenEnv (``openenv`` 0.10.0) defines typed ``Environment`` classes and serves them over a
WebSocket session protocol; these adapters turn both shapes into a twinkle ``Env`` that a
rollout drives through ``EnvTool``:

- ``OpenEnv`` builds the environment in-process (no server, microseconds per step). Given a
  ``base_url`` it is the earlier, server-mode adapter instead and delegates to
  ``OpenEnvClient``; it never accepts and ignores an argument.
- ``OpenEnvClient`` holds one WebSocket session with an OpenEnv server (uvicorn). Use one
  per concurrent trajectory, and do not pool it: the server owns the sessions.
- ``EnvPool`` keeps ``pool_size`` embedded envs in shards, in-process or as Ray actors, and
  ``EnvPoolAdapter`` is the ``Env`` over one slot. The driver knows the pool's geometry, so
  nothing needs a round trip to answer "how many slots".

``tools()`` always shows the environment's real action space: explicit schemas when given,
an MCP environment's listed tools, or one tool derived from the typed Action model (its
JSON schema; ``GuessAction`` becomes tool ``guess``). Rewards of None count as 0.0 and every
StepResult carries the cumulative ``episode_reward`` in ``info``.

Errors are data (see platform-notes §6.4): a bad action comes back as an ``Error: ...``
observation with ``done=False``; a broken session (timeout, lost connection, server full)
as ``done=True`` with ``info['error']``, after which the client reconnects on ``reset``.
``openenv`` takes about 2.4 s to import, so it is imported on first use.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable
from typing import Any

from twinkle.envs.base import Env, StepResult
from twinkle.envs.openenv_discovery import (
    ToolInfo,
    accepted_kwargs,
    action_cls_of,
    action_tools,
    describe_error,
    error_result,
    find_action_cls,
    find_client_cls,
    find_environment_cls,
    format_observation,
    import_env_package,
    import_openenv,
    load_object,
    mcp_tools,
    reward_value,
    tool_names,
)

logger = logging.getLogger("twinkle.envs")

_SERVER_ERROR_RE = re.compile(r"\(code: ([A-Z_]+)\)")
#: Server error codes after which the session is still usable (the action was at fault).
_RECOVERABLE_CODES = frozenset({"VALIDATION_ERROR", "EXECUTION_ERROR", "INVALID_JSON"})

ActionMapper = Callable[[str, dict[str, Any]], Any]
Handler = Callable[[Any, dict[str, Any]], str]


# --- embedded ------------------------------------------------------------------------------


class OpenEnv(Env):
    """An OpenEnv environment run in-process (or, given ``base_url``, on a server).

    Args:
        env_name: environment package (``'number_guess'`` finds twinkle's own); its
            Environment and Action classes are discovered.
        env_cls: the Environment class (or ``'module:Class'``); wins over discovery. In
            server mode, the typed EnvClient class instead (None: the generic client).
        env_kwargs: Environment constructor kwargs; in server mode, client kwargs such as
            ``message_timeout_s``.
        action_cls: the Action class (default: discovered).
        action_mapper: ``(tool_name, arguments) -> action`` (an Action or a dict for
            ``action_cls``); default: the arguments are the action's fields.
        tool_schema: tool definitions for ``tools()`` (default: derived from the env).
        base_url: an OpenEnv server; selects server mode (see ``OpenEnvClient``).
        reset_kwargs: keyword arguments for every ``reset`` (e.g. ``{'seed': 0}``).

    Example:
        >>> env = OpenEnv(env_name='number_guess', env_kwargs={'high': 10})
        >>> env.reset(target=7).observation
        'Guess a number between 1 and 10. You have 7 attempts.'
        >>> [t['function']['name'] for t in env.tools()], env.step('guess', {'guess': 7}).reward
        (['guess'], 1.0)
    """

    def __init__(
        self,
        env_name: str | None = None,
        env_cls: type | str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        action_cls: type | str | None = None,
        action_mapper: ActionMapper | None = None,
        tool_schema: list[ToolInfo] | None = None,
        base_url: str | None = None,
        reset_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.reset_kwargs = dict(reset_kwargs or {})
        self._tool_schema = list(tool_schema) if tool_schema is not None else None
        self._remote: OpenEnvClient | None = None
        self._episode_reward = 0.0
        if base_url is not None:
            client_kwargs = dict(env_kwargs or {})
            timeouts = {
                k: client_kwargs.pop(k)
                for k in ("connect_timeout_s", "message_timeout_s")
                if k in client_kwargs
            }
            self._remote = OpenEnvClient(
                env_name=env_name,
                env_cls=env_cls,
                base_url=base_url,
                action_cls=action_cls,
                action_mapper=action_mapper,
                tools=tool_schema,
                reset_kwargs=reset_kwargs,
                client_kwargs=client_kwargs,
                **timeouts,
            )
            return
        if env_name is None and env_cls is None:
            raise ValueError(
                "Either 'env_name' or 'env_cls' is required (or 'base_url' for a "
                "server). Example: OpenEnv(env_name='number_guess')"
            )
        server_api = import_openenv()
        package = import_env_package(env_name) if env_name else None
        self.env_cls = (
            load_object(env_cls) if env_cls is not None else find_environment_cls(package)
        )
        self.is_mcp = issubclass(self.env_cls, server_api.MCPEnvironment)
        if action_cls is not None:
            self.action_cls = load_object(action_cls)
        elif self.is_mcp:
            self.action_cls = server_api.CallToolAction
        else:
            found = find_action_cls(package) if package is not None else None
            self.action_cls = found or action_cls_of(self.env_cls)
        self.action_mapper = action_mapper
        if self.action_cls is None and action_mapper is None:
            raise ValueError(
                f"no Action class found for {self.env_cls.__name__}; pass action_cls "
                "or action_mapper"
            )
        self.env = self.env_cls(**(env_kwargs or {}))

    # -- Env interface ------------------------------------------------------------------------

    def reset(self, trajectory: dict[str, Any] | None = None, **kwargs: Any) -> StepResult:
        """Start an episode; ``kwargs`` override ``reset_kwargs`` (filtered to the env's
        ``reset`` signature). The trajectory is not used."""
        if self._remote is not None:
            return self._remote.reset(trajectory, **kwargs)
        self._episode_reward = 0.0
        obs = self.env.reset(**accepted_kwargs(self.env.reset, {**self.reset_kwargs, **kwargs}))
        return self._result(obs)

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        if self._remote is not None:
            return self._remote.step(tool_name, arguments)
        try:
            action = self._build_action(tool_name, arguments or {})
        except Exception as exc:  # bad arguments: the model can retry
            return error_result(
                f"invalid arguments for {tool_name!r}: {describe_error(exc)}",
                self._episode_reward,
                False,
            )
        try:
            obs = self.env.step(action)
        except Exception as exc:  # the env itself broke: end the episode, keep the batch
            logger.debug("OpenEnv step failed: %r", exc)
            return error_result(
                f"{type(exc).__name__}: {exc}", self._episode_reward, True, str(exc)
            )
        return self._result(obs)

    def tools(self) -> list[ToolInfo]:
        if self._remote is not None:
            return self._remote.tools()
        if self._tool_schema is not None:
            return list(self._tool_schema)
        if self.is_mcp:
            obs = self.env.step(import_openenv().ListToolsAction())
            return mcp_tools(obs.tools)
        if self.action_cls is not None and hasattr(self.action_cls, "model_json_schema"):
            return action_tools(self.action_cls.model_json_schema())
        return []

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()
        elif callable(getattr(self.env, "close", None)):
            self.env.close()

    @property
    def episode_reward(self) -> float:
        """Sum of the step rewards since the last reset."""
        return self._remote.episode_reward if self._remote is not None else self._episode_reward

    # -- helpers ------------------------------------------------------------------------------

    def _build_action(self, tool_name: str, arguments: dict[str, Any]) -> Any:
        if self.action_mapper is not None:
            action = self.action_mapper(tool_name, arguments)
        elif self.is_mcp:
            return self.action_cls(tool_name=tool_name, arguments=arguments)
        else:
            action = arguments
        if isinstance(action, dict) and self.action_cls is not None:
            action = self.action_cls(**action)
        return action

    def _result(self, obs: Any) -> StepResult:
        if isinstance(obs, dict):
            reward, done = reward_value(obs.get("reward")), bool(obs.get("done", False))
            body = obs.get("observation", obs)
        else:
            reward, done = (
                reward_value(getattr(obs, "reward", None)),
                bool(getattr(obs, "done", False)),
            )
            body = obs
        self._episode_reward += reward
        return StepResult(
            observation=format_observation(body),
            reward=reward,
            done=done,
            info={"episode_reward": self._episode_reward},
        )


# --- server mode ---------------------------------------------------------------------------


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
            except Exception as exc:  # closing a dead socket may fail; the slot is gone anyway
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
            except Exception as exc:
                return error_result(f"{type(exc).__name__}: {exc}", self._episode_reward, False)
            return StepResult(
                observation=observation, info={"episode_reward": self._episode_reward}
            )
        try:
            action = self.build_action(tool_name, arguments)
        except Exception as exc:
            return error_result(
                f"invalid arguments for {tool_name!r}: {describe_error(exc)}",
                self._episode_reward,
                False,
            )
        try:
            result = self.execute(action)
        except Exception as exc:
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
        """The §6.4 policy: a bad action continues the episode; anything else ends it."""
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


# --- pools ---------------------------------------------------------------------------------


class _EnvShard:
    """Slots ``[start, end)`` of an ``EnvPool``, each an embedded ``OpenEnv``; runs in-process
    or as a Ray actor."""

    def __init__(self, start: int, end: int, env_kwargs: dict[str, Any]) -> None:
        self.start, self.end = start, end
        self.envs = {i: OpenEnv(**env_kwargs) for i in range(start, end)}

    def _env(self, idx: int) -> OpenEnv:
        try:
            return self.envs[idx]
        except KeyError:
            raise IndexError(f"slot {idx} is not in shard [{self.start}, {self.end})") from None

    def reset(self, idx: int, kwargs: dict[str, Any]) -> StepResult:
        return self._env(idx).reset(**kwargs)

    def step(self, idx: int, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        return self._env(idx).step(tool_name, arguments)

    def reset_batch(self, indices: list[int], kwargs: dict[str, Any]) -> list[StepResult]:
        return [self.reset(i, kwargs) for i in indices]

    def step_batch(self, calls: list[tuple[int, str, dict[str, Any]]]) -> list[StepResult]:
        return [self.step(*call) for call in calls]

    def tools(self) -> list[ToolInfo]:
        return self.envs[self.start].tools()

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


class EnvPool:
    """``pool_size`` embedded ``OpenEnv`` slots, sharded in-process or over Ray actors.

    Each of the ``world_size`` shards owns ``ceil(pool_size / world_size)`` consecutive
    slots (the last may hold fewer); calls go straight to the owning shard. The driver keeps
    the geometry, so ``pool_size`` and ``get_adapters`` never need the actors.

    Args:
        pool_size: number of slots.
        device_mesh: where shards run; its ``world_size`` (or ``len``) sets the shard count
            and implies Ray actors.
        env_kwargs: ``OpenEnv`` constructor kwargs for every slot.
        world_size: shard count (default: from ``device_mesh``, else 1).
        remote: run shards as Ray actors (default: when a ``device_mesh`` is given). Call
            ``ray.init`` first.
        actor_options: ``ray.remote`` options per shard actor.
        timeout_s: limit for one remote call (None: wait).

    Example:
        >>> pool = EnvPool(pool_size=4, env_kwargs={'env_name': 'number_guess'}, world_size=2)
        >>> envs = pool.get_adapters(4)
        >>> _ = envs[3].reset(target=5)
        >>> envs[3].step('guess', {'guess': 5}).info['episode_reward']
        1.0
        >>> pool.close()
    """

    def __init__(
        self,
        pool_size: int = 32,
        device_mesh: Any = None,
        env_kwargs: dict[str, Any] | None = None,
        *,
        world_size: int | None = None,
        remote: bool | None = None,
        actor_options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be a positive int, got {pool_size!r}")
        if world_size is None and device_mesh is not None:
            world_size = getattr(device_mesh, "world_size", None)
            if world_size is None and hasattr(device_mesh, "__len__"):
                world_size = len(device_mesh)
            if world_size is None:
                raise ValueError("device_mesh needs a world_size (or a length) to shard the pool")
        world_size = world_size or 1
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        self._pool_size = pool_size
        self._shard_size = math.ceil(pool_size / world_size)
        bounds = [
            (min(r * self._shard_size, pool_size), min((r + 1) * self._shard_size, pool_size))
            for r in range(world_size)
        ]
        self._bounds = [b for b in bounds if b[0] < b[1]]
        self.env_kwargs = dict(env_kwargs or {})
        self.remote = device_mesh is not None if remote is None else remote
        self.timeout_s = timeout_s
        self._tools: list[ToolInfo] | None = None
        if self.remote:
            import ray

            if not ray.is_initialized():
                raise RuntimeError(
                    "EnvPool(remote=True) needs a Ray runtime: call ray.init() first"
                )
            actor = ray.remote(**(actor_options or {"num_cpus": 0}))(_EnvShard)
            self._shards: list[Any] = [actor.remote(s, e, self.env_kwargs) for s, e in self._bounds]
        else:
            self._shards = [_EnvShard(s, e, self.env_kwargs) for s, e in self._bounds]

    @property
    def pool_size(self) -> int:
        return self._pool_size

    @property
    def world_size(self) -> int:
        """Number of shards that own at least one slot."""
        return len(self._bounds)

    def _owner(self, idx: int) -> int:
        if not isinstance(idx, int) or not 0 <= idx < self._pool_size:
            raise IndexError(f"slot {idx!r} out of range for a pool of {self._pool_size}")
        return idx // self._shard_size

    def _call(self, shard: int, method: str, *args: Any) -> Any:
        target = getattr(self._shards[shard], method)
        if not self.remote:
            return target(*args)
        import ray

        return ray.get(target.remote(*args), timeout=self.timeout_s)

    def _gather(self, calls: dict[int, tuple[str, tuple[Any, ...]]]) -> dict[int, Any]:
        """One call per shard, run concurrently when remote."""
        if not self.remote:
            return {s: getattr(self._shards[s], m)(*a) for s, (m, a) in calls.items()}
        import ray

        refs = {s: getattr(self._shards[s], m).remote(*a) for s, (m, a) in calls.items()}
        values = ray.get(list(refs.values()), timeout=self.timeout_s)
        return dict(zip(refs, values))

    def reset(self, idx: int, **kwargs: Any) -> StepResult:
        return self._call(self._owner(idx), "reset", idx, kwargs)

    def step(self, idx: int, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        return self._call(self._owner(idx), "step", idx, tool_name, arguments or {})

    def reset_batch(self, indices: list[int], **kwargs: Any) -> list[StepResult]:
        by_shard: dict[int, list[int]] = {}
        for i in indices:
            by_shard.setdefault(self._owner(i), []).append(i)
        results = self._gather({s: ("reset_batch", (ids, kwargs)) for s, ids in by_shard.items()})
        merged = {i: r for s, ids in by_shard.items() for i, r in zip(ids, results[s])}
        return [merged[i] for i in indices]

    def step_batch(
        self, indices: list[int], tool_names: list[str], arguments_list: list[dict[str, Any]]
    ) -> list[StepResult]:
        if not len(indices) == len(tool_names) == len(arguments_list):
            raise ValueError("indices, tool_names and arguments_list must have the same length")
        if len(set(indices)) != len(indices):
            raise ValueError("step_batch takes each slot at most once")
        by_shard: dict[int, list[tuple[int, str, dict[str, Any]]]] = {}
        for call in zip(indices, tool_names, arguments_list):
            by_shard.setdefault(self._owner(call[0]), []).append(call)
        results = self._gather({s: ("step_batch", (calls,)) for s, calls in by_shard.items()})
        merged = {c[0]: r for s, calls in by_shard.items() for c, r in zip(calls, results[s])}
        return [merged[i] for i in indices]

    def tools(self) -> list[ToolInfo]:
        """The slots' tool schemas (all slots run the same env; asked once, then cached)."""
        if self._tools is None:
            self._tools = self._call(0, "tools")
        return list(self._tools)

    def get_adapters(self, n: int | None = None) -> list[EnvPoolAdapter]:
        """``Env`` views of the first ``n`` slots (all by default)."""
        n = self._pool_size if n is None else n
        if n > self._pool_size:
            raise ValueError(f"Requested {n} adapters but pool only has {self._pool_size} slots.")
        return [EnvPoolAdapter(self, i) for i in range(n)]

    def close(self) -> None:
        """Close every env and stop the shard actors (best effort: a dead shard is skipped)."""
        shards, self._shards = self._shards, []
        if not self.remote:
            for shard in shards:
                shard.close()
            return
        import ray

        refs = [s.close.remote() for s in shards]
        for shard, ref in zip(shards, refs):
            try:
                ray.get(ref, timeout=self.timeout_s)
            except Exception as exc:  # a dead or stuck shard must not keep the others alive
                logger.warning("closing an EnvPool shard failed: %r", exc)
            ray.kill(shard)


class EnvPoolAdapter(Env):
    """An ``Env`` over slot ``idx`` of an ``EnvPool``.

    A failing step (a dead actor, a timeout) returns ``done=True`` with ``info['error']``,
    so one broken slot never stalls a batch. ``close`` is a no-op: close the pool.

    Example:
        >>> pool = EnvPool(pool_size=1, env_kwargs={'env_name': 'number_guess'})
        >>> env = pool.get_adapters()[0]
        >>> _ = env.reset(target=2)
        >>> env.step('guess', {'guess': 9}).observation, env.tools()[0]['function']['name']
        ('Lower.', 'guess')
    """

    def __init__(self, pool: EnvPool, idx: int) -> None:
        self.pool = pool
        self.idx = idx
        self._episode_reward = 0.0

    def reset(self, trajectory: dict[str, Any] | None = None, **kwargs: Any) -> StepResult:
        self._episode_reward = 0.0
        return self.pool.reset(self.idx, **kwargs)

    def step(self, tool_name: str, arguments: dict[str, Any] | None = None) -> StepResult:
        try:
            result = self.pool.step(self.idx, tool_name, arguments or {})
        except Exception as exc:
            return error_result(
                f"{type(exc).__name__}: {exc}", self._episode_reward, True, str(exc)
            )
        self._episode_reward += reward_value(result.reward)
        return StepResult(
            observation=result.observation,
            reward=reward_value(result.reward),
            done=result.done,
            info={**result.info, "episode_reward": self._episode_reward},
        )

    def tools(self) -> list[ToolInfo]:
        return self.pool.tools()

    @property
    def episode_reward(self) -> float:
        """Sum of this slot's step rewards since its last reset."""
        return self._episode_reward

    def close(self) -> None:
        """Nothing to do: the pool owns the env."""
