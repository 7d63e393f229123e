"""Score model responses against an environment's tasks, one at a time or in batches.

``Scorer`` drives a single-turn environment: ``reset(options={"task_index": i})``, then one
``step`` with the response as a text action. ``score`` raises on bad input (it is the
direct API); ``score_batch`` never raises for a bad item: that item gets a
:class:`ScoringResult` holding one ``score_error`` signal with the default reward and the
reason, and the rest of the batch carries on. Rewards that wait on I/O (an LLM judge, a
sandbox) overlap: when the environment has async rewards (a judge's ``acompute``) and an
``astep``, a batch runs on one ``asyncio`` loop, bounded by the judge backend's limiter;
otherwise it runs in a pool of ``workers`` threads. Stdlib ``asyncio``/``concurrent.futures``.

Example:
    >>> from twinkle.core.environments import MathEnvironment
    >>> scorer = Scorer(MathEnvironment())
    >>> scorer.score(0, "so \\\\boxed{18}").total
    1.0
    >>> [r.signals for r in scorer.score_batch([0, 99], ["18", "18"])][1]
    {'score_error': 0.0}
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import Action
from twinkle.utils.aio import run_sync

__all__ = ["Scorer", "ScoringResult", "error_bundle"]

#: Longer responses keep only their tail (where the final answer is) before scoring.
MAX_RESPONSE_CHARS = 200_000


def error_bundle(reason: str, default: float = 0.0) -> SignalBundle:
    """The bundle a failed scoring gets: one ``score_error`` signal, the default and the reason."""
    return SignalBundle(
        (
            Signal(
                "score_error",
                RewardType.OUTCOME,
                reward=default,
                metadata={"outcome": "error", "error": reason, "extracted": None},
            ),
        )
    )


@dataclass(frozen=True)
class ScoringResult:
    """One scored response.

    Attributes:
        total: the bundle's weighted total.
        signals: ``{name: reward}`` for every signal (feedback-only ones give None).
        extracted_answer: what the environment read from the response; None when it read
            nothing (extraction failure is never ``""``).
        metadata: ``{name: signal.metadata}`` for the signals that have metadata.
        bundle: the full :class:`SignalBundle`.
        error: why scoring failed, or None.

    Example:
        >>> r = ScoringResult.from_bundle(error_bundle("no such task"), error="no such task")
        >>> r.total, r.outcome, r.extracted_answer
        (0.0, 'error', None)
    """

    total: float
    signals: dict[str, float | None]
    extracted_answer: str | None
    metadata: dict[str, dict[str, Any]]
    bundle: SignalBundle = field(default_factory=SignalBundle)
    error: str | None = None

    @property
    def outcome(self) -> str | None:
        """The first signal's ``outcome`` (correct / wrong / unparsed / error), if any."""
        for meta in self.metadata.values():
            if "outcome" in meta:
                return meta["outcome"]
        return None

    @classmethod
    def from_bundle(
        cls, bundle: SignalBundle, extracted: str | None = None, error: str | None = None
    ) -> ScoringResult:
        if extracted is None:
            for s in bundle.signals:
                if s.metadata and s.metadata.get("extracted") is not None:
                    extracted = s.metadata["extracted"]
                    break
        return cls(
            total=bundle.total,
            signals={s.name: s.reward for s in bundle.signals},
            extracted_answer=extracted,
            metadata={s.name: s.metadata for s in bundle.signals if s.metadata},
            bundle=bundle,
            error=error,
        )


