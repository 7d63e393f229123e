"""The figures and verdict of a rollout: its configuration, which trajectories failed,
batch statistics merged across shards, and the failure threshold.

Errors are never rewards: a trajectory that failed (``stop_reason`` in ``FAILED_STOPS``, or an
``error`` set: an environment that could not be created or died mid-rollout, an endpoint
that is down) counts in ``RolloutStats.failed``, never in reward statistics.
``check_failure_rate`` turns a failure share above a threshold into a ``RunFailedError``
that names the failing endpoint. ``twinkle.rollout.runner`` re-exports every name here.

Example:
    >>> config = RolloutConfig(max_turns=4)
    >>> config.replay
    True
    >>> RolloutStats.of([{'stop_reason': 'stop'}, {'stop_reason': 'api_error'}]).failed
    1
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from twinkle.data_format.outcome import FAILED_STOPS, is_failed
from twinkle.errors import TwinkleError
from twinkle.rollout.base import endpoint_label

__all__ = [
    "FAILED_STOPS",
    "BatchResult",
    "PolicyConfig",
    "RolloutConfig",
    "RolloutStats",
    "RunFailedError",
    "check_failure_rate",
    "failing_endpoint",
    "is_failed",
]

#: Stop reasons of a trajectory that failed (the rollout could not finish it).

#: How many distinct errors a ``RolloutStats`` keeps (the first ones, for messages).
FIRST_ERRORS = 5


class RunFailedError(TwinkleError, RuntimeError):
    """A stage failed: more of its items failed than ``max_failure_rate`` allows, or a check
    before the work found an input, endpoint or tracking URI unusable.

    Example:
        >>> err = RunFailedError('rollout: 3 of 4 trajectories failed', stage='rollout')
        >>> err.stage, str(err)
        ('rollout', 'rollout: 3 of 4 trajectories failed')
    """

    def __init__(self, message: str, *, stage: str = "", stats: dict[str, Any] | None = None):
        super().__init__(message)
        self.stage = stage
        self.stats = stats or {}


@dataclass(slots=True)
class PolicyConfig:
    """The policy: an OpenAI-compatible endpoint, or replay of the recorded turns (no URL)."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    request_timeout_s: float = 120.0

    @property
    def replay(self) -> bool:
        return not (self.base_url and self.model)


@dataclass(slots=True)
class RolloutConfig:
    """How a batch is rolled out.

    Args:
        policy: the policy model (``PolicyConfig``).
        max_turns: model calls per trajectory at most.
        concurrency: trajectories in flight at once, and so environments alive at once.
        template, sandbox_timeout, tool_timeout_s: the sandbox of each trajectory.
        openenv_base_url: an OpenEnv server for episode rows (None: in-process).
        openenv_env_kwargs: constructor arguments by OpenEnv name (in-process only).
    """

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    max_turns: int = 8
    concurrency: int = 8
    template: str = "base"
    sandbox_timeout: int = 300
    tool_timeout_s: float = 60.0
    openenv_base_url: str | None = None
    openenv_env_kwargs: dict[str, dict[str, Any]] | None = None

    @property
    def replay(self) -> bool:
        return self.policy.replay

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RolloutConfig:
        """From a nested settings dict (``policy``, ``sandbox`` sub-dicts; unknown keys
        ignored), such as a pipeline's rollout parameters dumped to a dict."""
        policy = {
            k: v for k, v in (settings.get("policy") or {}).items() if k in PolicyConfig.__slots__
        }
        sandbox = settings.get("sandbox") or {}
        top = {
            k: settings[k]
            for k in ("max_turns", "concurrency", "openenv_base_url", "openenv_env_kwargs")
            if k in settings
        }
        box = {
            k: sandbox[k] for k in ("template", "sandbox_timeout", "tool_timeout_s") if k in sandbox
        }
        return cls(policy=PolicyConfig(**policy), **top, **box)


