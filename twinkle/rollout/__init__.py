"""Multi-turn rollouts: ``APIMultiTurnRollout`` over a chat API, ``MultiTurnRollout`` over a
local sampler (token-exact), and the shared ``Rollout`` base, bridge and trace writing;
``RolloutRunner`` provisions, rolls out and scores a batch (what a pipeline stage calls).

Example:
    >>> from twinkle.rollout import APIMultiTurnRollout, Rollout
    >>> issubclass(APIMultiTurnRollout, Rollout)
    True
"""

from typing import TYPE_CHECKING

from twinkle.rollout.base import STOP_REASONS, Rollout
from twinkle.utils.lazy import lazy_getattr

if TYPE_CHECKING:
    from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
    from twinkle.rollout.bridge import extend_with_bridge
    from twinkle.rollout.multi_turn import MultiTurnRollout
    from twinkle.rollout.runner import BatchResult, RolloutConfig, RolloutRunner, RolloutStats

_LAZY = {
    "APIMultiTurnRollout": "twinkle.rollout.api_multi_turn",
    "MultiTurnRollout": "twinkle.rollout.multi_turn",
    "extend_with_bridge": "twinkle.rollout.bridge",
    "BatchResult": "twinkle.rollout.runner",
    "RolloutConfig": "twinkle.rollout.runner",
    "RolloutRunner": "twinkle.rollout.runner",
    "RolloutStats": "twinkle.rollout.runner",
}

__all__ = [
    "STOP_REASONS",
    "APIMultiTurnRollout",
    "BatchResult",
    "MultiTurnRollout",
    "Rollout",
    "RolloutConfig",
    "RolloutRunner",
    "RolloutStats",
    "extend_with_bridge",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
