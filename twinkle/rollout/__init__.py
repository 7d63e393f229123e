"""Multi-turn rollouts: ``APIMultiTurnRollout`` over a chat API, ``MultiTurnRollout`` over a
local sampler (token-exact), and the shared ``Rollout`` base, bridge and trace writing.

Example:
    >>> from twinkle.rollout import APIMultiTurnRollout, Rollout
    >>> issubclass(APIMultiTurnRollout, Rollout)
    True
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from twinkle.rollout.base import STOP_REASONS, Rollout

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'twinkle.rollout' has no attribute {name!r}")
