"""Evaluation signals: numeric rewards, textual feedback, or both, and their bundles.

A :class:`Signal` is one named component (its raw reward, weight and free metadata); a
:class:`SignalBundle` keeps every component by name and computes the weighted total over
the numeric ones only, so feedback-only signals never move a score. Stdlib only.

Example:
    >>> b = SignalBundle((
    ...     Signal("correctness", RewardType.OUTCOME, reward=0.8, weight=2.0),
    ...     Signal("hint", RewardType.STEP, feedback="check units"),
    ...     Signal("format", RewardType.FORMAT, reward=1.0, weight=0.5),
    ... ))
    >>> round(b.total, 6), b.feedback_texts()
    (2.1, ('check units',))
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from twinkle.core.state import Action, State

__all__ = ["RewardFunction", "RewardType", "Signal", "SignalBundle"]

HiddenT = TypeVar("HiddenT")


class RewardType(Enum):
    """What a signal measures.

    Example:
        >>> RewardType["FORMAT"] is RewardType.FORMAT, RewardType.OUTCOME.name
        (True, 'OUTCOME')
    """

    OUTCOME = auto()  # final correctness (binary or graded)
    STEP = auto()  # per-turn feedback
    FORMAT = auto()  # did the model follow formatting instructions
    PROCESS = auto()  # intermediate reasoning quality


@dataclass(frozen=True)
class Signal:
    """One evaluation component: a numeric ``reward``, a ``feedback`` text, or both.

    ``reward=None`` makes a feedback-only signal (it does not count in totals); weight 0
    keeps a numeric signal as a logged metric only.

    Example:
        >>> Signal("format", RewardType.FORMAT, reward=1.0).is_numeric
        True
    """

    name: str
    reward_type: RewardType
    reward: float | None = None
    feedback: str | None = None
    metadata: dict[str, Any] | None = None
    weight: float = 1.0

    @property
    def is_numeric(self) -> bool:
        return self.reward is not None


@dataclass(frozen=True)
class SignalBundle:
    """All signals of one step or one scored response.

    Example:
        >>> SignalBundle.single(1.0, name="correct").by_name("correct").reward
        1.0
        >>> SignalBundle.empty().total
        0.0
    """

    signals: tuple[Signal, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.signals, tuple):
            # Accept any iterable but store a tuple so the bundle stays immutable.
            object.__setattr__(self, "signals", tuple(self.signals))

    @property
    def total(self) -> float:
        """Weighted sum of the numeric rewards; feedback-only signals are skipped; 0.0 if none."""
        return float(sum(s.reward * s.weight for s in self.signals if s.reward is not None))

    def by_name(self, name: str, required: bool = False) -> Signal | None:
        """The first signal called ``name``; None, or ``ValueError`` when ``required``."""
        for s in self.signals:
            if s.name == name:
                return s
        if required:
            names = [s.name for s in self.signals]
            raise ValueError(f"Signal '{name}' not found; present: {names}")
        return None

    def by_type(self, reward_type: RewardType) -> tuple[Signal, ...]:
        return tuple(s for s in self.signals if s.reward_type is reward_type)

    def numeric_signals(self) -> tuple[Signal, ...]:
        return tuple(s for s in self.signals if s.reward is not None)

    def feedback_texts(self) -> tuple[str, ...]:
        return tuple(s.feedback for s in self.signals if s.feedback is not None)

    def as_dict(self) -> dict[str, float | None]:
        """``{name: reward}`` for every signal (feedback-only ones give None)."""
        return {s.name: s.reward for s in self.signals}

    @classmethod
    def single(
        cls,
        reward: float,
        name: str = "reward",
        reward_type: RewardType = RewardType.OUTCOME,
        *,
        feedback: str | None = None,
        metadata: dict[str, Any] | None = None,
        weight: float = 1.0,
    ) -> SignalBundle:
        return cls((Signal(name, reward_type, reward, feedback, metadata, weight),))

    @classmethod
    def empty(cls) -> SignalBundle:
        return cls(())


@runtime_checkable
class RewardFunction(Protocol[HiddenT]):
    """Anything that scores a transition into one :class:`Signal`.

    Example:
        >>> class Short:
        ...     name, reward_type = "short", RewardType.FORMAT
        ...     def compute(self, state, action, next_state):
        ...         return Signal(self.name, self.reward_type, float(len(action.text) < 10))
        >>> isinstance(Short(), RewardFunction)
        True
    """

    @property
    def name(self) -> str: ...

    @property
    def reward_type(self) -> RewardType: ...

    def compute(
        self, state: State[HiddenT], action: Action, next_state: State[HiddenT]
    ) -> Signal: ...
