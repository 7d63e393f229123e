"""The last global step of a streamed chain and the steps around it, each row parsed once.

``curate_stream`` hands the rows that reach the last segment with a global step (exact or
near dedup) to ``run_last``, which reads them once, in chunks of ``shard_rows``:

- each batch runs the per-row steps before the global step; the rows reaching it give the
  step's keys (``stream_global.ExactKeys`` or ``NearDedupFilter.sketch``) and, when a
  dropped log is written, go as bytes to the chunk's ``reach`` spool;
- the per-row steps after the global step run at once on every row reaching them, losers
  of the global step included: they are per-row, so dropping the losers afterwards keeps
  exactly the same rows. What they do to each row (drops and tags, by position) is
  recorded, so counts, tags and the dropped log are taken over the rows the step keeps;
  their survivors are spooled as bytes. A row whose messages equal an earlier row's is
  not run through them: exact dedup always drops it;
- the keys decide every row's fate (``decide_exact`` / ``decide_near``); each chunk's kept
  rows are then copied as they are, never parsed, into ``part-NNNNN.jsonl`` (or straight
  into the output when the run will not resume), and its dropped log is written: earlier
  drops, the global step's losers (read back from the ``reach`` spool, as they reached
  it), then the later steps' drops of kept rows.

Every chunk, the decision and every part have a completion marker: a resumed run reads
past finished chunks without running their steps and rewrites only unfinished parts.

Example:
    >>> from twinkle.preprocessor.dedup_filter import DedupFilter, NearDedupFilter
    >>> supported(DedupFilter()), supported(NearDedupFilter()), supported(len)
    (True, True, False)
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from twinkle.preprocessor.chain import Stage
from twinkle.preprocessor.dedup_filter import DedupFilter, NearDedupFilter
from twinkle.preprocessor.events import Events, apply_steps
from twinkle.preprocessor.quality import (
    PipelineStats,
    QualityPreprocessor,
    append_dropped,
    step_name,
)
from twinkle.preprocessor.stream_global import ExactKeys, Reasons, decide_exact, decide_near

Items = Iterator[tuple[Any, int]]
#: ``(batch of (row, code), log)`` -> the rows an earlier global step kept (its losers logged).
DropMarked = Callable[[list[tuple[Any, int]], str], list[Any]]


def supported(step: Any) -> bool:
    """Whether ``run_last`` handles ``step`` (the dedups; others are held in memory)."""
    return isinstance(step, (DedupFilter, NearDedupFilter))


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak instead
        return _peak_rss()


def _peak_rss() -> float:
    from twinkle.preprocessor.stream import _peak_rss_mb

    return _peak_rss_mb()


class Bar:
    """A tqdm bar on stderr with rows/s and the memory in use; a no-op when disabled.

    Example:
        >>> b = Bar(False)
        >>> b.start('read', 10); b.tick(4); b.close()
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.last = 0.0

    def start(self, desc: str, total: int | None) -> None:
        self.close()
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, desc=desc, unit=" rows", unit_scale=True, file=sys.stderr,
                mininterval=0.5, dynamic_ncols=True,
            )  # fmt: skip

    def tick(self, n: int) -> None:
        if self.bar is not None and n:
            self.bar.update(n)
            now = time.monotonic()
            if now - self.last > 1.0:
                self.last = now
                self.bar.set_postfix_str(f"mem {_rss_mb():,.0f} MB", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"mem {_rss_mb():,.0f} MB", refresh=False)
            self.bar.close()
            self.bar = None


def _dumps(row: Any) -> bytes:
    from twinkle.preprocessor.stream import _dumps as dumps

    return dumps(row)


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _run_after(
    steps: Sequence[Any], rows: list[Any], positions: list[int], ev: Events, drops: Any
) -> tuple[list[Any], list[int]]:
    """``steps`` (named ``ev.names``) over ``rows`` (at ``positions``), recording events;
    the survivors."""
    from twinkle.preprocessor.quality import _IDX

    lines: list[str] = []
    current = apply_steps(
        steps,
        [{**r, _IDX: p} for r, p in zip(rows, positions)],
        ev,
        lines if drops is not None else None,
    )
    if lines and drops is not None:
        drops.write(("\n".join(lines) + "\n").encode("utf-8"))
    out_pos = []
    for r in current:
        p = r.pop(_IDX, None)
        if not isinstance(p, int):
            raise RuntimeError("a step after the global step returned a row without its position")
        out_pos.append(p)
    return current, out_pos