class Scorer:
    """Scores responses to a single-turn environment's tasks.

    Args:
        environment: an environment with ``spec.supports_task_index`` and not multi-turn.
        default: the reward a response gets when it cannot be scored.
        workers: threads for ``score_batch`` (use many for judge or sandbox rewards).

    Raises:
        TypeError: for a multi-turn environment, or one without task indices.

    Example:
        >>> from twinkle.core.registry import environment_registry
        >>> Scorer(environment_registry.get("multiple_choice")).score(0, "Answer: B").total
        1.0
    """

    def __init__(self, environment: Any, *, default: float = 0.0, workers: int = 1) -> None:
        spec = environment.spec
        if spec.is_multi_turn:
            raise TypeError(
                f"Scorer needs a single-turn environment; '{spec.name}' is multi-turn "
                "(roll it out and score the trajectory instead)"
            )
        if not spec.supports_task_index:
            raise TypeError(
                f"Scorer needs supports_task_index=True; '{spec.name}' does not support it"
            )
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.environment = environment
        self.default = default
        self.workers = workers

    def score(self, task_index: int, response: str) -> ScoringResult:
        """Score one response; bad input raises (``TypeError``/``IndexError``)."""
        if not isinstance(response, str):
            raise TypeError(f"response must be a str, got {type(response).__name__}")
        if len(response) > MAX_RESPONSE_CHARS:
            response = response[-MAX_RESPONSE_CHARS:]
        state, _ = self.environment.reset(options={"task_index": task_index})
        result = self.environment.step(state, Action.from_text(response))
        extracted = result.info.get("extracted_answer") if result.info else None
        return ScoringResult.from_bundle(result.rewards, extracted)

    def score_action(self, task_index: int, action: Action) -> ScoringResult:
        """Score a full action (text and tool calls) against task ``task_index``."""
        state, _ = self.environment.reset(options={"task_index": task_index})
        result = self.environment.step(state, action)
        extracted = result.info.get("extracted_answer") if result.info else None
        return ScoringResult.from_bundle(result.rewards, extracted)

    def _safe(self, task_index: Any, response: Any) -> ScoringResult:
        try:
            if isinstance(response, Action):
                return self.score_action(task_index, response)
            return self.score(task_index, response)
        except Exception as exc:  # noqa: BLE001 - a bad item is data: it must not sink the batch
            reason = f"{type(exc).__name__}: {exc}"
            return ScoringResult.from_bundle(error_bundle(reason, self.default), None, reason)

    def score_batch(
        self, indices: Sequence[int], responses: Sequence[str | Action]
    ) -> list[ScoringResult]:
        """Score ``responses[k]`` against task ``indices[k]``; never raises for a bad item.

        Raises:
            ValueError: when the two sequences differ in length.
        """
        if len(indices) != len(responses):
            raise ValueError(
                "indices and responses must have the same length "
                f"({len(indices)} != {len(responses)})"
            )
        if self._async_rewards():
            return run_sync(self.ascore_batch(indices, responses))
        if self.workers == 1 or len(indices) < 2:
            return [self._safe(i, r) for i, r in zip(indices, responses)]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(indices))) as pool:
            return list(pool.map(self._safe, indices, responses))

    def _async_rewards(self) -> bool:
        env = self.environment
        return hasattr(env, "astep") and any(
            hasattr(rf, "acompute") for rf in getattr(env, "reward_functions", ())
        )

    async def _ascore_one(self, task_index: Any, response: Any) -> ScoringResult:
        try:
            if isinstance(response, Action):
                action = response
            elif isinstance(response, str):
                action = Action.from_text(response[-MAX_RESPONSE_CHARS:])
            else:
                raise TypeError(f"response must be a str, got {type(response).__name__}")
            state, _ = self.environment.reset(options={"task_index": task_index})
            astep = getattr(self.environment, "astep", None)
            if astep is not None:
                result = await astep(state, action)
            else:
                result = await asyncio.to_thread(self.environment.step, state, action)
            extracted = result.info.get("extracted_answer") if result.info else None
            return ScoringResult.from_bundle(result.rewards, extracted)
        except Exception as exc:  # noqa: BLE001 - as in _safe()
            reason = f"{type(exc).__name__}: {exc}"
            return ScoringResult.from_bundle(error_bundle(reason, self.default), None, reason)

    async def ascore_batch(
        self, indices: Sequence[int], responses: Sequence[str | Action]
    ) -> list[ScoringResult]:
        """:meth:`score_batch` on the running event loop; judges' calls overlap."""
        if len(indices) != len(responses):
            raise ValueError(
                "indices and responses must have the same length "
                f"({len(indices)} != {len(responses)})"
            )
        return list(
            await asyncio.gather(*(self._ascore_one(i, r) for i, r in zip(indices, responses)))
        )

    @classmethod
    def from_registry(cls, name: str, adapter: str | None = None, **config: Any) -> Scorer:
        """A scorer over ``environment_registry.get(name, adapter, **config)``."""
        from twinkle.core.registry import environment_registry

        return cls(environment_registry.get(name, adapter, **config))
