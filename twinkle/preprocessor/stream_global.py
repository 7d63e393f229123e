"""Global steps over a stream: decide every row's fate from a compact index, not the rows.

``plan_global(step, source)`` reads ``source`` (a callable returning a fresh iterator over
the rows that reach the step, in the same order each time) and returns ``Plan``: one code
per row (0 = kept, else an index into ``Plan.reasons``). The caller then streams the rows
again and keeps or drops each one by its code. The decisions equal the in-memory steps':

- ``DedupFilter``: one pass keeps, per row, its 64-bit signature, message count, position
  and a hash of its messages (XXH3-128 of sorted-key JSON; 36 bytes, rows are never held,
  ``ExactKeys``). Signatures seen once are kept. A shared signature whose members are all
  equal keeps its first row, as the in-memory fast path does; a group that is not
  (truncated copies, conversations that branch after the first exchange) is resolved by a
  second read of those rows alone with the same ``_group_survivors`` (``decide_exact``).
- ``NearDedupFilter``: one pass of ``sketch`` over batches (MinHash values, 4 bytes per
  permutation and row; at 128 permutations 512 bytes a row) and the same ``select``.
- Any other global step is run on the rows it receives, held in memory (logged once).

Example:
    >>> from twinkle.preprocessor.dedup_filter import DedupFilter
    >>> m = [{'role': 'user', 'content': 'sum 2+2'}, {'role': 'assistant', 'content': '4'}]
    >>> rows = [{'messages': m}, {'messages': m[:1]}, {'messages': list(m)}, 7]
    >>> plan = plan_global(DedupFilter(), lambda: iter(rows))
    >>> [plan.reasons[c] if c else 'kept' for c in plan.codes.tolist()]
    ['kept', 'kept', 'duplicate', 'malformed_row']
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import xxhash

from twinkle.preprocessor.base import malformed_reason
from twinkle.preprocessor.dedup_filter import (
    DUPLICATE,
    NEAR_DUPLICATE,
    DedupFilter,
    NearDedupFilter,
    _group_survivors,
)

logger = logging.getLogger("twinkle.preprocessor")

Source = Callable[[], Iterator[Any]]
#: Called with the number of rows read since the last call, for progress bars.
Tick = Callable[[int], None]

_SKETCH_BATCH = 1024
_READ_AHEAD = 1024


@dataclass
class Plan:
    """Fate of each row of a global step's input: ``codes[i]`` 0 keeps row ``i``.

    Example:
        >>> p = Plan(np.array([0, 1], dtype=np.uint16), ['', 'duplicate'])
        >>> p.kept, p.dropped()
        (1, {'duplicate': 1})
    """

    codes: np.ndarray
    reasons: list[str] = field(default_factory=lambda: [""])
    seconds: float = 0.0
    read_seconds: float = 0.0

    @property
    def kept(self) -> int:
        return int(np.count_nonzero(self.codes == 0))

    def dropped(self) -> dict[str, int]:
        counts = np.bincount(self.codes, minlength=len(self.reasons))
        return {self.reasons[i]: int(n) for i, n in enumerate(counts.tolist()) if i and n}


class Reasons:
    """Drop reasons as small codes: 0 is kept, each new reason gets the next code.

    Example:
        >>> r = Reasons()
        >>> r.code('duplicate'), r.code('x'), r.code('duplicate'), r.names
        (1, 2, 1, ['', 'duplicate', 'x'])
    """

    def __init__(self) -> None:
        self.names = [""]
        self.index: dict[str, int] = {}

    def code(self, reason: str) -> int:
        if reason not in self.index:
            self.index[reason] = len(self.names)
            self.names.append(reason)
        return self.index[reason]


def plan_global(step: Any, source: Source, tick: Tick | None = None) -> Plan:
    """The plan of ``step`` over the rows of ``source`` (see the module docstring).

    ``Plan.seconds`` is the CPU time of the step itself; reading and parsing the rows (every
    pass) is ``Plan.read_seconds``, so the step's time compares with the in-memory step's.
    """
    timed = _TimedSource(source)
    t0 = time.process_time()
    if isinstance(step, DedupFilter):
        plan = _plan_exact(step, timed, tick)
    elif isinstance(step, NearDedupFilter):
        plan = _plan_near(step, timed, tick)
    else:
        plan = _plan_in_memory(step, timed, tick)
    plan.read_seconds = timed.seconds
    plan.seconds = time.process_time() - t0 - timed.seconds
    return plan


class _TimedSource:
    """``source`` read ahead ``_READ_AHEAD`` rows at a time, timing the reading alone."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.seconds = 0.0

    def __call__(self) -> Iterator[Any]:
        it = self.source()
        while True:
            t0 = time.process_time()
            batch = list(itertools.islice(it, _READ_AHEAD))
            self.seconds += time.process_time() - t0
            if not batch:
                return
            yield from batch


