"""``QualityPreprocessor``: runs curation steps in order over one batch, counts and logs drops.

A batch is a list of rows or a dict of columns (what ``datasets.Dataset.map(batched=True)``
passes); the result has the same shape. Per-step statistics (rows in and out, drops per
reason, seconds) are kept on the instance as ``PipelineStats`` for the CLI, the Prefect
flow and MLflow tracking; dropped rows go to a JSONL log, one ``{step, reason, row}`` line
each.

The log is one file shared by every worker process: each batch is appended with a single
``os.write`` under an exclusive ``fcntl.flock`` on that file (standard library, no extra
dependency), so ``datasets.map(num_proc=N)`` workers never interleave lines and nothing has
to be merged afterwards. An existing log is never deleted or truncated implicitly; call
``truncate_dropped_logs(path)`` to start afresh.

Example:
    >>> from twinkle.preprocessor import QualityPreprocessor, Filter
    >>> class Short(Filter):
    ...     def check(self, row):
    ...         return 'too_short' if len(row['messages']) < 2 else None
    >>> qp = QualityPreprocessor([Short()])
    >>> qp({'messages': [[{'role': 'user', 'content': 'hi'}]], 'id': ['a']})
    {'messages': [], 'id': []}
    >>> qp.stats.dropped()
    {'Short': {'too_short': 1}}
"""

from __future__ import annotations

import copy
import fcntl
import glob
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinkle.preprocessor.base import map_col_to_row, map_row_to_col

logger = logging.getLogger("twinkle.preprocessor")

DROP_MODES = ("inline", "mark")
# Hidden per-row index used in ``mark`` mode to find each survivor's input slot.
_IDX = "_qp_idx"
KEEP_COLUMN = "_keep"
DROP_STEP_COLUMN = "_drop_step"
DROP_REASON_COLUMN = "_drop_reason"


@dataclass(slots=True)
class StepStats:
    """Counts and time of one step, summed over every batch it saw.

    Example:
        >>> StepStats("HardFilter", rows_in=3, rows_out=2).as_dict()["rows_out"]
        2
    """

    step: str
    rows_in: int = 0
    rows_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    #: Tags a tagging step (``tag_field``, e.g. IntentClassifier's intents) gave its output.
    tags: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "step": self.step,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "dropped": dict(self.dropped),
            "seconds": round(self.seconds, 6),
        }
        if self.tags:
            out["tags"] = dict(self.tags)
        return out


class PipelineStats:
    """Ordered per-step statistics; merges across batches, processes and stages.

    Example:
        >>> s = PipelineStats()
        >>> s.record('HardFilter', 10, 8, {'shallow_reply': 2}, 0.01)
        >>> s.rows_in, s.rows_out, s.dropped()
        (10, 8, {'HardFilter': {'shallow_reply': 2}})
    """

    def __init__(self) -> None:
        self.steps: dict[str, StepStats] = {}

    def record(
        self,
        step: str,
        rows_in: int,
        rows_out: int,
        dropped: Mapping[str, int],
        seconds: float,
        tags: Mapping[str, int] | None = None,
    ) -> None:
        s = self.steps.setdefault(step, StepStats(step))
        s.rows_in += rows_in
        s.rows_out += rows_out
        s.dropped.update(dropped)
        s.seconds += seconds
        if tags:
            s.tags.update(tags)

    def merge(self, other: PipelineStats) -> None:
        for s in other.steps.values():
            self.record(s.step, s.rows_in, s.rows_out, s.dropped, s.seconds, s.tags)

    @property
    def rows_in(self) -> int:
        return next(iter(self.steps.values())).rows_in if self.steps else 0

    @property
    def rows_out(self) -> int:
        return next(reversed(self.steps.values())).rows_out if self.steps else 0

    def dropped(self) -> dict[str, dict[str, int]]:
        """``{step: {reason: count}}`` for steps that dropped something."""
        return {name: dict(s.dropped) for name, s in self.steps.items() if s.dropped}

    def tags(self) -> dict[str, dict[str, int]]:
        """``{step: {tag: count}}`` for tagging steps (IntentClassifier: intent counts)."""
        return {name: dict(s.tags) for name, s in self.steps.items() if s.tags}

    def as_dict(self) -> dict[str, Any]:
        out = {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "steps": [s.as_dict() for s in self.steps.values()],
        }
        if any(s.tags for s in self.steps.values()):
            out["tags"] = self.tags()
        return out

    def lines(self) -> list[str]:
        return [
            f"  {s.step}: {s.rows_in}->{s.rows_out} (dropped {sum(s.dropped.values())}, "
            f"{s.seconds:.3f}s)" + (f" tags {dict(s.tags.most_common())}" if s.tags else "")
            for s in self.steps.values()
        ]


