"""The curation chain on Ray Data: the same steps, the same kept rows, across many nodes.

``curate_ray(inputs, out, dropped, names, address=...)`` runs what ``curate_stream`` runs.
Ray Data schedules one task per input chunk (JSON Lines files cut at line ends every
``chunk_bytes``; Parquet, JSON and ``save_to_disk`` inputs one task a file); the tasks
(``twinkle.preprocessor.ray_steps``) read their chunk themselves and parse each row once,
so rows never travel through the object store, only small keys and statuses do:

- The chain is cut after each global step. Pass ``s`` (one ``map_batches`` over the
  chunks) runs segment ``s``'s per-row steps and computes global step ``s``'s keys (exact
  dedup: signature, message count, XXH3-128 digest; near dedup: MinHash values). The last
  pass also runs the per-row steps after the last global step, on every row that reaches
  it: they are per-row, so dropping that step's losers afterwards keeps exactly the rows of
  the single-process run, and every row is read and parsed once instead of twice. Passes
  with heavy steps (PII with spaCy, model scoring, intent) run in an actor pool sized to
  the cluster's CPUs, so models load once per actor.
- ``DedupFilter`` is a distributed hash group-by on the signature: each task writes its
  keys as one Arrow record batch per signature bucket, and one Ray task per bucket
  memory-maps its batches and resolves the groups with numpy (``ray_global``). A group of
  exact copies keeps its first longest row; the rare group that is not (truncations,
  branches) has its rows read back and resolved by the in-memory rule.
- ``NearDedupFilter``: each band's hash is a key, rows are shuffled by it with Ray Data's
  ``groupby`` and every bucket with two rows or more yields candidate pairs; the pairs are
  joined into connected components with union-find, and each component gets the
  single-process decision (``NearDedupFilter.select``), so no process holds every
  signature.
- A global step's verdict (positions to drop, with reasons) is broadcast to the next pass,
  whose tasks drop those rows as they read and log them. After the last verdict, plain
  Ray tasks (``ray_global.finish_chunks``) copy each chunk's surviving rows into its part
  file as byte ranges (no parsing) and write its dropped log and counts, per step and
  reason, with seconds and tags; the driver joins the parts in input order.
- Every task writes a completion marker last, as datatrove's executors do. With
  ``resume=True`` the work folder is kept, and a rerun after a kill or a failure skips
  every chunk with a marker and every verdict already taken.

The work folder must be on a file system every node sees (NFS, a shared volume). The
summary (``StreamSummary``) has the same shape and counts as ``curate_stream``'s, and the
output is byte for byte the same.

Example (needs a running cluster):
    >>> curate_ray('data/', 'kept.jsonl', 'dropped.jsonl', address='auto')  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from twinkle.preprocessor.quality import PipelineStats
from twinkle.preprocessor.ray_global import (
    Bands,
    chunk_range,
    component,
    finish_chunks,
    load_keys,
    near_losers,
    reduce_exact,
    star,
    union_find,
)
from twinkle.preprocessor.ray_steps import (
    _HEAVY,
    _Actor,
    _chunks,
    _task,
    fetch_rows,
    read_markers,
)
from twinkle.preprocessor.stream import (
    StreamSummary,
    _fingerprint,
    _join_parts,
    _peak_rss_mb,
    _stats_from,
    _write_json_atomic,
    open_work,
)

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
    work_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    keep_work: bool | None = None,
    append: bool = False,
    progress: bool = False,
    on_shard: Callable[[int, bool], None] | None = None,
) -> StreamSummary:
    """Run the chain ``names`` on the Ray cluster at ``address`` (see the module docstring).

    ``out`` and ``dropped`` are written as by ``curate_stream``. ``work_dir`` (default
    ``.<out>.ray-work`` beside ``out``) holds the chunks' parts and markers; it is removed
    after success unless ``resume`` or ``keep_work``. ``concurrency`` is the actor pool
    size for heavy steps (default: the cluster's CPUs). ``on_shard(i, reused)`` is called
    in input order as each chunk's task of the last pass completes (or is found done).
    A step's ``seconds`` is the workers' time in it; a global step's adds its group-by's
    wall time, and the steps after the last global step include the rows it drops (they
    run before its verdict, in the same pass).
    """
    from twinkle.preprocessor import chain

    t0 = time.perf_counter()
    names = chain.parse_filter_names(chain.DEFAULT_CHAIN if names is None else names)
    params = {k: dict(v) for k, v in (params or {}).items()}
    stages = chain.build_pipeline(names, params)  # fails here, not on a worker
    out_path = Path(out)
    work = Path(work_dir) if work_dir else out_path.with_name(f".{out_path.name}.ray-work")
    keep = resume if keep_work is None else keep_work
    settings = {"batch_size": batch_size, "format": input_format, "chunk_bytes": chunk_bytes,
                "backend": "ray"}  # fmt: skip
    open_work(work, _fingerprint(inputs, stages, settings), settings, resume)
    (work / "dropped").mkdir(parents=True, exist_ok=True)
    try:
        summary = _run(
            inputs, out_path, str(dropped or ""), names, params, stages, work, batch_size,
            input_format, chunk_bytes, concurrency, address, append, progress, on_shard,
        )  # fmt: skip
    except BaseException:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        raise
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    summary.seconds = time.perf_counter() - t0
    return summary


def _segments(names: list[str], params: Mapping[str, Any], stages: list[Any]) -> list[dict]:
    """The chain cut after each global step: per-row names, their params, the global step."""
    from twinkle.preprocessor import chain
    from twinkle.preprocessor.quality import QualityPreprocessor, step_name

    segs: list[dict[str, Any]] = []
    run: list[str] = []
    by_name = {s.name: s for s in stages}
    for name in [*names, None]:
        if name is not None and not chain.FILTERS[name][2]:
            run.append(name)
            continue
        segs.append({
            "names": run,
            "params": {k: params[k] for k in run if k in params},
            "display": QualityPreprocessor([by_name[n].step for n in run]).names,
            "global": name,
            "gparams": json.dumps(params.get(name, {}), default=str) if name else "{}",
            "gname": step_name(by_name[name].step) if name else "",
        })  # fmt: skip
        run = []
    return segs


def _run(
    inputs: Any,
    out_path: Path,
    dropped_path: str,
    names: list[str],
    params: dict[str, dict[str, Any]],
    stages: list[Any],
    work: Path,
    batch_size: int,
    input_format: str | None,
    chunk_bytes: int,
    concurrency: int | None,
    address: str,
    append: bool,
    progress: bool,
    on_shard: Callable[[int, bool], None] | None,
) -> StreamSummary:
    import ray
    import ray.data

    from twinkle.preprocessor.quality import truncate_dropped_logs

    segs = _segments(names, params, stages)
    chunks = _chunks(inputs, chunk_bytes)
    size = sum(c["end"] - c["start"] if c["start"] >= 0 else _size(c["path"]) for c in chunks)
    n_global = len(segs) - 1
    n_pass = max(n_global, 1)
    ctx: dict[str, Any] = {
        "work": str(work), "format": input_format, "batch_size": batch_size, "segments": segs,
        "chunks": chunks, "losers": [], "buckets": int(min(256, max(2, -(-size // _BUCKET)))),
    }  # fmt: skip
    for sub in [*(f"seg{s}" for s in range(n_pass)), "fin"]:
        (work / sub).mkdir(exist_ok=True)
    verdicts: list[tuple[np.ndarray, np.ndarray, list[str]]] = []
    finished: list[tuple[int, dict[str, Any]]] = []
    reused = 0
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    try:
        dctx = ray.data.DataContext.get_current()
        dctx.enable_progress_bars = progress
        dctx.verbose_progress = False
        dctx.execution_options.preserve_order = True  # tasks reported in input order
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        workers = concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
        for s in range(n_pass):
            sdir = work / f"seg{s}"
            last = s == n_pass - 1
            todo = [c["i"] for c in chunks if not (sdir / f"chunk-{c['i']:05d}.done").is_file()]
            if last:
                reused = len(chunks) - len(todo)
                for i in sorted(set(range(len(chunks))) - set(todo)) if on_shard else ():
                    on_shard(i, True)
            if todo:
                for batch in _map(ctx, s, todo, workers).iter_batches(
                    batch_format="pyarrow", batch_size=None
                ):
                    for i in batch.column("i").to_pylist():
                        if last and on_shard:
                            on_shard(i, False)
            if s == n_global:  # no global step: the one pass ran the whole chain
                break
            done = sdir / "done.json"
            if not done.is_file():
                t1 = time.perf_counter()  # the group-by's wall time: its tasks run elsewhere
                markers = read_markers([sdir / f"chunk-{c['i']:05d}.done" for c in chunks])
                decide = _exact if segs[s]["global"] == "dedup" else _near
                pos, codes, reasons = (
                    decide(ctx, s, markers, workers) if chunks else _verdict([""], [], [])
                )
                np.savez(sdir / "losers.npz", pos=pos, codes=codes)
                lost = np.bincount(codes, minlength=len(reasons)).tolist()
                _write_json_atomic(done, {
                    "reasons": reasons, "reach": sum(m["reach"] for m in markers),
                    "dropped": {reasons[k]: n for k, n in enumerate(lost) if k and n},
                    "seconds": sum(m["seconds"] for m in markers) + time.perf_counter() - t1,
                })  # fmt: skip
            with np.load(sdir / "losers.npz") as z:
                verdicts.append((z["pos"], z["codes"], json.loads(done.read_text())["reasons"]))
            ctx["losers"].append(ray.put(verdicts[-1]))
        # The last verdict applied to each chunk's rows, on the workers: parts, logs, counts.
        (work / "out").mkdir(exist_ok=True)
        # Plain Ray tasks: a few per CPU, cheaper to start than a Ray Data pass.
        ref, step = ray.put(ctx), max(1, -(-len(chunks) // (4 * workers)))
        remote = ray.remote(num_cpus=1)(finish_chunks)
        ids = [list(range(k, min(k + step, len(chunks)))) for k in range(0, len(chunks), step)]
        finished = [r for part in ray.get([remote.remote(ref, i) for i in ids]) for r in part]
    finally:
        if started:
            ray.shutdown()
    stats = PipelineStats()  # every step in chain order first, as curate_rows reports them
    for seg in segs:
        for n in seg["display"]:
            stats.record(n, 0, 0, {}, 0.0)
        if seg["gname"]:
            stats.record(seg["gname"], 0, 0, {}, 0.0)
    for s in range(n_global):
        for m in read_markers([work / f"seg{s}" / f"chunk-{c['i']:05d}.done" for c in chunks]):
            _stats_from(m["stats"], stats)
        meta = json.loads((work / f"seg{s}" / "done.json").read_text())
        reach, lost = meta["reach"], sum(meta["dropped"].values())
        stats.record(segs[s]["gname"], reach, reach - lost, meta["dropped"], meta["seconds"])
    results = sorted(finished, key=lambda r: r[0])
    for _, m in results:
        _stats_from(m["stats"], stats)
    rows_in = sum(m["read"] for m in read_markers(
        [work / "seg0" / f"chunk-{c['i']:05d}.done" for c in chunks]))  # fmt: skip
    rows_out = _join_parts([work / "out" / f"part-{c['i']:05d}.jsonl" for c in chunks], out_path)
    if dropped_path:
        if not append:
            truncate_dropped_logs(dropped_path)
        logs = [work / f"seg{s}" / f"dropped-{c['i']:05d}.jsonl"
                for s in range(n_pass) for c in chunks]  # fmt: skip
        logs += [work / "dropped" / f"part-{c['i']:05d}.jsonl" for c in chunks]
        with open(dropped_path, "ab") as dst:
            for p in logs:
                if p.is_file():
                    with open(p, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
    return StreamSummary(
        stats=stats, rows_in=rows_in, rows_out=rows_out, output=str(out_path),
        dropped=dropped_path, shards=len(chunks), shards_reused=reused,
        peak_rss_mb=_peak_rss_mb(),
    )  # fmt: skip


_BUCKET = 256 << 20  # input bytes per signature bucket of the exact-dedup group-by


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.isfile(path) else 0


def _map(ctx: Mapping[str, Any], s: int, todo: list[int], workers: int) -> Any:
    """Pass ``s`` over the chunks ``todo`` as ``map_batches``, one chunk a task."""
    import ray.data

    names = set(ctx["segments"][s]["names"])
    if s == len(ctx["segments"]) - 2:  # the last pass also runs the last segment's steps
        names |= set(ctx["segments"][-1]["names"])
    ds = ray.data.from_items([{"i": i} for i in todo], override_num_blocks=max(1, len(todo)))
    kw = {"fn_kwargs": {"ctx": ctx, "s": s}, "batch_size": 1, "batch_format": "pyarrow"}
    if _HEAVY & names:  # models load once per actor, not once per task
        return ds.map_batches(_Actor, concurrency=workers, **kw)
    return ds.map_batches(_task, **kw)


def _tables(ds: Any) -> list[Any]:
    return list(ds.iter_batches(batch_format="pyarrow", batch_size=None))


def _verdict(
    reasons: list[str], drops: Iterable[tuple[np.ndarray, str]], markers: list[dict]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Sorted loser positions and reason codes: ``drops`` plus the rows that could not be
    compared (``bad`` in the markers)."""
    pos_parts, code_parts = [], []
    bad = [b for m in markers for b in m["bad"]]
    for reason in dict.fromkeys(r for _, r in bad):
        reasons.append(reason)
    for arr, reason in drops:
        if reason not in reasons:
            reasons.append(reason)
        pos_parts.append(np.asarray(arr, dtype=np.int64))
        code_parts.append(np.full(len(arr), reasons.index(reason), dtype=np.uint16))
    if bad:
        pos_parts.append(np.array([b[0] for b in bad], dtype=np.int64))
        code_parts.append(np.array([reasons.index(b[1]) for b in bad], dtype=np.uint16))
    if not pos_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint16), reasons
    pos, codes = np.concatenate(pos_parts), np.concatenate(code_parts)
    order = np.argsort(pos, kind="stable")
    return pos[order], codes[order], reasons


