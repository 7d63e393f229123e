"""Rule-based reward functions, and the signal types they return.

``RewardType``, ``Signal``, ``SignalBundle`` and ``RewardFunction`` live in
:mod:`twinkle.core.signals` and are re-exported here, so code that writes a reward function
imports everything it needs from one module. Stdlib only.

Example:
    >>> from twinkle.core.extraction import TagBasedExtractor
    >>> from twinkle.core.state import Action, Observation, State, StateMetadata
    >>> s = State(Observation("q"), None, StateMetadata(0, "ep"))
    >>> reward = FormatReward(TagBasedExtractor())
    >>> reward.compute(s, Action.from_text("<answer>4</answer>"), s).reward
    1.0
    >>> StepPenalty(0.1).compute(s, Action.from_text("x"), s.with_metadata(step=1)).reward
    -0.1
"""

from __future__ import annotations

from typing import Any

from twinkle.core.extraction import AnswerExtractor
from twinkle.core.signals import RewardFunction, RewardType, Signal, SignalBundle
from twinkle.core.state import Action, State

__all__ = [
    "FormatReward",
    "RewardFunction",
    "RewardType",
    "Signal",
    "SignalBundle",
    "StepPenalty",
]


class FormatReward:
    """1.0 when the extractor finds an answer in the response text, else 0.0.

    Example:
        >>> from twinkle.core.extraction import BoxedExtractor
        >>> FormatReward(BoxedExtractor()).name
        'format'
    """

    def __init__(self, answer_extractor: AnswerExtractor, weight: float = 1.0) -> None:
        self.answer_extractor = answer_extractor
        self.weight = weight

    @property
    def name(self) -> str:
        return "format"

    @property
    def reward_type(self) -> RewardType:
        return RewardType.FORMAT

    def compute(self, state: State[Any], action: Action, next_state: State[Any]) -> Signal:
        answer, meta = self.answer_extractor.extract(action.text or "")
        return Signal(
            "format",
            RewardType.FORMAT,
            1.0 if answer is not None else 0.0,
            metadata={"extraction": meta},
            weight=self.weight,
        )


class StepPenalty:
    """A constant ``-penalty`` on every step (discourages long episodes).

    Example:
        >>> StepPenalty(0.5).reward_type
        <RewardType.STEP: 2>
    """

    def __init__(self, penalty: float = 0.1) -> None:
        self.penalty = penalty

    @property
    def name(self) -> str:
        return "step_penalty"

    @property
    def reward_type(self) -> RewardType:
        return RewardType.STEP

    def compute(self, state: State[Any], action: Action, next_state: State[Any]) -> Signal:
        return Signal(
            "step_penalty",
            RewardType.STEP,
            -self.penalty,
            metadata={"step": next_state.metadata.step},
        )
