"""Ray Data worker side of ``twinkle.preprocessor.ray_backend``: one task per input chunk.

Each task reads its chunk itself (a byte range of a JSON Lines file, or a whole Parquet/JSON
file, through ``twinkle.io``'s readers and format conversion), parses each row once and does
all the work of one pass on it (``run_pass``): the per-row steps, the keys of the next global
step and, in the last pass, the per-row steps after it. Rows never enter the object store: a
task writes them to the shared work folder (spools, the last pass's rows, dropped logs, keys
as Arrow IPC files) and returns a one-row status; a completion marker is written last, as
datatrove's executors do, and a rerun skips every chunk that has one.

Per-row steps record what they did to each row by position (``Events``), so counts, tags
and the dropped log can be taken later over the rows a global step keeps.

A row's position is ``file index << 40 | byte offset`` (or row index for non-JSONL files):
sortable in input order, so ties break as in the single-process run.

Example:
    >>> _positions_in_order([(1, 0), (0, 5)])  # (file index, offset) -> sortable integers
    [1099511627776, 5]
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twinkle.preprocessor.events import Events, apply_steps
from twinkle.preprocessor.stream import _dumps, _loads

#: Steps that load models or large resources: run in an actor pool, built once per actor.
_HEAVY = frozenset({"pii", "score", "intent"})

_FILE_SHIFT = 40  # position = file index << 40 | offset (offsets up to 1 TB per file)

Items = list[tuple[int, Any]]


def _positions_in_order(pairs: Iterable[tuple[int, int]]) -> list[int]:
    return [(f << _FILE_SHIFT) | o for f, o in pairs]


# ----------------------------------------------------------------------------- reading
def _chunks(inputs: Any, chunk_bytes: int) -> list[dict[str, Any]]:
    """The tasks' inputs: JSONL files cut at line ends every ``chunk_bytes``, others whole."""
    from twinkle import io_formats

    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    out: list[dict[str, Any]] = []
    for fi, path in enumerate(io_formats.expand_sources([Path(p) for p in paths])):
        path = path.resolve()
        if path.is_file() and path.suffix.lower() == ".jsonl":
            size = path.stat().st_size
            start = 0
            with open(path, "rb") as f:
                while start < size:
                    f.seek(min(start + chunk_bytes, size))
                    f.readline()  # to the end of the line the cut falls in
                    end = min(f.tell(), size)
                    out.append({"path": str(path), "file": fi, "start": start, "end": end})
                    start = end
        else:
            out.append({"path": str(path), "file": fi, "start": -1, "end": -1})
    for i, c in enumerate(out):
        c["i"] = i
    return out


def _read_chunk(c: Mapping[str, Any], input_format: str | None) -> Items:
    from twinkle.io import read_rows
    from twinkle.io_formats import convert_rows

    base = c["file"] << _FILE_SHIFT
    if c["start"] < 0:
        return [(base | i, row) for i, row in enumerate(read_rows(c["path"], input_format))]
    with open(c["path"], "rb") as f:
        f.seek(c["start"])
        data = f.read(c["end"] - c["start"])
    offsets, values = [], []
    at = c["start"]
    for line in data.split(b"\n"):
        if line.strip():
            offsets.append(at)
            values.append(_loads(line))
        at += len(line) + 1
    items: Items = []
    for off, row in zip(offsets, convert_rows(values, input_format)):
        if not isinstance(row, dict):
            raise ValueError(f"{c['path']}: byte {off}: a row must be a JSON object")
        items.append((base | off, row))
    return items


def _spool_paths(work: str, s: int, i: int) -> tuple[Path, Path]:
    d = Path(work) / f"seg{s}"
    return d / f"rows-{i:05d}.jsonl", d / f"pos-{i:05d}.npy"


def _read_spool(work: str, s: int, i: int) -> Items:
    rows_path, pos_path = _spool_paths(work, s, i)
    pos = np.load(pos_path).tolist()
    lines = rows_path.read_bytes().split(b"\n") if pos else []
    return [(p, _loads(line)) for p, line in zip(pos, lines)]


_LOSERS: dict[str, Any] = {}