def _chunk(
    k: int, chunk: Items, base: int, d: Path, before: QualityPreprocessor | None,
    gstep: Any, after: Sequence[Any], after_names: Sequence[str], batch_size: int,
    drop_marked: DropMarked, tick: Callable[[int], None], log_drops: bool, spool_reach: bool,
    seen: set[int],
) -> dict[str, Any]:  # fmt: skip
    """Chunk ``k``: its files in ``d`` and its marker's contents (``base``: the global
    step's position of the chunk's first row reaching it)."""
    from twinkle.preprocessor.quality import QualityPreprocessor as QP

    log = str(d / f"c-{k:05d}.log.jsonl") if log_drops else ""
    Path(d / f"c-{k:05d}.log.jsonl").unlink(missing_ok=True)
    qp = QP(before.pipeline, log) if before is not None else None
    exact = isinstance(gstep, DedupFilter)
    keys = ExactKeys() if exact else None
    near_k, near_s, near_h = [], [], []
    bad: list[tuple[int, str]] = []
    copies: list[int] = []
    ev = Events(after_names)
    out_pos: list[int] = []
    n = reach = 0
    gseconds = 0.0
    with (
        open(d / f"c-{k:05d}.reach.jsonl", "wb") as fr,
        open(d / f"c-{k:05d}.rows.jsonl", "wb") as fo,
        open(d / f"c-{k:05d}.drops.jsonl", "wb") as fd,
    ):
        it = iter(chunk)
        while batch := list(itertools.islice(it, batch_size)):
            n += len(batch)
            rows = drop_marked(batch, log)
            if qp is not None and rows:
                rows = qp(rows)
            if rows:
                if spool_reach:
                    fr.write(b"\n".join(_dumps(r) for r in rows) + b"\n")
                positions = list(range(base + reach, base + reach + len(rows)))
                t0 = time.process_time()
                if keys is not None:
                    sig = gstep.signature
                    bad_now = [
                        (p, why)
                        for p, r in zip(positions, rows)
                        if (why := keys.add(sig, p, r)) is not None
                    ]
                else:
                    kk, ss, hh, bad_now = gstep.sketch(rows, base=base + reach)
                    near_k.append(kk)
                    near_s.append(ss)
                    near_h.append(hh)
                gseconds += time.process_time() - t0
                reach += len(rows)
                lost = {int(p) for p, _ in bad_now}
                if keys is not None:  # the rows indexed just now, in order
                    first = len(keys.positions) - (len(rows) - len(lost))
                    for i in range(first, len(keys.positions)):
                        digest = keys.d1[i] << 64 | keys.d2[i]
                        if digest in seen:
                            lost.add(keys.positions[i])
                            copies.append(keys.positions[i])
                        else:
                            seen.add(digest)
                if bad_now:
                    bad.extend((int(p), r) for p, r in bad_now)
                if lost:
                    pairs = [(r, p) for r, p in zip(rows, positions) if p not in lost]
                    rows, positions = [r for r, _ in pairs], [p for _, p in pairs]
                survivors, spos = _run_after(after, rows, positions, ev, fd if log_drops else None)
                if survivors:
                    fo.write(b"\n".join(_dumps(r) for r in survivors) + b"\n")
                out_pos.extend(spos)
            tick(len(batch))
    arrays: dict[str, np.ndarray] = {
        "pos": np.array(out_pos, np.int64), "ev_pos": np.array(ev.pos, np.int64),
        "ev_step": np.array(ev.step, np.int16), "ev_kind": np.array(ev.kind, np.int8),
        "ev_val": np.array(ev.val, np.int32),
    }  # fmt: skip
    if keys is not None:
        h, c, p, dg = keys.arrays()
        arrays.update(h=h, c=c, p=p, d=dg)
    else:
        m = int(getattr(gstep, "num_perm", 0))
        arrays.update(
            k=np.concatenate(near_k) if near_k else np.zeros((0, 3), np.int64),
            s=np.concatenate(near_s) if near_s else np.zeros((0, m), np.uint32),
            has=np.concatenate(near_h) if near_h else np.zeros(0, bool),
        )
    np.savez(d / f"c-{k:05d}.npz", **arrays)
    return {
        "seen": n, "reach": reach, "base": base, "bad": bad, "copies": copies, "labels": ev.labels,
        "seconds": ev.seconds, "gseconds": gseconds, "logged": log_drops,
        "before": [s.as_dict() for s in qp.stats.steps.values()] if qp is not None else [],
    }  # fmt: skip