@dataclass(slots=True)
class RolloutStats:
    """Figures of one or more rollout batches; ``merge`` adds a shard's.

    ``rollout_s`` is wall time; ``provision_s`` (creating and releasing environments) and
    ``scoring_s`` are summed over trajectories, which overlap one another.

    Example:
        >>> a = RolloutStats.of([{'stop_reason': 'stop'}], rollout_s=1.0)
        >>> b = RolloutStats.of([{'stop_reason': 'api_error', 'error': 'E: down'}], rollout_s=2.0)
        >>> m = a.merge(b)
        >>> m.trajectories, m.failed, m.failure_rate, m.rollout_s, m.errors
        (2, 1, 0.5, 3.0, ['E: down'])
    """

    trajectories: int = 0
    failed: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    provision_s: float = 0.0
    rollout_s: float = 0.0
    scoring_s: float = 0.0
    traces: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, trajectories: Sequence[Mapping[str, Any]], **figures: Any) -> RolloutStats:
        """The figures of ``trajectories`` plus timings/trace counts given as keywords."""
        errors: list[str] = []
        for t in trajectories:
            if is_failed(t):
                text = str(t.get("error") or t.get("stop_reason"))
                if text not in errors and len(errors) < FIRST_ERRORS:
                    errors.append(text)
        return cls(
            trajectories=len(trajectories),
            failed=sum(1 for t in trajectories if is_failed(t)),
            stop_reasons=dict(Counter(str(t.get("stop_reason")) for t in trajectories)),
            errors=errors,
            **figures,
        )

    @property
    def failure_rate(self) -> float:
        return self.failed / self.trajectories if self.trajectories else 0.0

    def merge(self, other: RolloutStats) -> RolloutStats:
        stops = Counter(self.stop_reasons)
        stops.update(other.stop_reasons)
        errors = list(self.errors)
        errors += [e for e in other.errors if e not in errors][: FIRST_ERRORS - len(errors)]
        traces = Counter(self.traces)
        traces.update(other.traces)
        return RolloutStats(
            trajectories=self.trajectories + other.trajectories,
            failed=self.failed + other.failed,
            stop_reasons=dict(stops),
            errors=errors,
            provision_s=self.provision_s + other.provision_s,
            rollout_s=self.rollout_s + other.rollout_s,
            scoring_s=self.scoring_s + other.scoring_s,
            traces=dict(traces),
        )

    @classmethod
    def merged(cls, parts: Sequence[RolloutStats]) -> RolloutStats:
        out = cls()
        for part in parts:
            out = out.merge(part)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failure_rate": self.failure_rate}


_HTTP_RE = re.compile(r"\(HTTP (\d{3})\)|Error code: (\d{3})")


def _status_of(errors: Sequence[str]) -> str:
    """What the errors say about an endpoint: an HTTP status, unreachable, timing out, or
    replies that are no chat completion.

    Example:
        >>> _status_of(["APIError: no choices in reply (endpoint http://h/v1)"])
        'replying with no chat completion'
    """
    for text in errors:
        m = _HTTP_RE.search(text)
        if m:
            return f"HTTP {m.group(1) or m.group(2)}"
    joined = " ".join(errors)
    if "connection" in joined.lower() or "ConnectError" in joined:
        return "unreachable"
    if "Timeout" in joined or "timed out" in joined or "no reply" in joined:
        return "timing out"
    if "JSONDecodeError" in joined or "Expecting value" in joined:
        return "replying with bodies that are not JSON"
    if "no choices in reply" in joined:
        return "replying with no chat completion"
    return "failing"


def failing_endpoint(stats: RolloutStats, config: RolloutConfig, sandbox_url: str | None) -> str:
    """``'<what> <url>: <status>'`` for the endpoint most of the first errors point at."""
    errors = stats.errors
    boxed = [e for e in errors if e.startswith("SandboxError")]
    games = [e for e in errors if e.startswith("OpenEnvError")]
    if boxed and len(boxed) >= len(errors) / 2:
        return f"sandbox endpoint {endpoint_label(sandbox_url) or '(none)'}: {_status_of(boxed)}"
    if games and len(games) >= len(errors) / 2:
        where = endpoint_label(config.openenv_base_url) or "in-process"
        return f"OpenEnv environments ({where}): {_status_of(games)}"
    if config.replay:
        return f"replay policy: {_status_of(errors)}"
    return f"policy endpoint {endpoint_label(config.policy.base_url)}: {_status_of(errors)}"


def check_failure_rate(
    stats: RolloutStats,
    max_failure_rate: float,
    *,
    stage: str = "rollout",
    config: RolloutConfig | None = None,
    sandbox_url: str | None = None,
) -> str | None:
    """None when nothing failed; a warning line when failures stay within
    ``max_failure_rate``; raises ``RunFailedError`` (naming the failing endpoint and the
    first errors) above it.

    Example:
        >>> ok = RolloutStats.of([{'stop_reason': 'stop'}] * 3 + [{'error': 'E: x'}])
        >>> check_failure_rate(ok, 0.5)
        'rollout: 1 of 4 trajectories failed (25%, within max_failure_rate 50%): E: x'
        >>> check_failure_rate(RolloutStats.of([{'error': 'E: x'}]), 0.5)
        Traceback (most recent call last):
        ...
        twinkle.rollout.runner_stats.RunFailedError: rollout: 1 of 1 trajectories failed ...
    """
    if not stats.failed:
        return None
    share = (
        f"{stats.failed} of {stats.trajectories} trajectories failed "
        f"({stats.failure_rate:.0%}, {{}} max_failure_rate {max_failure_rate:.0%})"
    )
    first = "; ".join(e[:300] for e in stats.errors[:3])
    if stats.failure_rate <= max_failure_rate:
        return f"{stage}: {share.format('within')}: {first}"
    where = failing_endpoint(stats, config or RolloutConfig(), sandbox_url)
    raise RunFailedError(
        f"{stage}: {share.format('over')}; {where}; first errors: {first}",
        stage=stage,
        stats=stats.as_dict(),
    )


@dataclass(slots=True)
class BatchResult:
    """What ``RolloutRunner.run`` returns: the scored trajectories in input order and the
    batch's figures (``stats``, timings included)."""

    trajectories: list[dict[str, Any]]
    stats: RolloutStats
