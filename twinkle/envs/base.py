"""The environment interface every Twinkle env implements, and its step result.

An ``Env`` is used two ways: interactively during a multi-turn rollout (``reset`` then
``step`` per tool call, through ``EnvTool``) or in batch to ``evaluate`` finished
trajectories.

Example:
    >>> class Echo(Env):
    ...     def step(self, tool_name, arguments):
    ...         return StepResult(observation=str(arguments.get('text', '')), reward=1.0, done=True)
    >>> with Echo() as env:
    ...     env.reset()
    ...     env.step('echo', {'text': 'hi'}).observation
    StepResult(observation='', reward=0.0, done=False, info={})
    'hi'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

#: Exit code reported for a command stopped by its time limit (the coreutils ``timeout``
#: convention).
TIMEOUT_EXIT_CODE = 124
#: Observations longer than this are cut, so one runaway command cannot flood the context.
MAX_OBSERVATION_CHARS = 32 * 1024
#: The ``StepResult.info`` key an env sets, to the cause (``'SandboxError: ...'``), when it
#: failed itself rather than the action (its sandbox gone, its server unreachable): the
#: episode cannot go on, and ``EnvTool`` raises ``twinkle.errors.EnvironmentFailure``.
ENV_FAILED = "env_failed"


@dataclass
class StepResult:
    """What one ``reset``/``step`` gives back: the observation, a reward and whether it is over.

    Example:
        >>> r = StepResult(observation='ok', reward=1.0, done=True)
        >>> r.done, r.info
        (True, {})
    """

    observation: str = ""  # Environment observation after the action
    reward: float = 0.0  # Scalar reward for this step
    done: bool = False  # Whether the episode is terminated
    info: dict[str, Any] = field(default_factory=dict)  # Extra metadata


class Env(ABC):
    """Base class of all environments. Subclasses implement ``step``.

    Example:
        >>> class Counter(Env):
        ...     def step(self, tool_name, arguments):
        ...         return StepResult(observation=str(arguments['n'] + 1), done=True)
        >>> Counter().step('inc', {'n': 1}).observation
        '2'
    """

    def reset(self, trajectory: dict[str, Any] | None = None) -> StepResult:
        """Reset for a new episode."""
        return StepResult()

    @abstractmethod
    def step(self, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        """Execute a single action, return observation + reward + done."""

    def tools(self) -> list[dict[str, Any]]:
        """Return tool definitions (OpenAI function shape) available in this environment."""
        return []

    def evaluate(self, trajectories: list[dict[str, Any]], **kwargs: Any) -> list[float]:
        """Batch-evaluate completed trajectories, return rewards."""
        return [0.0] * len(trajectories)

    def close(self) -> None:  # noqa: B027 - optional hook: the default holds nothing to release
        """Release resources."""

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_observation(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [truncated {len(text) - limit} characters]"


def format_command_output(stdout: str, stderr: str, exit_code: int) -> str:
    """Render a command's result the way tools report it to the model."""
    parts = []
    if stdout:
        parts.append(stdout.rstrip("\n"))
    if stderr:
        parts.append("[stderr]\n" + stderr.rstrip("\n"))
    if exit_code != 0:
        parts.append(f"[exit code: {exit_code}]")
    return truncate_observation("\n".join(parts) if parts else "(no output)")