def _reach_rows(d: Path, metas: Sequence[dict[str, Any]], wanted: np.ndarray) -> Iterator:
    """``(position, row)`` of the sorted ``wanted`` positions, read from the reach spools."""
    from twinkle.preprocessor.stream import _loads

    for k, meta in enumerate(metas):
        lo, hi = meta["base"], meta["base"] + meta["reach"]
        sel = wanted[(wanted >= lo) & (wanted < hi)]
        if not len(sel):
            continue
        want = set((sel - lo).tolist())
        with open(d / f"c-{k:05d}.reach.jsonl", "rb") as f:
            for i, line in enumerate(f):
                if i in want:
                    yield lo + i, _loads(line)


def _rows_at(
    d: Path, metas: Sequence[dict[str, Any]], wanted: np.ndarray,
    reread: Callable[[], Iterator] | None,
) -> Iterator[tuple[int, Any]]:  # fmt: skip
    if reread is None:
        yield from _reach_rows(d, metas, wanted)
        return
    want = set(wanted.tolist())
    last = int(wanted[-1]) if len(wanted) else -1
    for n, row in enumerate(reread()):
        if n > last:
            break
        if n in want:
            yield n, row


def _decide(
    gstep: Any, d: Path, metas: Sequence[dict[str, Any]], reread: Callable[[], Iterator] | None
) -> tuple[np.ndarray, list]:
    """Codes of every row reaching the global step (0 kept) and the reasons; the rows of
    signature groups that are not plain copies are read back from the reach spools, or
    from ``reread()`` (the rows reaching the step, in order) when there are none."""
    total = sum(m["reach"] for m in metas)
    reasons = Reasons()
    out = np.zeros(total, dtype=np.uint16)
    for m in metas:
        for p, why in m["bad"]:
            out[p] = reasons.code(why)
    loaded = [np.load(d / f"c-{k:05d}.npz") for k in range(len(metas))]

    def cat(key: str) -> np.ndarray:
        return np.concatenate([z[key] for z in loaded])

    if isinstance(gstep, DedupFilter):
        decide_exact(out, reasons, cat("h"), cat("c"), cat("p"), cat("d").reshape(-1, 2),
                     lambda wanted: _rows_at(d, metas, wanted, reread))  # fmt: skip
    else:
        decide_near(gstep, out, reasons, cat("k"), cat("s"), cat("has"))
    return out, reasons.names


