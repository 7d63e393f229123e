"""Ray Data worker side of the global steps of ``twinkle.preprocessor.ray_backend``.

Exact dedup is a hash group-by on the signature: each pass task wrote its keys as an Arrow
IPC file with one record batch per signature bucket (``ray_steps._write_keys``); reducer
``b`` memory-maps batch ``b`` of every chunk's file (pyarrow, zero-copy) and resolves the
groups with numpy. Near dedup shuffles LSH band hashes with Ray Data's ``groupby``; the
candidate pairs are joined with union-find and each component gets
``NearDedupFilter.select``. ``finish_chunks`` applies the last verdict to each chunk's rows.

Example:
    >>> nodes, comps = union_find(np.array([5, 7]), np.array([7, 9]))
    >>> nodes.tolist(), comps.tolist()
    ([5, 7, 9], [0, 0, 0])
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from twinkle.preprocessor.ray_steps import _FILE_SHIFT, _lookup, _losers


def reduce_exact(ctx: Mapping[str, Any], s: int, b: int) -> Any:
    """Signature bucket ``b`` of every chunk's keys, grouped: ``kind`` 0 rows are copies to
    drop (a group of equal digests keeps its first longest row, as the in-memory fast path
    does), ``kind`` 1 rows belong to groups that are not plain copies (resolved on the rows
    by the driver, with the in-memory rule)."""
    import pyarrow as pa

    d = Path(ctx["work"]) / f"seg{s}"
    parts = []
    for c in ctx["chunks"]:
        with pa.memory_map(str(d / f"keys-{c['i']:05d}.arrow")) as src:
            parts.append(pa.Table.from_batches([pa.ipc.open_file(src).get_batch(b)]))
    t = pa.concat_tables(parts)
    pos, sig = t.column("pos").to_numpy(), t.column("sig").to_numpy()
    n = t.column("n").to_numpy().astype(np.int64)
    d1, d2 = t.column("d1").to_numpy(), t.column("d2").to_numpy()
    order = np.lexsort((pos, -n, sig))  # the order DedupFilter._winners uses
    pos, sig, d1, d2 = pos[order], sig[order], d1[order], d2[order]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = sig[1:] != sig[:-1]
    gid = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    size = np.bincount(gid, minlength=len(starts)) if len(pos) else np.zeros(0, np.int64)
    differs = (d1 != d1[starts][gid]) | (d2 != d2[starts][gid])
    mixed = np.bincount(gid, weights=differs, minlength=len(starts)) > 0
    shared = size[gid] > 1
    copy = shared & ~mixed[gid] & ~first
    hard = shared & mixed[gid]
    return pa.table({"pos": pa.array(np.concatenate([pos[copy], pos[hard]]), pa.int64()),
                     "sig": pa.array(np.concatenate([sig[copy], sig[hard]]), pa.uint64()),
                     "kind": pa.array(np.repeat(np.array([0, 1], np.int8),
                                                [int(copy.sum()), int(hard.sum())]))})  # fmt: skip


def load_keys(batch: Any, ctx: Mapping[str, Any], s: int) -> Any:
    """The near-dedup keys chunks wrote, as a dataset for the band shuffle."""
    import pyarrow as pa

    d = Path(ctx["work"]) / f"seg{s}"
    tables = []
    for i in batch.column("i").to_pylist():
        with pa.memory_map(str(d / f"keys-{i:05d}.arrow")) as src:
            tables.append(pa.ipc.open_file(src).read_all())
    return pa.concat_tables(tables)


class Bands:
    """Each signature's LSH band hashes, one ``(band, pos)`` row per band."""

    def __init__(self, b: int, r: int) -> None:
        self.b, self.r = b, r

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa
        import xxhash

        keys, poss = [], []
        for p, s in zip(batch.column("pos").to_pylist(), batch.column("sig").to_pylist()):
            for i in range(self.b):
                band = s[i * self.r * 4 : (i + 1) * self.r * 4]
                keys.append(xxhash.xxh3_64_intdigest(i.to_bytes(2, "little") + band))
                poss.append(p)
        return pa.table({"band": pa.array(keys, pa.uint64()), "pos": pa.array(poss, pa.int64())})


def star(group: Any) -> Any:
    """A band bucket's candidate pairs: its first row with each other row."""
    import pyarrow as pa

    pos = sorted(set(group.column("pos").to_pylist()))
    a = pos[:1] * (len(pos) - 1)
    return pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(pos[1:], pa.int64())})


