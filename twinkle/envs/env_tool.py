"""``EnvTool``: an ``Env`` seen as one or more ``Tool`` objects, so rollouts can drive it.

Tools built together by ``from_env``/``from_schemas`` share one episode record: the last
``StepResult`` and the reward summed over every step since the tools were built (or since
``reset``). ``episode_reward`` is always that sum, whatever the env puts in ``info``.

A step whose ``info`` carries ``ENV_FAILED`` (the env itself failed: its sandbox gone, its
server unreachable) raises ``twinkle.errors.EnvironmentFailure`` with that cause instead of
returning the observation: the rollout ends the trajectory as an error rather than showing
the model an infrastructure failure as a tool result.

Example:
    >>> from twinkle.envs.base import Env, StepResult
    >>> from twinkle.tools import ToolManager
    >>> class Counter(Env):
    ...     def step(self, tool_name, arguments):
    ...         done = arguments.get('last', False)
    ...         return StepResult(observation=f'{tool_name} ok', reward=0.5, done=done)
    >>> tools = EnvTool.from_env(Counter())
    >>> manager = ToolManager(tools)
    >>> manager.names()
    ['env_action']
    >>> manager({'function': {'name': 'env_action', 'arguments': {'last': True}}})
    'env_action ok'
    >>> tools[0].done, tools[0].episode_reward
    (True, 0.5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twinkle.data_format import Tool as ToolInfo
from twinkle.envs.base import ENV_FAILED, Env, StepResult
from twinkle.errors import EnvironmentFailure
from twinkle.tools.base import Tool

#: Schema of the generic tool offered when an env lists no tools of its own.
ENV_ACTION_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "description": "The action to take in the environment."},
    },
    "additionalProperties": True,
}


@dataclass(slots=True)
class _Episode:
    """What the tools of one env have seen since the episode began."""

    reward: float = 0.0
    steps: int = 0
    last_result: StepResult | None = None


class EnvTool(Tool):
    """Wrap ``env.step`` as a tool named ``tool_name``.

    Args:
        env: the environment whose ``step(tool_name, arguments)`` runs the call.
        tool_name: the function name the model calls.
        description: shown to the model in the tool schema.
        parameters: JSON schema of the arguments (default: an empty object).

    Example:
        >>> from twinkle.envs.base import Env, StepResult
        >>> class Py(Env):
        ...     def step(self, tool_name, arguments):
        ...         return StepResult(observation=str(eval(arguments['code'])), reward=1.0)
        >>> schema = {'type': 'object', 'properties': {'code': {'type': 'string'}}}
        >>> tool = EnvTool(Py(), 'execute_code', 'Run Python.', schema)
        >>> tool('execute_code', {'code': '1 + 1'}), tool.episode_reward
        ('2', 1.0)
    """

    def __init__(
        self,
        env: Env,
        tool_name: str = "env_action",
        description: str = "Execute an action in the environment.",
        parameters: dict[str, Any] | None = None,
        *,
        _episode: _Episode | None = None,
    ) -> None:
        if not isinstance(tool_name, str) or not tool_name:
            raise ValueError(f"tool_name must be a non-empty string, got {tool_name!r}")
        self.env = env
        self.tool_name = tool_name
        self.description = description
        self.parameters = (
            parameters if parameters is not None else {"type": "object", "properties": {}}
        )
        self._episode = _episode if _episode is not None else _Episode()

    @classmethod
    def from_env(cls, env: Env) -> list[EnvTool]:
        """One tool per schema in ``env.tools()``, or one generic ``env_action`` tool."""
        schemas = env.tools() or []
        if not schemas:
            return [cls(env, parameters=dict(ENV_ACTION_PARAMETERS))]
        return cls.from_schemas(env, schemas)

    @classmethod
    def from_schemas(cls, env: Env, schemas: list[ToolInfo]) -> list[EnvTool]:
        """One tool per OpenAI function schema, all sharing ``env`` and one episode record."""
        episode = _Episode()
        tools = []
        for schema in schemas:
            function = schema.get("function") if isinstance(schema, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str) or not name:
                raise ValueError(f"tool schema without a function name: {schema!r}")
            tools.append(
                cls(
                    env,
                    name,
                    function.get("description") or "",
                    function.get("parameters") or {"type": "object", "properties": {}},
                    _episode=episode,
                )
            )
        return tools

    def tool_info(self) -> ToolInfo:
        return {
            "type": "function",
            "function": {
                "name": self.tool_name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        if not isinstance(arguments, dict):
            raise TypeError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        result = self.env.step(tool_name, arguments)
        if not isinstance(result, StepResult):
            raise TypeError(
                f"{type(self.env).__name__}.step returned {type(result).__name__}, not StepResult"
            )
        episode = self._episode
        episode.last_result = result
        episode.steps += 1
        episode.reward += float(result.reward or 0.0)
        if result.info.get(ENV_FAILED):  # the env died: no observation, the episode is over
            raise EnvironmentFailure(str(result.info[ENV_FAILED]))
        return str(result.observation)

    def reset(self, trajectory: dict[str, Any] | None = None) -> StepResult:
        """Reset the env and start a new episode record for every tool sharing it."""
        result = self.env.reset(trajectory)
        self._episode.reward, self._episode.steps, self._episode.last_result = 0.0, 0, None
        return result

    @property
    def last_result(self) -> StepResult | None:
        """The most recent ``StepResult`` of any tool sharing this env."""
        return self._episode.last_result

    @property
    def done(self) -> bool:
        """Whether the last step ended the episode (False before any step)."""
        return bool(self._episode.last_result and self._episode.last_result.done)

    @property
    def episode_reward(self) -> float:
        """Sum of step rewards since these tools were built or last reset."""
        return self._episode.reward
