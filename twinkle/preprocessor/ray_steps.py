"""Ray Data worker side of ``twinkle.preprocessor.ray_backend``: reading, steps, writing.

Everything here runs in Ray tasks and actors on the worker nodes, on Arrow batches of
``pos`` (input position), ``row`` (the row as JSON text), ``step`` and ``reason`` ('' while
the row is kept). Global steps send only keys through shuffles (signatures, digests,
positions), never the rows; their verdicts come back as positions to drop (``_mark``).

Example:
    >>> _positions_in_order([(1, 0), (0, 5)])  # (file index, offset) -> sortable integers
    [1099511627776, 5]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twinkle.preprocessor.stream import _dumps, _loads

#: Steps that load models or large resources: run in an actor pool, built once per actor.
_HEAVY = frozenset({"pii", "score", "intent"})

_FILE_SHIFT = 40  # position = file index << 40 | offset (offsets up to 1 TB per file)


def _positions_in_order(pairs: Iterable[tuple[int, int]]) -> list[int]:
    return [(f << _FILE_SHIFT) | o for f, o in pairs]


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [("pos", pa.int64()), ("row", pa.large_string()), ("step", pa.string()),
         ("reason", pa.string())]
    )  # fmt: skip


def _table(pos: Sequence[int], rows: Sequence[str], steps: Sequence[str], reasons: Sequence[str]):
    import pyarrow as pa

    return pa.Table.from_arrays(
        [pa.array(pos, pa.int64()), pa.array(rows, pa.large_string()),
         pa.array(steps, pa.string()), pa.array(reasons, pa.string())],
        schema=_schema(),
    )  # fmt: skip


# ----------------------------------------------------------------------------- reading
def _chunks(inputs: Any, chunk_bytes: int) -> list[dict[str, Any]]:
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
    return out


class _Read:
    def __init__(self, input_format: str | None) -> None:
        self.input_format = input_format

    def __call__(self, batch: Any) -> Any:
        from twinkle.io import read_rows
        from twinkle.io_formats import convert_rows

        pos: list[int] = []
        rows: list[str] = []
        for c in batch.to_pylist():
            base = c["file"] << _FILE_SHIFT
            if c["start"] < 0:
                for i, row in enumerate(read_rows(c["path"], self.input_format)):
                    pos.append(base | i)
                    rows.append(_dumps(row).decode())
                continue
            offsets, values = [], []
            with open(c["path"], "rb") as f:
                f.seek(c["start"])
                at = c["start"]
                while at < c["end"]:
                    raw = f.readline()
                    if not raw:
                        break
                    if raw.strip():
                        offsets.append(at)
                        values.append(_loads(raw))
                    at += len(raw)
            for off, row in zip(offsets, convert_rows(values, self.input_format)):
                if not isinstance(row, dict):
                    raise ValueError(f"{c['path']}: byte {off}: a row must be a JSON object")
                pos.append(base | off)
                rows.append(_dumps(row).decode())
        return _table(pos, rows, [""] * len(pos), [""] * len(pos))


# ----------------------------------------------------------------------------- steps
class _PerRow:
    """Runs a run of per-row steps (built once per actor) and marks each row kept/dropped."""

    def __init__(self, names: list[str], params: Mapping[str, Any]) -> None:
        from twinkle.preprocessor.chain import build_pipeline
        from twinkle.preprocessor.quality import QualityPreprocessor

        self.steps = [s.step for s in build_pipeline(names, params)]
        self.names = QualityPreprocessor(self.steps).names

    def __call__(self, batch: Any) -> Any:
        from twinkle.preprocessor.quality import _run_step

        pos, raw = batch.column("pos").to_pylist(), batch.column("row").to_pylist()
        rows = [{**_loads(r), "_twinkle_pos": p} for p, r in zip(pos, raw)]
        out_pos, out_rows, out_steps, out_reasons = [], [], [], []
        for step, name in zip(self.steps, self.names):
            if not rows:
                break
            kept, dropped = _run_step(step, name, rows)
            for d in dropped:
                d = dict(d)
                reason = d.pop("drop_reason", None) or name
                out_pos.append(d.pop("_twinkle_pos"))
                out_rows.append(_dumps(d).decode())
                out_steps.append(name)
                out_reasons.append(reason)
            rows = kept
        for r in rows:
            out_pos.append(r.pop("_twinkle_pos"))
            out_rows.append(_dumps(r).decode())
            out_steps.append("")
            out_reasons.append("")
        return _table(out_pos, out_rows, out_steps, out_reasons)


class _ExactKeys:
    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        from twinkle.preprocessor.dedup_filter import DedupFilter

        self.f = DedupFilter(**kwargs)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        from twinkle.preprocessor.base import malformed_reason
        from twinkle.preprocessor.stream_global import _digest

        sig, n, d1, d2, reasons = [], [], [], [], []
        for raw in batch.column("row").to_pylist():
            row = _loads(raw)
            reason = malformed_reason(row)
            s = 0
            if reason is None:
                try:
                    s = self.f.signature(row["messages"])
                except Exception as exc:  # noqa: BLE001  (a bad row is a drop, never a crash)
                    reason = f"malformed_row:{type(exc).__name__}"
            a, b = _digest(row["messages"]) if reason is None else (0, 0)
            sig.append(s)
            n.append(len(row["messages"]) if reason is None else 0)
            d1.append(a)
            d2.append(b)
            reasons.append(reason or "")
        u64 = pa.uint64()
        t = batch.drop_columns(["reason"]).append_column("reason", pa.array(reasons, pa.string()))
        for name, vals, typ in (("sig", sig, u64), ("n", n, pa.int32()), ("d1", d1, u64),
                                ("d2", d2, u64)):  # fmt: skip
            t = t.append_column(name, pa.array(vals, typ))
        marks = pa.array(["DedupFilter" if r else "" for r in reasons], pa.string())
        return t.set_column(t.schema.get_field_index("step"), "step", marks)


class _NearSketch:
    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        from twinkle.preprocessor.dedup_filter import NearDedupFilter

        self.f = NearDedupFilter(**kwargs)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        pos = batch.column("pos").to_pylist()
        rows = [_loads(r) for r in batch.column("row").to_pylist()]
        keys, sigs, has, bad = self.f.sketch(rows)
        bad_at = dict(bad)
        at = {int(i): k for k, i in enumerate(keys[:, 2].tolist())}
        n = len(rows)
        col = {"n": [0] * n, "chars": [0] * n, "has": [False] * n, "sig": [b""] * n}
        reasons = [""] * n
        for i in range(n):
            if i in bad_at:
                reasons[i] = bad_at[i]
                continue
            k = at[i]
            col["n"][i], col["chars"][i] = int(keys[k, 0]), int(keys[k, 1])
            col["has"][i], col["sig"][i] = bool(has[k]), sigs[k].tobytes()
        t = _table(pos, batch.column("row").to_pylist(),
                   ["NearDedupFilter" if r else "" for r in reasons], reasons)  # fmt: skip
        for name, typ in (("n", pa.int64()), ("chars", pa.int64()), ("has", pa.bool_()),
                          ("sig", pa.binary())):  # fmt: skip
            t = t.append_column(name, pa.array(col[name], typ))
        return t


class _Bands:
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


def _star(group: Any) -> Any:
    import pyarrow as pa

    pos = sorted(set(group.column("pos").to_pylist()))
    a = pos[:1] * (len(pos) - 1)
    return pa.table({"a": pa.array(a, pa.int64()), "b": pa.array(pos[1:], pa.int64())})


class _Component:
    def __init__(self, keys: np.ndarray, comps: np.ndarray) -> None:
        self.keys, self.comps = keys, comps

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        pos = batch.column("pos").to_numpy()
        comp = np.full(len(pos), -1, dtype=np.int64)
        if len(self.keys):
            i = np.minimum(np.searchsorted(self.keys, pos), len(self.keys) - 1)
            hit = self.keys[i] == pos
            comp[hit] = self.comps[i[hit]]
        return batch.append_column("comp", pa.array(comp, pa.int64()))


def _union_find(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _read(batch: Any, input_format: str | None) -> Any:
    return _Read(input_format)(batch)


def _write_part(batch: Any, folder: str, log: bool) -> Any:
    """Write one batch, sorted by position, as ``part-<first position>.jsonl``; returns its
    rows counted by (step, reason) and its position range (``lo``, ``hi``)."""
    from collections import Counter

    import pyarrow as pa

    batch = batch.sort_by("pos")
    pos = batch.column("pos").to_pylist()
    rows = batch.column("row").to_pylist()
    steps, reasons = batch.column("step").to_pylist(), batch.column("reason").to_pylist()
    if log:
        lines = [
            b'{"step":' + _dumps(s) + b',"reason":' + _dumps(r) + b',"row":' + row.encode() + b"}"
            for s, r, row in zip(steps, reasons, rows)
        ]
    else:
        lines = [row.encode() for row in rows]
    if pos:
        path = Path(folder) / f"part-{pos[0]:020d}.jsonl"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"\n".join(lines) + b"\n")
        os.replace(tmp, path)
    counts = Counter(zip(steps, reasons))
    lo, hi = (pos[0], pos[-1]) if pos else (-1, -1)
    return pa.table(
        {
            "step": pa.array([k[0] for k in counts], pa.string()),
            "reason": pa.array([k[1] for k in counts], pa.string()),
            "n": pa.array(list(counts.values()), pa.int64()),
            "lo": pa.array([lo] * len(counts), pa.int64()),
            "hi": pa.array([hi] * len(counts), pa.int64()),
        }
    )


def _resolve_keys(group: Any) -> Any:
    """One signature group's verdict from its keys: ``kind`` 0 for a copy to drop, 1 for a
    member of a group that is not plain copies (resolved on the rows, by the driver)."""
    import pyarrow as pa

    pos = group.column("pos").to_numpy()
    empty = pa.table({"pos": pa.array([], pa.int64()), "sig": pa.array([], pa.uint64()),
                      "kind": pa.array([], pa.int8())})  # fmt: skip
    if len(pos) < 2:
        return empty
    n = group.column("n").to_numpy().astype(np.int64)
    order = np.lexsort((pos, -n))  # most messages first, then input order
    d = np.stack([group.column("d1").to_numpy(), group.column("d2").to_numpy()], axis=1)
    if (d == d[0]).all():  # exact copies: the first wins, as in the in-memory fast path
        out, kind = pos[order[1:]], 0
    else:
        out, kind = pos[order], 1
    sig = group.column("sig").to_numpy()[: len(out)]
    return pa.table({"pos": pa.array(out, pa.int64()), "sig": pa.array(sig, pa.uint64()),
                     "kind": pa.array(np.full(len(out), kind), pa.int8())})  # fmt: skip


def _near_losers(group: Any, kwargs: Mapping[str, Any]) -> Any:
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


def _mark(batch: Any, ref: Any) -> Any:
    """Rows whose position is in the broadcast ``(positions, step, reason)`` marked dropped."""
    import pyarrow as pa
    import ray

    positions, step, reason = ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref
    pos = batch.column("pos").to_numpy()
    i = np.minimum(np.searchsorted(positions, pos), max(len(positions) - 1, 0))
    hit = (positions[i] == pos) if len(positions) else np.zeros(len(pos), dtype=bool)
    t = batch.select(["pos", "row", "step", "reason"])
    steps = np.where(hit, step, t.column("step").to_numpy(zero_copy_only=False))
    reasons = np.where(hit, reason, t.column("reason").to_numpy(zero_copy_only=False))
    t = t.set_column(2, "step", pa.array(steps.tolist(), pa.string()))
    return t.set_column(3, "reason", pa.array(reasons.tolist(), pa.string()))


def _pick(batch: Any, ref: Any) -> Any:
    """Only the rows at the broadcast positions (the rare groups compared in full)."""
    import ray

    positions = ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref
    pos = batch.column("pos").to_numpy()
    import pyarrow as pa

    return batch.select(["pos", "row"]).filter(pa.array(np.isin(pos, positions)))


def _exact_keys(batch: Any, kwargs: Mapping[str, Any]) -> Any:
    return _ExactKeys(kwargs)(batch)


def _near_sketch(batch: Any, kwargs: Mapping[str, Any]) -> Any:
    return _NearSketch(kwargs)(batch)


def _component(batch: Any, ref: Any) -> Any:
    import ray

    nodes, comps = ray.get(ref) if isinstance(ref, ray.ObjectRef) else ref
    return _Component(nodes, comps)(batch)


def _per_row(batch: Any, names: list[str], params: Mapping[str, Any]) -> Any:
    return _PerRow(names, params)(batch)