def _exact(ctx: Mapping[str, Any], s: int, markers: list[dict], workers: int) -> Any:
    """The distributed group-by on the signature (``reduce_exact``, one task a bucket)."""
    import ray

    from twinkle.preprocessor.dedup_filter import DUPLICATE, _group_survivors

    remote = ray.remote(num_cpus=1)(reduce_exact)  # one plain task a bucket
    ref = ray.put(ctx)
    tables = ray.get([remote.remote(ref, s, b) for b in range(ctx["buckets"])])
    losers: list[np.ndarray] = []
    hard: dict[int, list[int]] = {}
    for t in tables:
        kind = t.column("kind").to_numpy()
        pos, sig = t.column("pos").to_numpy(), t.column("sig").to_numpy()
        losers.append(pos[kind == 0])
        for p, g in zip(pos[kind == 1].tolist(), sig[kind == 1].tolist()):
            hard.setdefault(g, []).append(p)
    if hard:  # groups that are not plain copies: their rows, compared in full (rare)
        wanted = np.sort(np.array([p for g in hard.values() for p in g], dtype=np.int64))
        rows: dict[int, Any] = {}
        for c in ctx["chunks"]:
            lo, hi = chunk_range(c)
            inside = wanted[(wanted >= lo) & (wanted < hi)]
            if len(inside):
                rows.update(fetch_rows(ctx, c, s, inside))
        for members in hard.values():
            members.sort(key=lambda p: (-len(rows[p]["messages"]), p))
            keep = set(_group_survivors(rows, members))  # type: ignore[arg-type]
            losers.append(np.array([p for p in members if p not in keep], dtype=np.int64))
        logger.info("dedup: %d signature groups compared in full", len(hard))
    return _verdict([""], [(np.concatenate(losers) if losers else [], DUPLICATE)], markers)


