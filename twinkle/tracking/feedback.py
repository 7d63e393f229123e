"""Rewards on traces: each reward as an MLflow feedback assessment, with its rationale.

``log_feedback`` attaches one feedback per reward to a stored trace (a missing reward as an
assessment error that says why), ``rationale`` explains a reward from what scoring left on
the trajectory, and ``summarize_rewards`` gathers the numeric values for metrics.

Example:
    >>> summarize_rewards([{'total': 1.0, 'note': 'ok'}, None, {'total': 0}])
    {'total': [1.0, 0.0]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from twinkle.tracking.scrub import scrub_secrets


def log_feedback(
    mlflow: Any, trace_id: str, traj: Mapping[str, Any], reward: Mapping[str, Any]
) -> None:
    """One ``mlflow.log_feedback`` per reward of ``traj`` on the stored trace ``trace_id``."""
    from mlflow.entities import AssessmentError, AssessmentSource

    source = AssessmentSource(source_type="CODE", source_id="twinkle")
    for name, value in reward.items():
        if value is None:
            mlflow.log_feedback(
                trace_id=trace_id,
                name=name,
                source=source,
                error=AssessmentError(
                    error_code="REWARD_UNAVAILABLE",
                    error_message=str(
                        scrub_secrets(str(traj.get("reward_error") or "reward not computed"))
                    )[:1000],
                ),
            )
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = str(value)
        else:
            value = float(value)
        mlflow.log_feedback(
            trace_id=trace_id,
            name=name,
            value=value,
            source=source,
            rationale=rationale(traj, name, value),
        )


def rationale(traj: Mapping[str, Any], name: str, value: Any) -> str | None:
    """Why reward ``name`` of ``traj`` is ``value``, from what scoring left on the trajectory:
    the outcome (``reward_outcome``), the answer extracted from the reply
    (``extracted_answer``) and the scorer's note (``reward_error``).

    Example:
        >>> rationale({'reward_outcome': 'correct', 'extracted_answer': '18'}, 'total', 1.0)
        "total = 1.0: outcome correct; extracted answer '18'"
    """
    parts = []
    if traj.get("reward_outcome"):
        parts.append(f"outcome {traj['reward_outcome']}")
    answer = traj.get("extracted_answer")
    if answer not in (None, ""):
        parts.append(f"extracted answer {str(answer)[:500]!r}")
    if traj.get("reward_error"):
        parts.append(f"note: {str(traj['reward_error'])[:500]}")
    if not parts:
        return None
    return str(scrub_secrets(f"{name} = {value}: " + "; ".join(parts)))


def summarize_rewards(rewards: Iterable[Mapping[str, Any] | None]) -> dict[str, list[float]]:
    """Numeric reward values by name, for metrics and histograms (None and non-numbers left out)."""
    out: dict[str, list[float]] = {}
    for reward in rewards:
        for name, value in (reward or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(name, []).append(float(value))
    return out