def step_name(step: Any) -> str:
    """A step's display name: its ``__name__`` if it has one, else its class name."""
    return getattr(step, "__name__", None) or type(step).__name__


def _step_names(pipeline: Sequence[Any]) -> list[str]:
    names: list[str] = []
    for step in pipeline:
        base = step_name(step)
        name, n = base, 1
        while name in names:  # two HardFilters with different settings stay apart
            n += 1
            name = f"{base}#{n}"
        names.append(name)
    return names


def _log_line(step: str, row: Any) -> str:
    if isinstance(row, dict):
        reason = row.get("drop_reason") or step
        row = {k: v for k, v in row.items() if k not in ("drop_reason", _IDX)}
    else:
        reason = step
    return json.dumps({"step": step, "reason": reason, "row": row}, ensure_ascii=False, default=str)


def _append_locked(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except FileNotFoundError:  # first write: create the folder then, not at construction
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:  # os.write may write less than asked for very large batches
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)  # closing releases the lock


def append_dropped(path: str, step: str, rows: Iterable[Any]) -> int:
    """Append dropped rows to the JSONL log ``path`` as ``{step, reason, row}``; return the count.

    Safe to call from several processes at once; a no-op when ``path`` is empty.
    """
    if not path:
        return 0
    lines = [_log_line(step, row) for row in rows]
    if lines:
        _append_locked(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return len(lines)


def truncate_dropped_logs(path: str) -> None:
    """Empty the dropped log at ``path`` (and remove per-process shards ``path.<pid>``)."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    for shard in _shards(path):
        os.remove(shard)


def _shards(path: str) -> list[str]:
    pattern = re.compile(re.escape(os.path.basename(path)) + r"\.\d+$")
    return sorted(
        p for p in glob.glob(glob.escape(path) + ".*") if pattern.match(os.path.basename(p))
    )


class QualityPreprocessor:
    """Run curation steps in order over a batch and return the survivors in the input's shape.

    Args:
        pipeline: steps; each takes a list of rows and returns ``(kept, dropped)``.
        dropped_log_path: JSONL file receiving ``{step, reason, row}`` for every dropped row
            (appended, never cleared implicitly; '' disables the log).
        drop_mode: ``'inline'`` returns survivors only. ``'mark'`` returns every input row with
            ``_keep`` (bool), ``_drop_step`` and ``_drop_reason`` columns ('' on kept rows);
            dropped rows are re-emitted from a copy of the input row. ``run_quality_pipeline``
            uses it so the parent process can rebuild statistics after
            ``datasets.map(num_proc=N)``.

    Output columns are the input batch's columns, plus any column a surviving row or a
    step's ``adds_columns`` attribute adds, with None for missing values; a batch that loses
    every row gives empty lists for each of them. ``stats`` accumulates over calls in this
    process; ``last_stats`` holds the latest call only.

    ``DedupFilter`` needs the whole dataset at once: run it before the per-batch steps (see
    ``twinkle.preprocessor.chain.curate_rows``), not inside a batched ``map``.

    Example:
        >>> def no_empty(rows):
        ...     kept = [r for r in rows if r['messages']]
        ...     return kept, [dict(r, drop_reason='empty') for r in rows if not r['messages']]
        >>> qp = QualityPreprocessor([no_empty])
        >>> qp([{'messages': []}, {'messages': [{'role': 'user', 'content': 'hi'}]}])
        [{'messages': [{'role': 'user', 'content': 'hi'}]}]
        >>> qp.last_stats.as_dict()['steps'][0]['dropped']
        {'empty': 1}
    """

    def __init__(
        self,
        pipeline: Sequence[Callable[..., Any]],
        dropped_log_path: str = "",
        drop_mode: str = "inline",
    ) -> None:
        if drop_mode not in DROP_MODES:
            raise ValueError(f"drop_mode={drop_mode!r} is not supported; use one of {DROP_MODES}")
        if isinstance(pipeline, (str, bytes)) or not all(callable(s) for s in pipeline):
            raise ValueError(
                "pipeline must be a list of callables taking a list of rows "
                "and returning (kept, dropped)"
            )
        self.pipeline = list(pipeline)
        self.names = _step_names(self.pipeline)
        self.dropped_log_path = str(dropped_log_path or "")
        self.drop_mode = drop_mode
        self.stats = PipelineStats()
        self.last_stats = PipelineStats()

    @property
    def __name__(self) -> str:
        return "QualityPreprocessor"

    def __call__(self, batch: Any) -> Any:
        as_columns = isinstance(batch, Mapping)
        rows = map_col_to_row(batch)
        keys: dict[str, None] = dict.fromkeys(batch) if as_columns else {}
        for row in rows:
            if not as_columns and isinstance(row, Mapping):
                keys.update(dict.fromkeys(row))
        for step in self.pipeline:
            keys.update(dict.fromkeys(getattr(step, "adds_columns", ())))
        mark = self.drop_mode == "mark"
        originals: list[Any] = []
        if mark:
            originals = [dict(r) if isinstance(r, Mapping) else r for r in rows]
            rows = [
                {**r, _IDX: i} if isinstance(r, Mapping) else {"row": r, _IDX: i}
                for i, r in enumerate(rows)
            ]
        drops: dict[int, tuple[str, str]] = {}
        stats = PipelineStats()
        n_start = len(rows)
        for step, name in zip(self.pipeline, self.names):
            if not rows:
                break
            t0 = time.perf_counter()
            kept, dropped = _run_step(step, name, rows)
            seconds = time.perf_counter() - t0
            reasons = Counter(
                (d.get("drop_reason") if isinstance(d, dict) else None) or name for d in dropped
            )
            tag_field = getattr(step, "tag_field", None)
            tags = (
                Counter(r.get(tag_field) for r in kept if isinstance(r, dict))
                if isinstance(tag_field, str)
                else None
            )
            stats.record(name, len(rows), len(kept), reasons, seconds, tags)
            append_dropped(self.dropped_log_path, name, dropped)
            if mark:
                for d in dropped:
                    if isinstance(d, dict) and isinstance(d.get(_IDX), int):
                        drops[d[_IDX]] = (name, d.get("drop_reason") or name)
            rows = kept
        self.last_stats = stats
        self.stats.merge(stats)
        logger.info(
            "[QualityPreprocessor] %d -> %d\n%s", n_start, len(rows), "\n".join(stats.lines())
        )
        if mark:
            rows = self._marked(rows, originals, drops)
            keys.update(dict.fromkeys((KEEP_COLUMN, DROP_STEP_COLUMN, DROP_REASON_COLUMN)))
        if not as_columns:
            return rows
        return map_row_to_col(rows, keys=keys)

    # run_quality_pipeline sets this on its copy: dropped rows then carry None instead of
    # their input values, because a step may change a column's type (the normalizer turns
    # JSON-string tool calls into lists) and Arrow cannot mix both types in one batch.
    _blank_dropped = False

    def _marked(
        self, kept: list[Any], originals: list[Any], drops: dict[int, tuple[str, str]]
    ) -> list[Any]:
        slots: list[Any] = [None] * len(originals)
        extra = []  # survivors a step rebuilt without the hidden index; kept, appended
        for row in kept:
            idx = row.pop(_IDX, None) if isinstance(row, dict) else None
            # '' rather than None: datasets types a column from its first batch, and an
            # all-None first batch would make it null-typed and fail on the first drop.
            out = {**row, KEEP_COLUMN: True, DROP_STEP_COLUMN: "", DROP_REASON_COLUMN: ""}
            if isinstance(idx, int) and 0 <= idx < len(slots) and slots[idx] is None:
                slots[idx] = out
            else:
                extra.append(out)
        for i, original in enumerate(originals):
            if slots[i] is None:
                step, reason = drops.get(i, ("unknown", "unknown"))
                base = original if isinstance(original, dict) else {"row": original}
                if self._blank_dropped:
                    base = dict.fromkeys(base)
                slots[i] = {
                    **base,
                    KEEP_COLUMN: False,
                    DROP_STEP_COLUMN: step,
                    DROP_REASON_COLUMN: reason,
                }
        return slots + extra


def _run_step(step: Callable[..., Any], name: str, rows: list[Any]) -> tuple[list[Any], list[Any]]:
    """Call one step and hold it to the contract; a broken step is a bug, reported by name."""
    result = step(rows)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError(
            f"step {name} returned {type(result).__name__}; a step must return (kept, dropped)"
        )
    kept, dropped = map_col_to_row(result[0]), map_col_to_row(result[1])
    if len(kept) + len(dropped) != len(rows):
        raise ValueError(
            f"step {name} lost or invented rows: {len(rows)} in, {len(kept)} kept + "
            f"{len(dropped)} dropped; every row must be kept or dropped with a reason"
        )
    return kept, dropped


def stats_from_marks(
    steps: Sequence[str], n_rows: int, drop_steps: Sequence[Any], drop_reasons: Sequence[Any]
) -> PipelineStats:
    """Rebuild per-step counts from ``mark``-mode columns (seconds are unknown there: 0)."""
    per_step: dict[str, Counter] = {name: Counter() for name in steps}
    for step, reason in zip(drop_steps, drop_reasons):
        if step:
            per_step.setdefault(step, Counter())[reason] += 1
    stats = PipelineStats()
    remaining = n_rows
    for name, reasons in per_step.items():
        dropped = sum(reasons.values())
        stats.record(name, remaining, remaining - dropped, reasons, 0.0)
        remaining -= dropped
    return stats


def run_quality_pipeline(
    dataset: Any, qp: QualityPreprocessor, num_proc: int | None = None, **map_kw: Any
) -> Any:
    """Run ``qp`` over a Hugging Face ``datasets.Dataset`` with ``map(batched=True)``.

    ``qp`` must use ``drop_mode='mark'``: every batch then keeps its length, the marks are
    filtered in the parent, and the parent's ``qp.stats`` receives the counts of all worker
    processes (per-step seconds stay in the workers' logs). Dropped rows reach the parent
    with empty values (their content is in the dropped log), so steps that change a
    column's type cannot clash with them. Returns the filtered dataset without the mark
    columns.

    Example:
        >>> from twinkle.preprocessor import HardFilter  # doctest: +SKIP
        >>> qp = QualityPreprocessor([HardFilter()], 'd.jsonl', drop_mode='mark')  # doctest: +SKIP
        >>> clean = run_quality_pipeline(ds, qp, num_proc=4)  # doctest: +SKIP
    """
    if qp.drop_mode != "mark":
        raise ValueError(
            "run_quality_pipeline needs QualityPreprocessor(..., drop_mode='mark') "
            f"(got drop_mode={qp.drop_mode!r})"
        )
    map_kw.setdefault("batched", True)
    # A cached result would silently skip writing the dropped log.
    map_kw.setdefault("load_from_cache_file", False)
    before = PipelineStats()
    before.merge(qp.stats)  # with num_proc=None the map runs here and touches qp.stats
    runner = copy.copy(qp)
    runner._blank_dropped = True
    marked = dataset.map(runner, num_proc=num_proc, **map_kw)
    stats = stats_from_marks(
        qp.names, len(marked), marked[DROP_STEP_COLUMN], marked[DROP_REASON_COLUMN]
    )
    kept = marked.filter(lambda keep: bool(keep), input_columns=KEEP_COLUMN, num_proc=num_proc)
    for step, name in zip(qp.pipeline, qp.names):  # tags of the rows that survived the chain
        tag_field = getattr(step, "tag_field", None)
        if isinstance(tag_field, str) and tag_field in kept.column_names:
            stats.steps[name].tags.update(Counter(kept[tag_field]))
    before.merge(stats)
    qp.stats = before
    qp.last_stats = stats
    return kept.remove_columns([KEEP_COLUMN, DROP_STEP_COLUMN, DROP_REASON_COLUMN])