def _digest(messages: Any) -> tuple[int, int]:
    try:
        blob = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS, default=str)
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, huge integers
        blob = json.dumps(messages, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    h = xxhash.xxh3_128_intdigest(blob)
    return h >> 64, h & 0xFFFFFFFFFFFFFFFF


def _plan_exact(step: DedupFilter, source: Source, tick: Tick | None) -> Plan:
    reasons = Reasons()
    keys = ExactKeys()
    n = 0
    for n, row in enumerate(source(), 1):  # one pass: the index, digests included
        reason = keys.add(step.signature, n - 1, row)
        if reason is not None:
            keys.bad.append((n - 1, reason))
        if tick and n % 4096 == 0:
            tick(4096)
    if tick:
        tick(n % 4096)
    out = np.zeros(n, dtype=np.uint16)
    for pos, reason in keys.bad:
        out[pos] = reasons.code(reason)
    decide_exact(out, reasons, *keys.arrays(), lambda wanted: _rows_at(source, wanted))
    return Plan(out, reasons.names)


class ExactKeys:
    """Exact dedup's index of a run of rows: per row its 64-bit signature, message count,
    position and 128-bit digest (36 bytes; rows are never held), and the malformed rows.

    Example:
        >>> from twinkle.preprocessor.dedup_filter import DedupFilter
        >>> k = ExactKeys()
        >>> k.add(DedupFilter().signature, 0, {'messages': []}), len(k.arrays()[0])
        ('malformed_empty_messages', 0)
    """

    def __init__(self) -> None:
        from array import array

        self.hashes, self.counts, self.positions = array("Q"), array("i"), array("q")
        self.d1, self.d2 = array("Q"), array("Q")
        self.bad: list[tuple[int, str]] = []

    def add(self, signature: Callable[[Any], int], pos: int, row: Any) -> str | None:
        """Index ``row`` at ``pos``; returns its malformed reason (not indexed) or None."""
        reason = malformed_reason(row)
        if reason is not None:
            return reason
        try:
            h = signature(row["messages"])
        except Exception as exc:  # noqa: BLE001  (a bad row is a drop, never a crash)
            return f"malformed_row:{type(exc).__name__}"
        a, b = _digest(row["messages"])
        self.hashes.append(h)
        self.counts.append(len(row["messages"]))
        self.positions.append(pos)
        self.d1.append(a)
        self.d2.append(b)
        return None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(hashes, counts, positions, digests (n, 2))`` as numpy arrays."""
        d = np.stack(
            [np.frombuffer(self.d1, dtype=np.uint64), np.frombuffer(self.d2, dtype=np.uint64)],
            axis=1,
        ).reshape(-1, 2)
        return (
            np.frombuffer(self.hashes, dtype=np.uint64),
            np.frombuffer(self.counts, dtype=np.int32),
            np.frombuffer(self.positions, dtype=np.int64),
            d,
        )


def decide_exact(
    out: np.ndarray,
    reasons: Reasons,
    h: np.ndarray,
    c: np.ndarray,
    p: np.ndarray,
    digests: np.ndarray,
    rows_at: Callable[[np.ndarray], Iterator[tuple[int, Any]]],
) -> None:
    """Mark in ``out`` the rows exact dedup drops, from the index ``(h, c, p, digests)``:
    a shared signature whose members are all equal keeps its first row (most messages,
    then position), as the in-memory fast path does; other groups are resolved with
    ``_group_survivors`` on their rows alone, read through ``rows_at(sorted positions)``."""
    if not len(p):
        return
    perm = np.lexsort((p, -c, h))  # the order DedupFilter._winners uses
    order, sh, sd = p[perm], h[perm], digests[perm]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sh[1:] != sh[:-1]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = first[1:]
    starts = np.flatnonzero(first & ~last)
    ends = np.flatnonzero(last & ~first)
    if not len(starts):
        return
    dup = reasons.code(DUPLICATE)
    # Every member of a shared signature is a duplicate until its group says otherwise.
    out[order[~(first & last)]] = dup
    complex_groups: list[list[int]] = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        d = sd[s : e + 1]
        if (d == d[0]).all():  # exact copies: the first (most messages, then position) wins
            out[order[s]] = 0
        else:
            complex_groups.append(order[s : e + 1].tolist())
    if complex_groups:  # rows of groups that are not plain copies, compared in full
        wanted = np.sort(np.concatenate([np.asarray(g, dtype=np.int64) for g in complex_groups]))
        held = {pos: {"messages": row["messages"]} for pos, row in rows_at(wanted)}
        for group in complex_groups:
            for pos in _group_survivors(held, group):  # type: ignore[arg-type]
                out[pos] = 0
        logger.info("dedup: %d signature groups compared in full", len(complex_groups))


def _rows_at(
    source: Source, positions: np.ndarray, tick: Tick | None = None
) -> Iterator[tuple[int, Any]]:
    """``(position, row)`` for the sorted ``positions`` of ``source``."""
    want = set(positions.tolist())
    last = int(positions[-1]) if len(positions) else -1
    done = 0
    for n, row in enumerate(source()):
        if n in want:
            yield n, row
        if tick and n - done >= 4095:
            tick(n + 1 - done)
            done = n + 1
        if n >= last:
            if tick:
                tick(n + 1 - done)
            break


def _plan_near(step: NearDedupFilter, source: Source, tick: Tick | None) -> Plan:
    reasons = Reasons()
    codes: list[np.ndarray] = []
    keys, sigs, has = [], [], []
    batch: list[Any] = []
    n = 0

    def flush() -> None:
        k, s, h, bad = step.sketch(batch, base=n - len(batch))
        c = np.zeros(len(batch), dtype=np.uint16)
        for pos, reason in bad:
            c[pos - (n - len(batch))] = reasons.code(reason)
        codes.append(c)
        keys.append(k)
        sigs.append(s)
        has.append(h)
        if tick:
            tick(len(batch))
        batch.clear()

    for row in source():
        batch.append(row)
        n += 1
        if len(batch) >= _SKETCH_BATCH:
            flush()
    if batch:
        flush()
    out = np.concatenate(codes) if codes else np.zeros(0, dtype=np.uint16)
    if keys:
        decide_near(step, out, reasons, np.concatenate(keys), np.concatenate(sigs),
                    np.concatenate(has))  # fmt: skip
    return Plan(out, reasons.names)


def decide_near(
    step: NearDedupFilter, out: np.ndarray, reasons: Reasons, k: np.ndarray, sigs: np.ndarray,
    has: np.ndarray,
) -> None:  # fmt: skip
    """Mark in ``out`` the rows ``step.select`` drops, from the sketches of all rows."""
    if not len(k):
        return
    losers = np.setdiff1d(k[:, 2], step.select(k, sigs, has))
    if len(losers):
        out[losers] = reasons.code(NEAR_DUPLICATE)


def _plan_in_memory(step: Any, source: Source, tick: Tick | None) -> Plan:
    logger.warning(
        "%s has no streaming index: the rows reaching it are held in memory",
        getattr(step, "__name__", type(step).__name__),
    )
    rows = list(source())
    if tick:
        tick(len(rows))
    kept, dropped = step(rows)
    reasons = Reasons()
    out = np.zeros(len(rows), dtype=np.uint16)
    kept_ids = Counter(id(r) for r in kept)
    for i, row in enumerate(rows):
        if kept_ids[id(row)]:
            kept_ids[id(row)] -= 1
        else:
            out[i] = 1  # placeholder; replaced below by the step's own reasons
    # The step's reasons, matched to the dropped positions in order.
    drop_reasons = [
        (d.get("drop_reason") if isinstance(d, dict) else None) or "dropped" for d in dropped
    ]
    lost = np.flatnonzero(out).tolist()
    for i, pos in enumerate(lost):
        out[pos] = reasons.code(drop_reasons[i] if i < len(drop_reasons) else "dropped")
    return Plan(out, reasons.names)
