"""The ``openenv`` adapter: the project's OpenEnv environment packages through the registry.

Each environment is a :class:`twinkle.envs.OpenEnv` (embedded, or given ``base_url`` a
server) seen through the functional API: the model acts with tool calls (the env's tools
are ``available_tools``), each call is one OpenEnv step whose observation comes back as a
:class:`~twinkle.core.tools.ToolResult`; the step reward is the signal ``env_reward``. A
text-only action steps nothing and asks for a tool call. Non-extracting: both
``extracted_action`` and ``resolved_action`` are None (the seed's table).

Listing reads the packages under ``twinkle.envs.openenv_envs`` without importing them.

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> from twinkle.core.tools import ToolCall
    >>> env = environment_registry.get("number_guess", adapter="openenv",
    ...                                env_kwargs={"high": 10}, reset_kwargs={"target": 7})
    >>> s, _ = env.reset()
    >>> r = env.step(s, Action.from_tool_call(ToolCall("c1", "guess", {"guess": 7})))
    >>> r.rewards.total, r.done, r.extracted_action
    (1.0, True, None)
"""

from __future__ import annotations

import importlib.util
import pkgutil
import uuid
from dataclasses import dataclass
from typing import Any

from twinkle.core.adapters._common import BaseAdapter, EpisodeMembers
from twinkle.core.environment import EnvironmentSpec, StepResult, _StateContinuityTracker
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata
from twinkle.core.tools import ToolDefinition, ToolResult, ToolResultStatus

__all__ = ["OpenEnvAdapter", "OpenEnvEnvironment"]

_PACKAGE = "twinkle.envs.openenv_envs"


@dataclass(frozen=True)
class OpenEnvHidden:
    episode_reward: float


class OpenEnvEnvironment(EpisodeMembers):
    """An OpenEnv environment under the functional protocol (multi-turn, tool calls).

    Args:
        name: the environment package (``number_guess``, or any installed OpenEnv package).
        max_steps: the step budget (default 32).
        **config: passed to :class:`twinkle.envs.OpenEnv` (``env_kwargs``, ``reset_kwargs``,
            ``base_url``, ``env_cls``, ``action_cls``, ``tool_schema``...).
    """

    def __init__(self, name: str, *, max_steps: int = 32, **config: Any) -> None:
        from twinkle.envs.openenv import OpenEnv

        self.env = OpenEnv(env_name=name, **config)
        self._tools = tuple(
            ToolDefinition(
                t["function"]["name"],
                t["function"].get("description", ""),
                t["function"].get("parameters") or {"type": "object", "properties": {}},
            )
            for t in self.env.tools()
        )
        self._tracker = _StateContinuityTracker()
        self._spec = EnvironmentSpec(
            name=name,
            adapter="openenv",
            max_steps=max_steps,
            observation_type="text",
            action_type="tool_call",
            is_multi_turn=True,
            supports_task_index=False,
            supports_len=False,
            pure_step=False,
            metadata={"base_url": config.get("base_url")},
        )

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]:
        return self._tools

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[OpenEnvHidden], dict[str, Any]]:
        kwargs = dict(options or {})
        kwargs.pop("task_index", None)
        if seed is not None:
            kwargs.setdefault("seed", seed)
        result = self.env.reset(**kwargs)
        prompt = result.observation
        content = ObservationContent(text=prompt)
        observation = Observation(
            prompt,
            ({"role": "user", "content": prompt},),
            available_tools=self._tools,
            task=content,
            state=content,
        )
        state = State(observation, OpenEnvHidden(0.0), StateMetadata(0, uuid.uuid4().hex))
        self._tracker.track(state)
        return state, dict(result.info)

    def step(self, state: State[OpenEnvHidden], action: Action) -> StepResult[OpenEnvHidden]:
        self._tracker.validate(state, self._spec.name)
        if state.metadata.is_terminal:
            raise ValueError(f"{self._spec.name}: the episode has ended; call reset()")
        results: list[ToolResult] = []
        reward, done, info = 0.0, False, {}
        feedback = None
        for call in action.tool_calls:
            out = self.env.step(call.name, dict(call.arguments))
            reward += float(out.reward)
            info = dict(out.info)
            error = out.observation.startswith("Error")
            results.append(
                ToolResult(
                    call.id,
                    call.name,
                    ToolResultStatus.ERROR if error else ToolResultStatus.SUCCESS,
                    output=out.observation,
                    error=out.observation if error else None,
                )
            )
            if out.done:
                done = True
                break
        if not action.tool_calls:
            names = ", ".join(t.name for t in self._tools) or "none"
            feedback = f"Call one of the tools to act (available: {names})."
        step = state.metadata.step + 1
        truncated = not done and step >= (self._spec.max_steps or step + 1)
        text = "\n".join(str(r.output) for r in results) if results else (feedback or "")
        messages = [*state.observation.messages, _assistant(action)]
        messages += [
            {"role": "tool", "tool_call_id": r.call_id, "name": r.tool_name, "content": r.output}
            for r in results
        ]
        if feedback:
            messages.append({"role": "user", "content": feedback})
        observation = Observation(
            text,
            tuple(messages),
            available_tools=self._tools,
            task=state.observation.task,
            state=ObservationContent(text=text),
        ).with_tool_results(tuple(results))
        hidden = OpenEnvHidden(state.hidden.episode_reward + reward)
        next_state = State(
            observation,
            hidden,
            StateMetadata(step, state.metadata.episode_id, done or truncated, info),
        )
        self._tracker.track(next_state)
        signal = Signal("env_reward", RewardType.OUTCOME, reward, feedback=feedback)
        return StepResult(
            next_state=next_state,
            rewards=SignalBundle((signal,)),
            terminated=done,
            truncated=truncated,
            info=info,
        )

    def compute_rewards(
        self, state: State[OpenEnvHidden], action: Action, next_state: State[OpenEnvHidden]
    ) -> SignalBundle:
        gained = next_state.hidden.episode_reward - state.hidden.episode_reward
        return SignalBundle((Signal("env_reward", RewardType.OUTCOME, gained),))

    def close(self) -> None:
        self.env.close()


def _assistant(action: Action) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": action.text or ""}
    if action.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in action.tool_calls]
    return message


class OpenEnvAdapter(BaseAdapter):
    """Adapter over the OpenEnv packages in ``twinkle.envs.openenv_envs`` (``twinkle[openenv]``).

    Any other installed OpenEnv package is reachable by name too (``get_environment``).

    Example:
        >>> "number_guess" in OpenEnvAdapter().list_environments()
        True
    """

    name = "openenv"
    requires = ("openenv",)
    extra = "openenv"

    def list_environments(self) -> list[str]:
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            return []
        return sorted(m.name for m in pkgutil.iter_modules(spec.submodule_search_locations))

    def get_environment(self, name: str, **config: Any) -> OpenEnvEnvironment:
        self.ensure_installed()
        return OpenEnvEnvironment(name, **config)

    def get_environment_info(self, name: str) -> dict[str, Any]:
        info = super().get_environment_info(name)
        info["description"] = f"OpenEnv package '{name}', acted on with tool calls"
        return info
