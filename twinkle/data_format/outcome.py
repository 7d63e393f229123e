"""Whether a trajectory failed: the one rule that rollouts, scoring and tracking share.

A failed trajectory (its endpoint, sandbox or environment broke) is counted as failed and
kept out of rewards, reward statistics and feedback, so an outage never reads as a wrong
answer.

Example:
    >>> is_failed({'stop_reason': 'stop'}), is_failed({'stop_reason': 'api_error'})
    (False, True)
    >>> is_failed({'stop_reason': 'stop', 'error': 'sandbox gone'})
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Stop reasons that mean the infrastructure or the endpoint failed, not the model.
FAILED_STOPS = frozenset({"api_error", "error", "abort", "sandbox_error", "env_error"})


def is_failed(trajectory: Mapping[str, Any]) -> bool:
    """A trajectory failed when its rollout stopped on an error or it carries one."""
    return bool(trajectory.get("error")) or trajectory.get("stop_reason") in FAILED_STOPS
