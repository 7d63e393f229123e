"""Bridges from environments to training and data pipelines: scoring, prompts, token masks.

* :class:`Scorer` scores responses against a single-turn environment's tasks.
* :class:`DatasetProvider` turns tasks into prompt items or a Hugging Face dataset.
* :class:`TrajectoryMasker` turns trajectories into token ids with a model/environment mask.
* :mod:`twinkle.integrations.rollout_bridge` feeds tasks into ``APIMultiTurnRollout`` /
  ``MultiTurnRollout`` and scores their output trajectories.

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> from twinkle.integrations import Scorer
    >>> Scorer(environment_registry.get("math")).score(0, "\\\\boxed{18}").total
    1.0
"""

from twinkle.integrations.dataset import DatasetProvider, TaskItem
from twinkle.integrations.masker import MaskedTrajectory, TokenSpan, TrajectoryMasker
from twinkle.integrations.scorer import Scorer, ScoringResult

__all__ = [
    "DatasetProvider",
    "MaskedTrajectory",
    "Scorer",
    "ScoringResult",
    "TaskItem",
    "TokenSpan",
    "TrajectoryMasker",
]
