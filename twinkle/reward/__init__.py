"""Trajectory rewards: token F1 against the ground truth, tool exploration, reasoning steps.

``F1Reward``, ``ToolExploreReward`` and ``CoTReward`` score trajectory dicts (``messages``,
``user_data``) and are core reward functions too. Loaded on first attribute access, so
``import twinkle.reward`` stays free; F1 needs ``nltk`` (``pip install 'twinkle[envs]'``).

Example:
    >>> from twinkle.reward import F1Reward
    >>> F1Reward().name
    'f1'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twinkle.utils.lazy import lazy_getattr

_LAZY = {
    "CoTReward": "twinkle.reward.text_rewards",
    "F1Reward": "twinkle.reward.text_rewards",
    "ToolExploreReward": "twinkle.reward.text_rewards",
    "f1_score": "twinkle.reward.text_rewards",
}

__all__ = ["CoTReward", "F1Reward", "ToolExploreReward", "f1_score"]

if TYPE_CHECKING:
    from twinkle.reward.text_rewards import CoTReward, F1Reward, ToolExploreReward, f1_score

__getattr__ = lazy_getattr(__name__, _LAZY)