def _near(ctx: Mapping[str, Any], s: int, markers: list[dict], workers: int) -> Any:
    import ray
    import ray.data
    from datasketch import MinHashLSH

    from twinkle.preprocessor.dedup_filter import NEAR_DUPLICATE, NearDedupFilter

    kwargs = json.loads(ctx["segments"][s]["gparams"])
    f = NearDedupFilter(**kwargs)
    lsh = MinHashLSH(threshold=f.threshold, num_perm=f.num_perm, weights=(0.05, 0.95))
    n = len(ctx["chunks"])
    keys = (
        ray.data.from_items([{"i": i} for i in range(n)], override_num_blocks=max(1, n))
        .map_batches(
            load_keys, fn_kwargs={"ctx": ctx, "s": s}, batch_size=1, batch_format="pyarrow"
        )
        .materialize()
    )
    drops: list[tuple[np.ndarray, str]] = []
    if keys.count():
        parts = max(1, workers)  # Ray's default of 200 partitions is slow on small clusters
        edges = _tables(
            keys.map_batches(Bands(lsh.b, lsh.r), batch_format="pyarrow")
            .groupby("band", num_partitions=parts)
            .map_groups(star, batch_format="pyarrow")
        )
        a = np.concatenate([t.column("a").to_numpy() for t in edges] or [np.zeros(0, np.int64)])
        b = np.concatenate([t.column("b").to_numpy() for t in edges] or [np.zeros(0, np.int64)])
        if len(a):
            ref = ray.put(union_find(a, b))
            lost = _tables(
                keys.map_batches(component, fn_kwargs={"ref": ref}, batch_format="pyarrow")
                .filter(expr="comp >= 0")
                .groupby("comp", num_partitions=parts)
                .map_groups(near_losers, fn_kwargs={"kwargs": kwargs}, batch_format="pyarrow")
            )
            pos = [t.column("pos").to_numpy() for t in lost]
            drops.append((np.concatenate(pos) if pos else np.zeros(0, np.int64), NEAR_DUPLICATE))
    return _verdict([""], drops, markers)
