"""``RegistryEnv``: a multi-turn environment of the registry, played through tool calls.

The functional environments (``twinkle.core.environment.Environment``: gymnasium, gem and
textarena games, dialogue with a simulated user) are stepped with an explicit ``State`` and
a text ``Action``; a rollout drives an :class:`~twinkle.envs.base.Env` through tools
(``EnvTool``). This class joins the two, so the rollout runner plays such an environment as
an episode the way it plays an OpenEnv one: ``reset(seed=...)`` starts the episode (a task
picked from the seed, so a rerun replays it), ``tools()`` offers one tool, ``act(action)``
(``reply(message)`` for a dialogue), and ``step`` turns the call into an ``Action``.

The episode reward is the sum of the environment's own step rewards: each step's
``rewards.total`` (the weighted sum of the signals it emits). Outcome-scored environments
put their whole score on the last step (dialogue's judge or ``goal_reached``, textarena's
game reward), so the sum is that score; gymnasium and gem games pay per step, so it is the
game's return; an invalid-action penalty counts too. ``EnvTool.episode_reward`` adds the
same step rewards up. Only the observation's text reaches the model, never ``state.data``
(gym info, counters). An exception inside the environment ends the episode with
``info[ENV_FAILED]``: the rollout records the trajectory as failed rather than scoring it.

Example:
    >>> env = RegistryEnv("gymnasium/FrozenLake-v1?is_slippery=false")
    >>> "frozen lake" in env.reset(seed=0).observation
    True
    >>> [t["function"]["name"] for t in env.tools()]
    ['act']
    >>> r = env.step("act", {"action": "down"})
    >>> r.reward, r.done
    (0.0, False)
"""

from __future__ import annotations

from typing import Any

from twinkle.envs.base import ENV_FAILED, Env, StepResult, truncate_observation

__all__ = ["RegistryEnv"]

_ACT = {
    "name": "act",
    "description": "Take one action in the environment; returns what it shows next.",
    "argument": "action",
    "about": "The action, e.g. a move named in the instructions.",
}
_REPLY = {
    "name": "reply",
    "description": "Send your next message to the user; returns the user's answer.",
    "argument": "message",
    "about": "What you say to the user.",
}


class RegistryEnv(Env):
    """A functional multi-turn environment from a spec string, as an ``Env``.

    Args:
        spec: ``adapter/name?key=value&...`` or ``@/path/envs.yaml#key`` (the forms of
            ``twinkle.core.config``); the environment is built fresh, so each episode has
            its own.

    Example:
        >>> with RegistryEnv("gymnasium/FrozenLake-v1?is_slippery=false") as env:
        ...     _ = env.reset(seed=0)
        ...     env.step("act", {"action": "jump"}).observation.splitlines()[0]
        "'jump' is not an action; choose one of left, down, right, up."
    """

    def __init__(self, spec: str) -> None:
        from twinkle.integrations.rollout_bridge import build_environment

        self.spec = spec
        self.env = build_environment(spec)
        if not self.env.spec.is_multi_turn:
            raise ValueError(
                f"{spec} is single-turn: roll it out as task rows (rollout_bridge), not episodes"
            )
        self._tool = _REPLY if self.env.spec.adapter == "dialogue" else _ACT
        self._state: Any = None
        self._reward = 0.0

    def reset(
        self, trajectory: dict[str, Any] | None = None, *, seed: int | None = None
    ) -> StepResult:
        """Start an episode: an environment with a task list plays task ``seed % len``
        (task 0 without a seed), reset with ``seed``. The trajectory is not used."""
        s = self.env.spec
        options = None
        if s.supports_len and s.supports_task_index and len(self.env):
            options = {"task_index": (seed or 0) % len(self.env)}
        self._state, _ = self.env.reset(seed=seed if s.supports_seed else None, options=options)
        self._reward = 0.0
        return StepResult(observation=_text(self._state), info={"episode_reward": 0.0})

    def tools(self) -> list[dict[str, Any]]:
        t = self._tool
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": {
                        "type": "object",
                        "properties": {
                            t["argument"]: {"type": "string", "description": t["about"]}
                        },
                        "required": [t["argument"]],
                    },
                },
            }
        ]

    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        t = self._tool
        if self._state is None:
            return self._refused("the episode has not started (reset first)", done=False)
        if self._state.metadata.is_terminal:
            return self._refused("the episode is over; stop calling tools", done=True)
        if tool_name != t["name"]:
            return self._refused(f"unknown tool {tool_name!r}; call {t['name']!r}", done=False)
        value = (arguments or {}).get(t["argument"])
        if not isinstance(value, str) or not value.strip():
            return self._refused(f"give {t['argument']!r} as a non-empty string", done=False)
        from twinkle.core.state import Action

        try:
            result = self.env.step(self._state, Action.from_text(value))
        except Exception as exc:  # noqa: BLE001 - the env broke: the episode fails, not the batch
            cause = f"{type(exc).__name__}: {exc}"
            return StepResult(
                observation=f"Error: {cause}",
                done=True,
                info={
                    "episode_reward": self._reward,
                    "error": cause,
                    ENV_FAILED: f"EnvError: {cause}",
                },
            )
        self._state = result.next_state
        reward = float(result.rewards.total)
        self._reward += reward
        text = _text(self._state)
        if result.done:
            how = "ended" if result.terminated else "was cut off (step budget)"
            text = (
                f"{text}\n\nThe episode {how}; total reward {self._reward:g}. Stop calling tools."
            )
        return StepResult(
            observation=truncate_observation(text),
            reward=reward,
            done=result.done,
            info={"episode_reward": self._reward, "signals": result.rewards.as_dict()},
        )

    @property
    def episode_reward(self) -> float:
        """Sum of the step rewards since the last reset (see the module docstring)."""
        return self._reward

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()

    def _refused(self, why: str, *, done: bool) -> StepResult:
        """A call the environment was not stepped for: the model is told why."""
        return StepResult(
            observation=f"Error: {why}", done=done, info={"episode_reward": self._reward}
        )


def _text(state: Any) -> str:
    """What the model reads of a state: the observation's text only (``state.data`` holds
    the environment's bookkeeping, e.g. gym info, and stays out)."""
    observation = state.observation
    return truncate_observation(str(observation.prompt or getattr(observation.state, "text", "")))
