"""The curation chain on Ray Data: the same steps, the same kept rows, across many nodes.

``curate_ray(inputs, out, dropped, names, address=...)`` runs what ``curate_stream`` runs:

- Inputs are read as a Ray dataset: JSON Lines files cut into byte ranges at line ends
  (``chunk_bytes``), other files (Parquet, JSON arrays, ``save_to_disk`` folders) one task
  each, all through ``twinkle.io``'s readers and format conversion. Each row carries its
  input position (file index, byte offset or row index), which orders ties and the output.
  Rows travel as JSON text, so no Arrow schema has to fit every row.
- Per-row steps run as ``map_batches`` in an actor pool (``concurrency``): each actor builds
  the chain once, so PII (spaCy) and model-backed steps load their models once per actor.
- ``DedupFilter`` is a distributed group-by on the signature of keys only (signature,
  message count, XXH3-128 digest of the messages, position; never the rows): a group of
  exact copies keeps its first longest row; the rare group that is not (truncations,
  branches) has its rows fetched and resolved by the in-memory rule (``_group_survivors``).
- ``NearDedupFilter``: MinHash signatures per batch; each band's hash is a key, rows are
  shuffled by it and every bucket with two rows or more yields candidate pairs (a star on
  its first row). The pairs (two integers each, never signatures) are joined into
  connected components with union-find on the driver; each component's keys and
  signatures are then grouped and get the single-process decision
  (``NearDedupFilter.select``). A row's LSH candidates all lie in its component, so the
  kept rows are exactly the single-process ones.
- Global steps answer with the positions to drop, broadcast to a ``map_batches`` that marks
  them: rows are never shuffled, so blocks keep their input order and the kept rows are
  written in order without a sort (a sort by position runs only if part ranges overlap).
- The kept and the dropped rows are written by the workers as part files under
  ``parts_dir`` and joined into ``out`` and ``dropped``; the writers return the counts per
  step and reason. The summary has the same form and counts as ``curate_stream``'s (tags
  of tagging steps are not counted here).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from twinkle.preprocessor.quality import PipelineStats
from twinkle.preprocessor.ray_steps import (
    _HEAVY,
    _Bands,
    _chunks,
    _component,
    _exact_keys,
    _loads,
    _mark,
    _near_losers,
    _near_sketch,
    _per_row,
    _PerRow,
    _pick,
    _read,
    _resolve_keys,
    _star,
    _union_find,
    _write_part,
)
from twinkle.preprocessor.stream import StreamSummary, _join_parts, _peak_rss_mb

logger = logging.getLogger("twinkle.preprocessor")

__all__ = ["curate_ray"]


def curate_ray(
    inputs: Any,
    out: str | os.PathLike[str],
    dropped: str | os.PathLike[str] = "",
    names: str | Iterable[str] | None = None,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    address: str = "auto",
    batch_size: int = 1000,
    input_format: str | None = None,
    chunk_bytes: int = 16 << 20,
    concurrency: int | None = None,
    parts_dir: str | os.PathLike[str] | None = None,
    append: bool = False,
    progress: bool = False,
) -> StreamSummary:
    """Run the chain ``names`` on the Ray cluster at ``address`` (see the module docstring).

    ``out`` and ``dropped`` are written as by ``curate_stream``; the part files stay in
    ``parts_dir`` when one is given (``out/`` and ``dropped/`` under it). ``concurrency``
    is the actor pool size (default: the cluster's CPUs).
    """
    import ray
    import ray.data

    from twinkle.preprocessor import chain
    from twinkle.preprocessor.quality import QualityPreprocessor, truncate_dropped_logs

    t0 = time.perf_counter()
    names = chain.parse_filter_names(chain.DEFAULT_CHAIN if names is None else names)
    params = {k: dict(v) for k, v in (params or {}).items()}
    stages = chain.build_pipeline(names, params)  # fails here, not on a worker
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    ctx.verbose_progress = False
    ctx.execution_options.preserve_order = True  # blocks in input order: no sort to write
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    workers = concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
    own_parts = parts_dir is None
    base = Path(parts_dir) if parts_dir else Path(out).with_name(f".{Path(out).name}.ray-parts")
    shutil.rmtree(base, ignore_errors=True)
    (base / "out").mkdir(parents=True)
    (base / "dropped").mkdir(parents=True)
    try:
        chunks = _chunks(inputs, chunk_bytes)
        ds = ray.data.from_items(chunks, override_num_blocks=max(1, len(chunks)))
        ds = ds.map_batches(
            _read, fn_kwargs={"input_format": input_format}, batch_size=1, batch_format="pyarrow"
        ).materialize()
        rows_in = ds.count()
        drops: list[Any] = []
        cols = ["pos", "row", "step", "reason"]

        def split(d: Any) -> Any:
            d = d.materialize()
            drops.append(d.filter(expr="step != ''").select_columns(cols))
            return d.filter(expr="step == ''").select_columns(cols)

        order: list[str] = []
        run: list[str] = []
        for name in [*names, None]:
            if name is None or chain.FILTERS[name][2]:  # a global step (or the end) closes a run
                if run:
                    kw = {k: params[k] for k in run if k in params}
                    if _HEAVY & set(run):  # models load once per actor, not once per batch
                        mapped = ds.map_batches(
                            _PerRow, fn_constructor_args=(run, kw), batch_size=batch_size,
                            batch_format="pyarrow", concurrency=workers,
                        )  # fmt: skip
                    else:  # rule filters: plain tasks, which free their CPU after each batch
                        mapped = ds.map_batches(
                            _per_row, fn_kwargs={"names": run, "params": kw},
                            batch_size=batch_size, batch_format="pyarrow",
                        )  # fmt: skip
                    ds = split(mapped)
                    order += QualityPreprocessor([s.step for s in stages if s.name in run]).names
                    run = []
                if name == "dedup":
                    ds = _exact(split, ds, params.get(name, {}), batch_size)
                    order.append("DedupFilter")
                elif name == "neardedup":
                    ds = _near(split, ds, params.get(name, {}), batch_size)
                    order.append("NearDedupFilter")
            else:
                run.append(name)
        if not _write_in_order(ds, base / "out"):  # blocks lost their order: sort them
            shutil.rmtree(base / "out")
            (base / "out").mkdir()
            _write_in_order(ds.sort("pos"), base / "out")
        counts: dict[str, dict[str, int]] = {}
        if drops:  # the dropped log: no sort (its order is by part), counts from the writers
            all_drops = drops[0].union(*drops[1:]) if len(drops) > 1 else drops[0]
            written = all_drops.map_batches(
                _write_part, fn_kwargs={"folder": str(base / "dropped"), "log": True},
                batch_format="pyarrow", batch_size=None,
            ).take_all()  # fmt: skip
            for rec in written:
                step = counts.setdefault(rec["step"], {})
                step[rec["reason"]] = step.get(rec["reason"], 0) + int(rec["n"])
    finally:
        if started:
            ray.shutdown()
    stats = PipelineStats()
    remaining = rows_in
    for name in order:
        lost = counts.get(name, {})
        stats.record(name, remaining, remaining - sum(lost.values()), lost, 0.0)
        remaining -= sum(lost.values())
    rows_out = _join_parts(sorted((base / "out").glob("part-*.jsonl")), Path(out))
    if dropped:
        if not append:
            truncate_dropped_logs(str(dropped))
        with open(dropped, "ab") as dst:
            for p in sorted((base / "dropped").glob("part-*.jsonl")):
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
    shards = len(list((base / "out").glob("part-*.jsonl")))
    if own_parts:
        shutil.rmtree(base, ignore_errors=True)
    return StreamSummary(
        stats=stats, rows_in=rows_in, rows_out=rows_out, output=str(out), dropped=str(dropped),
        shards=shards, seconds=time.perf_counter() - t0, peak_rss_mb=_peak_rss_mb(),
    )  # fmt: skip


def _write_in_order(ds: Any, folder: Path) -> bool:
    """Write ``ds`` as part files; whether their position ranges are disjoint (in order)."""
    written = ds.map_batches(
        _write_part, fn_kwargs={"folder": str(folder), "log": False}, batch_format="pyarrow",
        batch_size=None,
    ).take_all()  # fmt: skip
    ranges = sorted({(r["lo"], r["hi"]) for r in written if r["lo"] >= 0})
    return all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))


def _positions(ds: Any) -> np.ndarray:
    """The ``pos`` column of ``ds``, sorted (the positions a global step drops)."""
    parts = [b.column("pos").to_numpy() for b in ds.iter_batches(batch_format="pyarrow")]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _exact(split: Any, ds: Any, kwargs: Mapping[str, Any], batch_size: int) -> Any:
    import ray

    from twinkle.preprocessor.dedup_filter import DUPLICATE, _group_survivors

    keyed = ds.map_batches(
        _exact_keys, fn_kwargs={"kwargs": dict(kwargs)}, batch_size=batch_size,
        batch_format="pyarrow",
    ).materialize()  # fmt: skip
    split(keyed.filter(expr="reason != ''"))
    ok = keyed.filter(expr="reason == ''").materialize()
    verdicts = (
        ok.select_columns(["pos", "sig", "n", "d1", "d2"])
        .groupby("sig", num_partitions=_partitions())
        .map_groups(_resolve_keys, batch_format="pyarrow")
        .materialize()
    )
    losers = [_positions(verdicts.filter(expr="kind == 0"))]
    hard = verdicts.filter(expr="kind == 1").take_all()  # groups that are not plain copies
    if hard:
        wanted = ray.put(np.sort(np.array([r["pos"] for r in hard], dtype=np.int64)))
        rows = {
            r["pos"]: _loads(r["row"])
            for r in ok.map_batches(_pick, fn_kwargs={"ref": wanted}, batch_format="pyarrow")
            .take_all()
        }  # fmt: skip
        groups: dict[int, list[int]] = {}
        for r in hard:
            groups.setdefault(r["sig"], []).append(r["pos"])
        for members in groups.values():
            members.sort(key=lambda p: (-len(rows[p]["messages"]), p))
            keep = set(_group_survivors(rows, members))  # type: ignore[arg-type]
            losers.append(np.array([p for p in members if p not in keep], dtype=np.int64))
    ref = ray.put((np.sort(np.concatenate(losers)), "DedupFilter", DUPLICATE))
    return split(ok.map_batches(_mark, fn_kwargs={"ref": ref}, batch_format="pyarrow"))


def _near(split: Any, ds: Any, kwargs: Mapping[str, Any], batch_size: int) -> Any:
    import ray
    from datasketch import MinHashLSH

    from twinkle.preprocessor.dedup_filter import NEAR_DUPLICATE, NearDedupFilter

    f = NearDedupFilter(**kwargs)
    lsh = MinHashLSH(threshold=f.threshold, num_perm=f.num_perm, weights=(0.05, 0.95))
    sk = ds.map_batches(
        _near_sketch, fn_kwargs={"kwargs": dict(kwargs)}, batch_size=batch_size,
        batch_format="pyarrow",
    ).materialize()  # fmt: skip
    split(sk.filter(expr="reason != ''"))
    ok = sk.filter(expr="reason == ''").materialize()
    keys = ok.filter(expr="has").select_columns(["pos", "n", "chars", "sig"]).materialize()
    edges = (
        keys.map_batches(_Bands(lsh.b, lsh.r), batch_format="pyarrow", batch_size=batch_size)
        .groupby("band", num_partitions=_partitions())
        .map_groups(_star, batch_format="pyarrow")
        .materialize()
    )
    pairs = [(b.column("a").to_numpy(), b.column("b").to_numpy()) for b in edges.iter_batches(
        batch_format="pyarrow")]  # fmt: skip
    a = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    b = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    ref = ray.put(_union_find(a, b))
    losers = (
        keys.map_batches(_component, fn_kwargs={"ref": ref}, batch_format="pyarrow")
        .filter(expr="comp >= 0")
        .groupby("comp", num_partitions=_partitions())
        .map_groups(_near_losers, fn_kwargs={"kwargs": dict(kwargs)}, batch_format="pyarrow")
    )
    ref = ray.put((_positions(losers), "NearDedupFilter", NEAR_DUPLICATE))
    return split(ok.map_batches(_mark, fn_kwargs={"ref": ref}, batch_format="pyarrow"))


def _workers() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _partitions() -> int:
    """Shuffle partitions: a few per CPU (Ray's default of 200 is slow on small clusters)."""
    return 4 * _workers()
