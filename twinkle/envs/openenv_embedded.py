"""``OpenEnv``: an OpenEnv environment built and stepped in-process.

No server and microseconds per step: the Environment class is constructed here and its
``reset``/``step`` are called directly. Given a ``base_url`` the adapter runs in server mode
and delegates every call to an ``OpenEnvClient``, so one class covers both shapes and no
argument is accepted and then ignored. A bad action comes back as an ``Error: ...``
observation (the model can retry); an exception inside the environment ends the episode
with ``info['error']`` so one broken env does not stop a batch.
"""

from __future__ import annotations

import logging
from typing import Any

from twinkle.envs.base import Env, StepResult
from twinkle.envs.openenv_client import ActionMapper, OpenEnvClient
from twinkle.envs.openenv_discovery import (
    ToolInfo,
    accepted_kwargs,
    action_cls_of,
    action_tools,
    describe_error,
    error_result,
    find_action_cls,
    find_environment_cls,
    format_observation,
    import_env_package,
    import_openenv,
    load_object,
    mcp_tools,
    reward_value,
)

__all__ = ["OpenEnv"]

logger = logging.getLogger("twinkle.envs")


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
        except Exception as exc:  # noqa: BLE001 - bad arguments: the model can retry
            return error_result(
                f"invalid arguments for {tool_name!r}: {describe_error(exc)}",
                self._episode_reward,
                False,
            )
        try:
            obs = self.env.step(action)
        except Exception as exc:  # noqa: BLE001 - the env broke: end the episode, keep the batch
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
