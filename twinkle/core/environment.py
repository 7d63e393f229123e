"""The functional environment protocol, its step result and its capability spec.

An :class:`Environment` is explicit about state: ``reset`` returns a :class:`State`,
``step(state, action)`` takes it back. Pure environments (``spec.pure_step``) accept any
earlier state, which is what makes cheap branching possible; the others compose
:class:`_StateContinuityTracker` and raise ``NotImplementedError`` on a stale state. Stdlib
only (``typing.Protocol``), so any class with the right members is an environment.

Example:
    >>> from twinkle.core.signals import SignalBundle
    >>> from twinkle.core.state import Observation, State, StateMetadata
    >>> s = State(Observation("q"), None, StateMetadata(0, "ep"))
    >>> r = StepResult(next_state=s.with_metadata(step=1), rewards=SignalBundle.empty(),
    ...                truncated=True)
    >>> r.done
    True
    >>> EnvironmentSpec(name="gsm8k", adapter="math").pure_step
    False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from twinkle.core.signals import RewardFunction, SignalBundle
from twinkle.core.state import Action, State
from twinkle.core.tools import ToolDefinition

__all__ = ["Environment", "EnvironmentSpec", "PromptSource", "StepResult"]

HiddenT = TypeVar("HiddenT")

_new = object.__new__


@dataclass(frozen=True)
class StepResult(Generic[HiddenT]):
    """The outcome of one ``step``.

    ``extracted_action`` is the extractor's output after cleaning; ``resolved_action`` is
    what the environment understood after mapping it to its native action. Extraction
    failure leaves both None; a mapping failure leaves only ``resolved_action`` None.
    Consumers fall back to ``action.text`` when they are None.

    Example:
        >>> from twinkle.core.state import Observation, State, StateMetadata
        >>> s = State(Observation("q"), None, StateMetadata(1, "ep", is_terminal=True))
        >>> StepResult(next_state=s, truncated=True).done
        True
    """

    next_state: State[HiddenT]
    rewards: SignalBundle = field(default_factory=SignalBundle)
    terminated: bool = False  # the episode ended naturally
    truncated: bool = False  # the episode was cut off (max steps, budget)
    extracted_action: str | None = None
    resolved_action: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def _make(
        cls,
        next_state: State[HiddenT],
        rewards: SignalBundle,
        terminated: bool,
        truncated: bool,
        extracted_action: str | None,
        resolved_action: str | None,
        info: dict[str, Any],
    ) -> StepResult[HiddenT]:
        """A per-step fast constructor like ``State._make`` (see ``twinkle.core.state``):
        every field positional, no defaults, no checks; equal to the public constructor's.

        Example:
            >>> from twinkle.core.state import Observation, State, StateMetadata
            >>> s = State(Observation("q"), None, StateMetadata(1, "ep"))
            >>> args = (s, SignalBundle(), True, False, "a", "a", {})
            >>> StepResult._make(*args) == StepResult(*args)
            True
        """
        self = _new(cls)
        d = self.__dict__
        d["next_state"] = next_state
        d["rewards"] = rewards
        d["terminated"] = terminated
        d["truncated"] = truncated
        d["extracted_action"] = extracted_action
        d["resolved_action"] = resolved_action
        d["info"] = info
        return self

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass(frozen=True)
class EnvironmentSpec:
    """What an environment is and what it supports; integrations check the flags up front.

    Args:
        name: environment name.
        adapter: the adapter that built it.
        max_steps: step budget; None means unlimited.
        is_multi_turn: True when an episode takes more than one model turn.
        supports_task_index: ``reset(options={"task_index": i})`` selects task i.
        supports_len: ``len(env)`` is the number of tasks.
        supports_seed: ``reset(seed=...)`` seeds the environment.
        pure_step: ``step`` accepts any earlier state, not only the latest one.

    Example:
        >>> EnvironmentSpec("mc", adapter="tasks", is_multi_turn=False).supports_task_index
        True
    """

    name: str
    adapter: str = ""
    max_steps: int | None = None
    is_multi_turn: bool = False
    supports_task_index: bool = True
    supports_len: bool = True
    supports_seed: bool = True
    pure_step: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    # Ours, after the seed's fields so that positional construction matches the seed.
    observation_type: str | None = None
    action_type: str | None = None


@runtime_checkable
class Environment(Protocol[HiddenT]):
    """The functional environment protocol (structural: no base class needed).

    Exactly the seed's members. ``__len__`` is optional (``spec.supports_len``), and so is
    ``prompts`` (:class:`PromptSource`): consumers read it with ``getattr(env, "prompts", {})``.

    Example:
        >>> from twinkle.core.environments import MathEnvironment
        >>> isinstance(MathEnvironment(tasks=[{"question": "1 + 1?", "answer": "2"}]), Environment)
        True
        >>> isinstance(object(), Environment)
        False
    """

    @property
    def spec(self) -> EnvironmentSpec: ...

    @property
    def reward_functions(self) -> tuple[RewardFunction, ...]: ...

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]: ...

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[HiddenT], dict[str, Any]]: ...

    def step(self, state: State[HiddenT], action: Action) -> StepResult[HiddenT]: ...

    def compute_rewards(
        self, state: State[HiddenT], action: Action, next_state: State[HiddenT]
    ) -> SignalBundle: ...


@runtime_checkable
class PromptSource(Protocol):
    """Optional environment member: ``prompts`` maps prompt names to texts (multi-turn
    environments; ``{}`` for single-turn ones). Not part of :class:`Environment`.

    Example:
        >>> from twinkle.core.environments import MathEnvironment
        >>> isinstance(MathEnvironment(tasks=[{"question": "1?", "answer": "1"}]), PromptSource)
        True
    """

    @property
    def prompts(self) -> dict[str, str]: ...


class _StateContinuityTracker:
    """Guards a non-pure environment against being stepped from a state that is not its latest.

    Example:
        >>> from twinkle.core.state import Observation, State, StateMetadata
        >>> t = _StateContinuityTracker()
        >>> s0 = State(Observation("q"), None, StateMetadata(0, "ep"))
        >>> t.track(s0); t.validate(s0, "demo")
    """

    def __init__(self) -> None:
        self._episode_id: str | None = None
        self._step: int | None = None
        #: The last tracked state: stepping it again needs no check (states are frozen).
        self.latest: State[Any] | None = None

    def track(self, state: State[Any]) -> None:
        self._episode_id = state.metadata.episode_id
        self._step = state.metadata.step
        self.latest = state

    def validate(self, state: State[Any], env_name: str) -> None:
        """Raise ``NotImplementedError`` unless ``state`` is the last tracked one."""
        if self._episode_id is None or state is self.latest:
            return
        if state.metadata.episode_id != self._episode_id:
            raise NotImplementedError(
                f"{env_name} has pure_step=False and cannot step a state from a different "
                f"episode ({state.metadata.episode_id!r}, current {self._episode_id!r}); "
                "use BranchManager to branch it"
            )
        if state.metadata.step != self._step:
            raise NotImplementedError(
                f"{env_name} has pure_step=False and cannot step a stale state "
                f"(step {state.metadata.step}, current step {self._step}); "
                "use BranchManager to branch it"
            )