def union_find(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the pairs: sorted node ids and each one's component id."""
    nodes = np.unique(np.concatenate([a, b]))
    parent = np.arange(len(nodes))
    ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for x, y in zip(ia.tolist(), ib.tolist()):
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    comps = np.array([find(i) for i in range(len(nodes))], dtype=np.int64)
    return nodes, comps


def component(batch: Any, ref: Any) -> Any:
    """Each row's component id (-1 for rows in no candidate pair)."""
    import pyarrow as pa

    nodes, comps = _losers(ref)
    pos = batch.column("pos").to_numpy()
    at = _lookup(nodes, pos)
    comp = np.where(at >= 0, comps[np.maximum(at, 0)] if len(comps) else -1, -1)
    return batch.append_column("comp", pa.array(comp, pa.int64()))


def near_losers(group: Any, kwargs: Mapping[str, Any]) -> Any:
    """One component's rows dropped as near duplicates, by ``NearDedupFilter.select``."""
    import pyarrow as pa

    from twinkle.preprocessor.dedup_filter import NearDedupFilter

    pos = group.column("pos").to_numpy().astype(np.int64)
    keys = np.stack(
        [group.column("n").to_numpy(), group.column("chars").to_numpy(), pos], axis=1
    ).astype(np.int64)
    sigs = np.stack([np.frombuffer(s, dtype=np.uint32) for s in group.column("sig").to_pylist()])
    keep = NearDedupFilter(**kwargs).select(keys, sigs, np.ones(len(pos), dtype=bool))
    return pa.table({"pos": pa.array(np.setdiff1d(pos, keep), pa.int64())})


def chunk_range(c: Mapping[str, Any]) -> tuple[int, int]:
    base = c["file"] << _FILE_SHIFT
    if c["start"] < 0:
        return base, (c["file"] + 1) << _FILE_SHIFT
    return base | c["start"], base | c["end"]


def finish_chunk(
    ctx: Mapping[str, Any], c: Mapping[str, Any], verdict: Any, dst: Any
) -> dict[str, Any]:
    """Chunk ``c``'s rows of the last pass less the last global step's losers: appends its
    kept rows to ``dst`` (byte ranges, no parsing), writes its part of the dropped log and
    returns its counts. Cheap enough to redo on a rerun: no marker."""
    import json

    from twinkle.preprocessor.base import drop
    from twinkle.preprocessor.quality import append_dropped
    from twinkle.preprocessor.ray_steps import events_stats, fetch_rows

    work, i = Path(ctx["work"]), c["i"]
    fin = work / "fin"
    s = max(len(ctx["segments"]) - 1, 1) - 1
    meta = json.loads((work / f"seg{s}" / f"chunk-{i:05d}.done").read_text())["fin"]
    pos = np.load(fin / f"pos-{i:05d}.npy")
    with np.load(fin / f"ev-{i:05d}.npz") as z:
        ev = {k: z[k] for k in z.files}
    vpos = verdict[0] if verdict is not None else np.zeros(0, np.int64)
    keep = _lookup(vpos, pos) < 0
    ev_keep = _lookup(vpos, ev["pos"]) < 0
    data = (fin / f"rows-{i:05d}.jsonl").read_bytes()
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1  # one row a line
    starts = np.concatenate([[0], ends[:-1]])
    edge = np.diff(np.concatenate([[0], keep.astype(np.int8), [0]]))
    view = memoryview(data)
    for a, b in zip(np.flatnonzero(edge == 1).tolist(), np.flatnonzero(edge == -1).tolist()):
        dst.write(view[starts[a] : ends[b - 1]])  # a run of kept rows, copied as they are
    log = work / "dropped" / f"part-{i:05d}.jsonl"
    log.unlink(missing_ok=True)
    if verdict is not None:  # the global step's losers first, as they reached it
        lo, hi = chunk_range(c)
        at = np.flatnonzero((vpos >= lo) & (vpos < hi))
        if len(at):
            rows = fetch_rows(ctx, c, s, vpos[at])
            reasons = verdict[2]
            lost = (drop(rows[int(p)], reasons[k]) for p, k in zip(vpos[at], verdict[1][at]))
            append_dropped(str(log), ctx["segments"][s]["gname"], lost)
    drop_lines = (fin / f"drops-{i:05d}.jsonl").read_bytes().split(b"\n")
    kept_drops = ev_keep[ev["kind"] == 0].tolist()
    with open(log, "ab") as f:
        f.write(b"".join(line + b"\n" for line, k in zip(drop_lines, kept_drops) if k))
    n_in = int(keep.sum()) + int((ev_keep & (ev["kind"] == 0)).sum())
    stats = events_stats(meta["names"], meta["seconds"], n_in, ev, meta["labels"], ev_keep)
    return {"rows": int(keep.sum()), "stats": stats}


def finish_chunks(ctx: Mapping[str, Any], ids: list[int]) -> list[tuple[int, dict]]:
    """A Ray task of the finishing step: ``out/part-<i>.jsonl`` and the counts of chunks
    ``ids``."""
    import os

    verdict = _losers(ctx["losers"][-1]) if ctx["losers"] else None
    results = []
    for i in ids:
        part = Path(ctx["work"]) / "out" / f"part-{i:05d}.jsonl"
        tmp = part.with_name(part.name + ".tmp")
        with open(tmp, "wb") as dst:
            results.append((i, finish_chunk(ctx, ctx["chunks"][i], verdict, dst)))
        os.replace(tmp, part)
    return results
