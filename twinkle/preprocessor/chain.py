"""Build and run a curation chain from filter names: shared by ``twinkle curate`` and the flows.

A chain is a list of stages in the order given. Global steps (``dedup``, ``neardedup``)
see every row at once; runs of per-batch steps are wrapped in one ``QualityPreprocessor``
and fed batch by batch. Filter classes are imported only when named, so a chain without a
filter never loads its module.

Example:
    >>> plan = build_pipeline(['dedup', 'normalize'])
    >>> [s.name for s in plan]
    ['dedup', 'normalize']
    >>> msgs = [{'role': 'user', 'content': 'sum 2+2'}, {'role': 'assistant', 'content': '4'}]
    >>> rows = [{'messages': msgs}] * 3
    >>> kept, stats = curate_rows(rows, plan)
    >>> len(kept), stats.dropped()
    (1, {'DedupFilter': {'duplicate': 2}})
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from twinkle.preprocessor.quality import (
    PipelineStats,
    QualityPreprocessor,
    append_dropped,
    step_name,
)

#: name -> (module, class, needs the whole dataset)
FILTERS: dict[str, tuple[str, str, bool]] = {
    "dedup": ("twinkle.preprocessor.dedup_filter", "DedupFilter", True),
    "neardedup": ("twinkle.preprocessor.dedup_filter", "NearDedupFilter", True),
    "model": ("twinkle.preprocessor.model_filter", "ModelFilter", False),
    "hard": ("twinkle.preprocessor.hard_filter", "HardFilter", False),
    "deadloop": ("twinkle.preprocessor.dead_loop_filter", "DeadLoopFilter", False),
    "refuse": ("twinkle.preprocessor.refuse_filter", "RefuseFilter", False),
    "soup": ("twinkle.preprocessor.token_soup", "TokenSoupFilter", False),
    "normalize": ("twinkle.preprocessor.message_normalizer", "MessageNormalizer", False),
    # Not in the default chain: it needs the `pii` extra and loads spaCy models.
    "pii": ("twinkle.preprocessor.pii_presidio_filter", "PIIPresidioFilter", False),
    # Not in the default chain (the seed documents them, not as defaults): structural checks,
    # intent tags (keeps every row; counts in the step's ``tags`` statistic) and model-based
    # scoring (needs a backend: an OpenAI-compatible endpoint or a local sampler).
    "sanity": ("twinkle.preprocessor.message_sanity", "MessageSanityFilter", False),
    "intent": ("twinkle.preprocessor.intent", "IntentClassifier", False),
    "score": ("twinkle.preprocessor.score_filter", "ScoreFilter", False),
}

#: The default chain, the one constant every entry point reads (``build_pipeline``,
#: ``twinkle curate --filters``, the curation flow's ``filters``/``dedup``/``near_dedup``).
#: The documented order: global dedup first, then the rule filters, then normalisation.
DEFAULT_CHAIN: tuple[str, ...] = ("dedup", "hard", "deadloop", "refuse", "soup", "normalize")

#: Constructor keywords used unless ``params`` overrides them. HardFilter's length caps are
#: off by default in the class (as documented); a chain run on raw logs sets them (50,000
#: characters a round, 200,000 a conversation) so that a runaway round is dropped instead of
#: reaching the trainer.
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "hard": {"max_chars_per_round": 50_000, "max_total_chars": 200_000},
}


@dataclass(slots=True)
class Stage:
    """One configured step of a chain.

    Example:
        >>> Stage(name="dedup", step=lambda rows: (rows, []), is_global=True).is_global
        True
    """

    name: str
    step: Callable[..., Any]
    is_global: bool


def parse_filter_names(spec: str | Iterable[str]) -> list[str]:
    """``'dedup,hard'`` or a list of names -> checked names (ValueError lists the valid ones)."""
    names = [n.strip().lower() for n in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in FILTERS]
    if unknown:
        raise ValueError(
            f"unknown filter(s) {', '.join(unknown)}; choose from {', '.join(FILTERS)}"
        )
    if not names:
        raise ValueError(f"no filter given; choose from {', '.join(FILTERS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"filter names repeat in {names}; give each at most once")
    return names


def build_pipeline(
    names: str | Iterable[str] = DEFAULT_CHAIN,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Stage]:
    """Instantiate the named filters in order; ``params[name]`` holds constructor keywords.

    Raises ValueError for an unknown name or for ``params`` naming a filter not in the chain.
    """
    names = parse_filter_names(names)
    params = dict(params or {})
    extra = sorted(set(params) - set(names))
    if extra:
        raise ValueError(f"parameters given for filters not in the chain: {', '.join(extra)}")
    stages = []
    for name in names:
        module, cls, is_global = FILTERS[name]
        kwargs = {**DEFAULT_PARAMS.get(name, {}), **params.get(name, {})}
        step = getattr(import_module(module), cls)(**kwargs)
        stages.append(Stage(name, step, is_global))
    return stages


def curate_rows(
    rows: Sequence[Any],
    stages: Sequence[Stage],
    dropped_log_path: str = "",
    batch_size: int = 1000,
    on_batch: Callable[[str, int, int], None] | None = None,
) -> tuple[list[Any], PipelineStats]:
    """Run ``stages`` over ``rows``; returns the survivors and per-step statistics.

    Dropped rows are appended to ``dropped_log_path`` (never truncated here).
    ``on_batch(stage, n_done, n_total)`` is called after each global step and each batch
    (``n_total`` is the number of rows entering that stage), for progress bars.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be >= 1")
    stats = PipelineStats()
    current = list(rows)
    i = 0
    while i < len(stages):
        stage = stages[i]
        if stage.is_global:
            name = step_name(stage.step)
            t0 = time.perf_counter()
            kept, dropped = stage.step(current)
            reasons = Counter(
                d.get("drop_reason", name) if isinstance(d, dict) else name for d in dropped
            )
            stats.record(name, len(current), len(kept), reasons, time.perf_counter() - t0)
            append_dropped(dropped_log_path, name, dropped)
            if on_batch:
                on_batch(stage.name, len(current), len(current))
            current = list(kept)
            i += 1
            continue
        j = i
        while j < len(stages) and not stages[j].is_global:
            j += 1
        qp = QualityPreprocessor([s.step for s in stages[i:j]], dropped_log_path)
        label = ",".join(s.name for s in stages[i:j])
        survivors: list[Any] = []
        for start in range(0, len(current), batch_size):
            batch = current[start : start + batch_size]
            survivors.extend(qp(batch))
            if on_batch:
                on_batch(label, len(batch), len(current))
        for name in qp.names:  # steps a batch never reached still appear, with zero counts
            if name not in qp.stats.steps:
                qp.stats.record(name, 0, 0, {}, 0.0)
        stats.merge(qp.stats)
        current = survivors
        i = j
    return current, stats