def _finish(
    k: int, d: Path, work: Path, meta: dict[str, Any], codes: np.ndarray, reasons: list[str],
    gname: str, keep_ev: np.ndarray, log_drops: bool, sink: BinaryIO | None,
) -> int:  # fmt: skip
    """``part-k.jsonl`` (kept rows as they are; to ``sink`` instead when given) and
    ``part-k.dropped.jsonl``; returns the rows kept."""
    from twinkle.preprocessor.base import drop
    from twinkle.preprocessor.stream import _loads

    part, plog = work / f"part-{k:05d}.jsonl", work / f"part-{k:05d}.dropped.jsonl"
    with np.load(d / f"c-{k:05d}.npz") as z:
        pos = z["pos"]
    keep = (codes[pos] == 0).tolist() if len(pos) else []
    tmp = part.with_name(part.name + ".tmp")
    with (
        open(d / f"c-{k:05d}.rows.jsonl", "rb") as src,
        open(os.devnull if sink else tmp, "wb", 1 << 20) as own,
    ):
        dst = sink or own
        for line, ok in zip(src, keep):  # kept rows copied as they are, never parsed
            if ok:
                dst.write(line)
    if sink:
        tmp = part  # nothing to rename: the rows went to the sink
    ltmp = plog.with_name(plog.name + ".tmp")
    ltmp.unlink(missing_ok=True)
    if not log_drops:
        if tmp != part:
            os.replace(tmp, part)
        plog.unlink(missing_ok=True)
        return sum(keep)
    earlier = d / f"c-{k:05d}.log.jsonl"
    if earlier.is_file():
        shutil.copyfile(earlier, ltmp)
    lo = meta["base"]
    mine = codes[lo : lo + meta["reach"]]
    lost = np.flatnonzero(mine)
    if len(lost):  # the global step's losers, as they reached it
        want = set(lost.tolist())
        with open(d / f"c-{k:05d}.reach.jsonl", "rb") as src:
            lines = ((i, line) for i, line in enumerate(src) if i in want)
            while held := list(itertools.islice(lines, 1000)):
                append_dropped(
                    str(ltmp), gname, (drop(_loads(x), reasons[mine[i]]) for i, x in held)
                )
    with open(d / f"c-{k:05d}.drops.jsonl", "rb") as src, open(ltmp, "ab", 1 << 20) as f:
        for line, ok in zip(src, keep_ev.tolist()):  # the later steps' drops of kept rows
            if ok:
                f.write(line)
    if tmp != part:
        os.replace(tmp, part)
    os.replace(ltmp, plog)
    return sum(keep)