def _losers(ref: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A global step's ``(sorted positions, reason codes, reasons)``, fetched once a worker."""
    import ray

    if not isinstance(ref, ray.ObjectRef):
        return ref
    key = ref.hex()
    if key not in _LOSERS:
        if len(_LOSERS) > 8:  # a worker serves one run at a time: keep the latest few
            _LOSERS.clear()
        _LOSERS[key] = ray.get(ref)
    return _LOSERS[key]


def _lookup(positions: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Index into ``positions`` of each of ``pos``, -1 where absent."""
    if not len(positions) or not len(pos):
        return np.full(len(pos), -1, dtype=np.int64)
    i = np.minimum(np.searchsorted(positions, pos), len(positions) - 1)
    return np.where(positions[i] == pos, i, -1)


def segment_input(ctx: Mapping[str, Any], c: Mapping[str, Any], s: int, log: str) -> Items:
    """The rows of chunk ``c`` that reach segment ``s``'s per-row steps: the latest spool at or
    before it (or the input), less every earlier global step's losers. The losers of the
    global step just before ``s`` go to the dropped log ``log`` (each row is logged once)."""
    from twinkle.preprocessor.base import drop
    from twinkle.preprocessor.quality import append_dropped

    segs = ctx["segments"]
    spooled = [t for t in range(s) if segs[t]["names"]]
    if spooled:
        first = spooled[-1]
        items = _read_spool(ctx["work"], first, c["i"])
    else:
        first = 0
        items = _read_chunk(c, ctx["format"])
    for g in range(first, s):
        positions, codes, reasons = _losers(ctx["losers"][g])
        at = _lookup(positions, np.array([p for p, _ in items], dtype=np.int64))
        if log and g == s - 1 and (at >= 0).any():
            lost = (
                drop(items[k][1], reasons[codes[j]]) for k, j in enumerate(at.tolist()) if j >= 0
            )
            append_dropped(log, segs[g]["gname"], lost)
        items = [it for it, j in zip(items, at.tolist()) if j < 0]
    return items


# ----------------------------------------------------------------------------- steps
_BUILT: dict[str, tuple[Any, ...]] = {}


def _built(names: Sequence[str], params: Mapping[str, Any]) -> tuple[Any, ...]:
    """Per-row steps built once per worker process (actors and reused task workers)."""
    from twinkle.preprocessor.chain import build_pipeline

    key = repr((list(names), sorted(params.items())))
    if key not in _BUILT:
        if len(_BUILT) > 8:
            _BUILT.clear()
        _BUILT[key] = tuple(s.step for s in build_pipeline(list(names), params))
    return _BUILT[key]


def run_steps(seg: Mapping[str, Any], items: Items, batch: int) -> tuple[Items, Events]:
    """The segment's per-row steps over ``items``, ``batch`` rows at a time."""
    from twinkle.preprocessor.quality import _IDX

    ev = Events(seg["display"])
    if not seg["names"]:
        return items, ev
    steps = _built(seg["names"], seg["params"])
    out: Items = []
    for k0 in range(0, len(items), batch):
        rows = [{**row, _IDX: p} for p, row in items[k0 : k0 + batch]]
        rows = apply_steps(steps, rows, ev, ev.log)
        out.extend((r.pop(_IDX), r) for r in rows)
    return out, ev


def events_stats(
    names: Sequence[str], seconds: Sequence[float], n_in: int, ev: Mapping[str, np.ndarray],
    labels: Sequence[str], keep: np.ndarray | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per-step stats (``StepStats.as_dict`` form) over the rows whose events ``keep`` marks;
    ``n_in`` is how many of those rows entered the first step."""
    from collections import Counter

    sel_all = np.ones(len(ev["pos"]), dtype=bool) if keep is None else keep
    decoded = [json.loads(x) for x in labels]
    rows, out = n_in, []
    for k, name in enumerate(names):
        at = (ev["step"] == k) & sel_all
        drops = Counter(decoded[v] for v in ev["val"][at & (ev["kind"] == 0)].tolist())
        tags = Counter(decoded[v] for v in ev["val"][at & (ev["kind"] == 1)].tolist())
        n = sum(drops.values())
        out.append({"step": name, "rows_in": rows, "rows_out": rows - n, "dropped": dict(drops),
                    "seconds": seconds[k], "tags": dict(tags)})  # fmt: skip
        rows -= n
    return out


def _exact_keys(items: Items, kwargs: Mapping[str, Any]) -> tuple[Any, list]:
    import pyarrow as pa

    from twinkle.preprocessor.base import malformed_reason
    from twinkle.preprocessor.dedup_filter import DedupFilter
    from twinkle.preprocessor.stream_global import _digest

    signature = DedupFilter(**kwargs).signature
    pos, sig, n, d1, d2, bad = [], [], [], [], [], []
    for p, row in items:
        reason = malformed_reason(row)
        if reason is None:
            try:
                s = signature(row["messages"])
            except Exception as exc:  # noqa: BLE001  (a bad row is a drop, never a crash)
                reason = f"malformed_row:{type(exc).__name__}"
        if reason is not None:
            bad.append([p, reason])
            continue
        a, b = _digest(row["messages"])
        pos.append(p)
        sig.append(s)
        n.append(len(row["messages"]))
        d1.append(a)
        d2.append(b)
    u64 = pa.uint64()
    table = pa.table({"pos": pa.array(pos, pa.int64()), "sig": pa.array(sig, u64),
                      "n": pa.array(n, pa.int32()), "d1": pa.array(d1, u64),
                      "d2": pa.array(d2, u64)})  # fmt: skip
    return table, bad


def _near_keys(items: Items, kwargs: Mapping[str, Any]) -> tuple[Any, list]:
    """MinHash keys of the rows that have shingles (rows without them are always kept)."""
    import pyarrow as pa

    from twinkle.preprocessor.dedup_filter import NearDedupFilter

    rows = [row for _, row in items]
    keys, sigs, has, bad = NearDedupFilter(**kwargs).sketch(rows)
    pos = np.array([p for p, _ in items], dtype=np.int64)
    sel = np.flatnonzero(has)
    at = keys[sel, 2]
    sig = pa.array([sigs[k].tobytes() for k in sel.tolist()], pa.binary())
    table = pa.table({"pos": pa.array(pos[at], pa.int64()), "n": pa.array(keys[sel, 0], pa.int64()),
                      "chars": pa.array(keys[sel, 1], pa.int64()), "sig": sig})  # fmt: skip
    return table, [[int(pos[i]), r] for i, r in bad]


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _write_bytes(path: Path, lines: Iterable[bytes]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for line in lines:
            f.write(line + b"\n")
    os.replace(tmp, path)


def _write_keys(path: Path, table: Any, buckets: int, column: str | None) -> None:
    """``table`` as an Arrow IPC file of ``buckets`` record batches, row ``r`` in batch
    ``column[r] % buckets``: reducer ``b`` memory-maps batch ``b`` of every chunk's file
    (a hash shuffle through the shared folder, as datatrove's dedup stages do)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tmp = path.with_name(path.name + ".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        if column is None or buckets == 1:
            w.write_table(table.combine_chunks() if table.num_rows else table)
        else:
            part = np.asarray(table.column(column).to_numpy() % np.uint64(buckets), dtype=np.int64)
            for b in range(buckets):
                w.write_batch(
                    pa.RecordBatch.from_arrays(
                        [
                            pc.filter(col, pa.array(part == b)).combine_chunks()
                            for col in table.columns
                        ],
                        schema=table.schema,
                    )  # fmt: skip
                )
    os.replace(tmp, path)


def run_pass(ctx: Mapping[str, Any], c: Mapping[str, Any], s: int) -> Any:
    """Pass ``s`` over chunk ``c``: segment ``s``'s per-row steps, the keys of its global step
    (``seg<s>/keys-<i>.arrow``) and, in the last pass, the last segment's per-row steps on
    the rows reaching that global step (``fin/``): they are per-row, so running them before
    the global verdict and dropping its losers afterwards keeps exactly the same rows, and
    saves reading every row once more. The marker ``chunk-<i>.done`` is written last."""
    import pyarrow as pa

    work = Path(ctx["work"])
    i = c["i"]
    d = work / f"seg{s}"
    marker = d / f"chunk-{i:05d}.done"
    status = {"i": pa.array([i], pa.int64()), "s": pa.array([s], pa.int64())}
    if marker.is_file():
        return pa.table({**status, "reused": pa.array([True])})
    started, cpu = time.time(), time.process_time()
    segs = ctx["segments"]
    globals_ = len(segs) - 1
    last = s == max(globals_, 1) - 1
    seg = segs[s]
    log = d / f"dropped-{i:05d}.jsonl"
    tmp_log = log.with_name(log.name + ".tmp")
    tmp_log.unlink(missing_ok=True)
    items = segment_input(ctx, c, s, str(tmp_log))
    n_read = len(items)
    items, ev = run_steps(seg, items, ctx["batch_size"])
    meta: dict[str, Any] = {"read": n_read, "reach": len(items), "bad": [], "seconds": 0.0}
    if globals_:
        evs = ev.arrays()
        meta["stats"] = events_stats(ev.names, ev.seconds, n_read, evs, ev.labels)
        if ev.log:
            with open(tmp_log, "a", encoding="utf-8") as f:
                f.write("\n".join(ev.log) + "\n")
        if seg["names"]:  # the rows this global step sees, for the next pass
            _write_bytes(d / f"rows-{i:05d}.jsonl", (_dumps(r) for _, r in items))
            np.save(d / f"pos-{i:05d}.npy", np.array([p for p, _ in items], dtype=np.int64))
        t0 = time.process_time()
        exact = seg["global"] == "dedup"
        table, bad = (_exact_keys if exact else _near_keys)(items, json.loads(seg["gparams"]))
        meta["seconds"], meta["bad"] = time.process_time() - t0, bad
        _write_keys(d / f"keys-{i:05d}.arrow", table, ctx["buckets"] if exact else 1,
                    "sig" if exact else None)  # fmt: skip
        if last:
            bad_pos = {p for p, _ in bad}
            items, ev = run_steps(
                segs[-1], [it for it in items if it[0] not in bad_pos], ctx["batch_size"]
            )
    else:
        meta["stats"] = []
    if last:  # the rows and events the verdict will sort out (finish_chunk, on the driver)
        f = work / "fin"
        _write_bytes(f / f"rows-{i:05d}.jsonl", (_dumps(r) for _, r in items))
        np.save(f / f"pos-{i:05d}.npy", np.array([p for p, _ in items], dtype=np.int64))
        _write_bytes(f / f"drops-{i:05d}.jsonl", (line.encode() for line in ev.log))
        np.savez(f / f"ev-{i:05d}.npz", **ev.arrays())
        meta["fin"] = {"names": ev.names, "seconds": ev.seconds, "labels": ev.labels}
    if tmp_log.exists():
        os.replace(tmp_log, log)
    _write_json(marker, {**meta, "start": started, "end": time.time(), "pid": os.getpid(),
                         "cpu": time.process_time() - cpu})  # fmt: skip
    return pa.table({**status, "reused": pa.array([False])})


def _task(batch: Any, ctx: Mapping[str, Any], s: int) -> Any:
    """``map_batches`` entry: one chunk index per batch."""
    import pyarrow as pa

    tables = [run_pass(ctx, ctx["chunks"][i], s) for i in batch.column("i").to_pylist()]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


class _Actor:
    """``_task`` in an actor pool, for passes with heavy steps (models load once)."""

    def __call__(self, batch: Any, ctx: Mapping[str, Any], s: int) -> Any:
        return _task(batch, ctx, s)


def fetch_rows(ctx: Mapping[str, Any], c: Mapping[str, Any], s: int, wanted: np.ndarray) -> dict:
    """The rows of chunk ``c`` at the sorted positions ``wanted`` as they reach global step
    ``s``: from segment ``s``'s spool, or read at their byte offsets (JSONL), so only those
    rows are parsed."""
    from twinkle.io import read_rows
    from twinkle.io_formats import convert_rows

    segs = ctx["segments"]
    spooled = [t for t in range(s + 1) if segs[t]["names"]]
    want = set(wanted.tolist())
    if spooled:
        d = Path(ctx["work"]) / f"seg{spooled[-1]}"
        pos = np.load(d / f"pos-{c['i']:05d}.npy")
        idx = set(np.flatnonzero(np.isin(pos, wanted)).tolist())
        with open(d / f"rows-{c['i']:05d}.jsonl", "rb") as f:
            return {int(pos[k]): _loads(line) for k, line in enumerate(f) if k in idx}
    if c["start"] < 0:
        base = c["file"] << _FILE_SHIFT
        rows = read_rows(c["path"], ctx["format"])
        return {base | k: row for k, row in enumerate(rows) if base | k in want}
    out = {}
    mask = (1 << _FILE_SHIFT) - 1
    with open(c["path"], "rb") as f:
        for p in sorted(want):
            f.seek(p & mask)
            out[p] = next(iter(convert_rows([_loads(f.readline())], ctx["format"])))
    return out


def read_markers(markers: Sequence[Path]) -> list[dict[str, Any]]:
    """The completion markers' contents, in order."""
    return [json.loads(m.read_text()) for m in markers]
