"""Multi-turn rollouts: ``APIMultiTurnRollout`` over a chat API, ``MultiTurnRollout`` over a
local sampler (token-exact), and the shared ``Rollout`` base, bridge and trace writing.

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

_LAZY = {
    "APIMultiTurnRollout": "twinkle.rollout.api_multi_turn",
    "MultiTurnRollout": "twinkle.rollout.multi_turn",
    "extend_with_bridge": "twinkle.rollout.bridge",
}

__all__ = [
    "STOP_REASONS",
    "APIMultiTurnRollout",
    "MultiTurnRollout",
    "Rollout",
    "extend_with_bridge",
]


__getattr__ = lazy_getattr(__name__, _LAZY)