def run_last(
    items: Items, before: Sequence[Stage], gstage: Stage, after: Sequence[Stage], work: Path,
    *, fresh: bool, batch_size: int, shard_rows: int, drop_marked: DropMarked,
    stats: PipelineStats, bar: Any, on_shard: Callable[[int, bool], None] | None,
    log_drops: bool = True, reread: Callable[[], Iterator] | None = None,
    sink: Path | None = None,
) -> tuple[list[Path], list[Path], int, int, int]:  # fmt: skip
    """Run ``before``, ``gstage`` and ``after`` over ``items`` (see the module docstring);
    merges the steps' statistics into ``stats``. ``log_drops``: write the dropped log;
    ``reread``: the rows reaching the global step again, in order (when no per-row step
    runs before it), so that no spool of them is needed without a dropped log. ``sink``:
    write the kept rows there, in order, instead of parts (a run that will not resume).
    Returns ``(parts, dropped logs, rows read, parts reused, rows kept)``."""
    d = work / "last"
    d.mkdir(parents=True, exist_ok=True)
    qp = QualityPreprocessor([s.step for s in before]) if before else None
    after_steps = [s.step for s in after]
    after_names = QualityPreprocessor(after_steps).names if after_steps else []
    gname = step_name(gstage.step)
    metas: list[dict[str, Any]] = []
    base = 0
    n_seen = 0
    changed = fresh  # a chunk run again: decide again and rewrite every part
    exact = isinstance(gstage.step, DedupFilter)
    spool_reach = log_drops or (exact and reread is None)
    # Digests already seen: a later row with the same messages always loses exact dedup
    # (longest wins, then the first seen), so the steps after it are not run on it.
    seen: set[int] = set()
    for k in itertools.count():
        chunk = itertools.islice(items, shard_rows)
        marker = d / f"c-{k:05d}.done"
        meta = json.loads(marker.read_text()) if marker.is_file() and not fresh else {}
        if meta and (meta["logged"] or not log_drops):  # a log wanted now needs its lines
            n = sum(1 for _ in chunk)  # read past it: its steps are not run again
            bar.tick(n)
            if n != meta["seen"]:
                raise RuntimeError(
                    f"the rows changed while curating: {n} read in chunk {k}, "
                    f"{meta['seen']} before; run again without resume"
                )
        else:
            changed = True
            meta = _chunk(k, chunk, base, d, qp, gstage.step, after_steps, after_names,
                          batch_size, drop_marked, bar.tick, log_drops, spool_reach,
                          seen)  # fmt: skip
            n = meta["seen"]
            if n or not k:
                _write_json(marker, meta)
        if not n and k:
            break
        metas.append(meta)
        base += meta["reach"]
        n_seen += n
        if n < shard_rows:
            break
    bar.close()

    decided = d / "decision.json"
    if decided.is_file() and not changed and (d / "codes.npy").is_file():
        dec = json.loads(decided.read_text())
        codes = np.load(d / "codes.npy")
    else:
        t0 = time.process_time()
        codes, names = _decide(gstage.step, d, metas, None if spool_reach else reread)
        copies = [p for m in metas for p in m["copies"]]
        if copies and not codes[np.asarray(copies, dtype=np.int64)].all():
            raise RuntimeError("exact dedup kept a row the steps after it skipped as a copy")
        dec = {"reasons": names, "seconds": time.process_time() - t0}
        np.save(d / "codes.npy", codes)
        _write_json(decided, dec)
    reasons = dec["reasons"]

    # Statistics: the steps before, the global step, and the steps after over its kept rows.
    for m in metas:
        for s in m["before"]:
            stats.record(s["step"], s["rows_in"], s["rows_out"], s["dropped"], s["seconds"],
                         s.get("tags"))  # fmt: skip
    kept = int(np.count_nonzero(codes == 0))
    counts = np.bincount(codes, minlength=len(reasons))
    gdrop = {reasons[i]: int(c) for i, c in enumerate(counts.tolist()) if i and c}
    gsec = dec["seconds"] + sum(m["gseconds"] for m in metas)
    stats.record(gname, len(codes), kept, gdrop, gsec)
    drops = [Counter() for _ in after_names]
    tags = [Counter() for _ in after_names]
    seconds = [0.0] * len(after_names)
    keep_evs = []
    for k, m in enumerate(metas):
        with np.load(d / f"c-{k:05d}.npz") as z:
            ev_pos, ev_step, ev_kind, ev_val = z["ev_pos"], z["ev_step"], z["ev_kind"], z["ev_val"]
        ok = codes[ev_pos] == 0 if len(ev_pos) else np.zeros(0, bool)
        keep_evs.append(ok[ev_kind == 0])
        labels = [json.loads(x) for x in m["labels"]]
        for s, kind, v in zip(ev_step[ok].tolist(), ev_kind[ok].tolist(), ev_val[ok].tolist()):
            (drops if kind == 0 else tags)[s][labels[v]] += 1
        seconds = [a + b for a, b in zip(seconds, m["seconds"])]
    rows = kept
    for i, name in enumerate(after_names):
        n = sum(drops[i].values())
        stats.record(name, rows, rows - n, drops[i], seconds[i], tags[i] or None)
        rows -= n

    parts: list[Path] = []
    logs: list[Path] = []
    reused = kept_rows = 0
    with open(sink if sink else os.devnull, "wb", 1 << 20) as out:
        for k, m in enumerate(metas):
            part = work / f"part-{k:05d}.jsonl"
            done = work / f"part-{k:05d}.done"
            was_reused = sink is None and done.is_file() and part.is_file() and not changed
            if was_reused:
                reused += 1
            else:
                rows_k = _finish(k, d, work, m, codes, reasons, gname, keep_evs[k], log_drops,
                                 out if sink else None)  # fmt: skip
                kept_rows += rows_k
                if sink is None:
                    _write_json(done, {"rows": rows_k})
            parts.append(part)
            logs.append(work / f"part-{k:05d}.dropped.jsonl")
            if on_shard:
                on_shard(k, was_reused)
    return parts, logs, n_seen, reused, kept_rows
