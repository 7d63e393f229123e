"""Curation that streams: memory bounded by the batch and the dedup index, not by the input.

``curate_stream(inputs, out, dropped, steps)`` runs the same chain as ``curate_rows`` and
keeps the same rows, in the same order, without holding the dataset:

- per-row steps see ``batch_size`` rows at a time, read with ``twinkle.io.read_rows``
  (files, folders and globs, JSONL/JSON/Parquet, one row after another);
- the last global step (``dedup``, ``neardedup``) shares one read with the per-row steps
  around it (``twinkle.preprocessor.stream_last``): each row is parsed once, its keys go
  to a compact index, the steps after the global step run on it at once (they are per-row,
  so dropping the step's losers afterwards keeps the same rows), and the survivors are
  spooled as bytes; once the index has decided, each shard's kept rows are copied as byte
  ranges. An earlier global step first builds its decision from the rows that reach it
  (``twinkle.preprocessor.stream_global``), the steps before it spooling their survivors;
- the input is read in shards of ``shard_rows``; each shard's parts and dropped log are
  written to the work folder with a completion marker (``part-NNNNN.done``), as datatrove's
  executors do. ``resume=True`` reuses every shard with a marker, and every global decision
  already taken, so a killed run restarts at the first unfinished shard; a changed input,
  chain or setting starts afresh;
- at the end the parts are joined into ``out`` (renamed into place) and the dropped log.

Invariants kept: ``rows_in = kept + dropped`` per step and over the chain; longest-wins for
both dedups; kept rows keep their input order. A progress bar on stderr (tqdm) shows rows/s
and the resident memory. Writing ``.parquet`` output joins the parts in memory (Parquet needs
one schema); JSONL and JSON are joined by streaming.

Example:
    >>> import os, tempfile
    >>> from twinkle.io import read_rows_list, write_rows
    >>> d = tempfile.mkdtemp()
    >>> msgs = [{'role': 'user', 'content': 'sum 2+2'}, {'role': 'assistant', 'content': '4'}]
    >>> _ = write_rows(os.path.join(d, 'in.jsonl'), [{'messages': msgs}] * 3)
    >>> s = curate_stream(os.path.join(d, 'in.jsonl'), os.path.join(d, 'out.jsonl'),
    ...                   steps=['dedup', 'normalize'], progress=False)
    >>> s.rows_in, s.rows_out, s.stats.dropped()
    (3, 1, {'DedupFilter': {'duplicate': 2}})
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from twinkle.preprocessor.chain import DEFAULT_CHAIN, Stage, build_pipeline
from twinkle.preprocessor.quality import (
    PipelineStats,
    QualityPreprocessor,
    append_dropped,
    step_name,
    truncate_dropped_logs,
)
from twinkle.preprocessor.stream_global import Plan, Source, plan_global
from twinkle.preprocessor.stream_last import Bar as _Bar
from twinkle.preprocessor.stream_last import run_last, supported

__all__ = ["StreamSummary", "curate_stream"]

logger = logging.getLogger("twinkle.preprocessor")

_FORMAT_VERSION = 2


@dataclass
class StreamSummary:
    """What ``curate_stream`` did: per-step counts and where the results are.

    Example:
        >>> StreamSummary(PipelineStats(), 0, 0, 'o.jsonl', '').as_dict()['rows_out']
        0
    """

    stats: PipelineStats
    rows_in: int
    rows_out: int
    output: str
    dropped: str
    shards: int = 0
    shards_reused: int = 0
    seconds: float = 0.0
    peak_rss_mb: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.stats.as_dict(),
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "output": self.output,
            "dropped_log": self.dropped,
            "shards": self.shards,
            "shards_reused": self.shards_reused,
            "seconds": round(self.seconds, 3),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
        }


# ----------------------------------------------------------------------------- helpers
def _dumps(row: Any) -> bytes:
    try:
        return orjson.dumps(row, default=str, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, huge integers
        return json.dumps(row, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # what _dumps wrote through the standard library
        return json.loads(raw)


def _spool_rows(path: Path) -> Iterator[Any]:
    with open(path, "rb") as f:
        for line in f:
            yield _loads(line)


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _batches(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(rows)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _write_json_atomic(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _stats_dict(stats: PipelineStats) -> list[dict[str, Any]]:
    return [s.as_dict() for s in stats.steps.values()]


def _stats_from(items: Iterable[Mapping[str, Any]], into: PipelineStats) -> None:
    for s in items:
        into.record(
            s["step"], s["rows_in"], s["rows_out"], s["dropped"], s["seconds"], s.get("tags")
        )


def _settings_of(step: Any) -> str:
    """A step's public settings as text, without object addresses (stable across runs)."""
    import re

    items = sorted(
        (k, _ordered(v)) for k, v in getattr(step, "__dict__", {}).items() if k[:1] != "_"
    )
    return re.sub(r" at 0x[0-9a-fA-F]+", "", f"{type(step).__name__}{items!r}")


def _ordered(value: Any) -> Any:
    """``value`` with its sets sorted: a set's order (so its repr) changes from one process to
    the next with string hashing, and a resumed run would never match the killed one."""
    if isinstance(value, (set, frozenset)):
        return sorted((_ordered(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_ordered(v) for v in value]
    if isinstance(value, dict):
        return {k: _ordered(v) for k, v in value.items()}
    return value


def open_work(work: Path, fp: str, settings: Mapping[str, Any], resume: bool) -> bool:
    """Make ``work`` ready for a run whose inputs, chain and settings hash to ``fp``;
    whether it starts afresh. With ``resume`` a work folder of the same ``fp`` is kept
    (its finished shards are reused); otherwise, or when ``fp`` changed, it is emptied."""
    manifest = work / "manifest.json"
    fresh = True
    if resume and manifest.is_file():
        try:
            fresh = json.loads(manifest.read_text()).get("fingerprint") != fp
        except ValueError:
            fresh = True
        if fresh:
            logger.warning("%s: inputs, chain or settings changed; starting afresh", work)
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(manifest, {"fingerprint": fp, "settings": dict(settings)})
    return fresh


def _fingerprint(inputs: Any, stages: Sequence[Stage], settings: Mapping[str, Any]) -> str:
    """What decides the result: the sources (path, size, mtime), the chain and the settings."""
    from twinkle import io_formats

    if io_formats.is_dataset_object(inputs):
        sources: list[Any] = [f"<{type(inputs).__name__}:{id(inputs)}>"]
    else:
        paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
        sources = []
        for p in io_formats.expand_sources([Path(x) for x in paths]):
            st = p.stat()
            sources.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
    chain = [[s.name, s.is_global, _settings_of(s.step)] for s in stages]
    blob = json.dumps([_FORMAT_VERSION, sources, chain, dict(settings)], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


# ----------------------------------------------------------------------------- the run
def curate_stream(
    inputs: Any,
    out: str | os.PathLike[str],
    dropped: str | os.PathLike[str] = "",
    steps: str | Iterable[str] | Sequence[Stage] = DEFAULT_CHAIN,
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    batch_size: int = 1000,
    input_format: str | None = None,
    shard_rows: int = 100_000,
    work_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    keep_work: bool | None = None,
    append: bool = False,
    progress: bool = True,
    on_shard: Callable[[int, bool], None] | None = None,
) -> StreamSummary:
    """Run ``steps`` over the rows of ``inputs`` as a stream; write ``out`` and ``dropped``.

    Args:
        inputs: files, folders, globs (as ``twinkle.io.read_rows`` takes them) or a
            ``datasets`` object.
        out: the curated rows (.jsonl, .json or .parquet).
        dropped: JSONL log of dropped rows as ``{step, reason, row}`` ('' for none); emptied
            first unless ``append``.
        steps: filter names (``build_pipeline`` with ``params``) or built ``Stage`` objects.
        batch_size: rows per batch for the per-row steps.
        input_format: as ``read_rows``'s ``format``.
        shard_rows: rows per output shard (the unit of resumption).
        work_dir: where parts, spools, decisions and markers go (default: ``.<out>.work``
            beside ``out``).
        resume: reuse finished shards and decisions found in ``work_dir``.
        keep_work: keep ``work_dir`` after success (default: when ``resume``).
        on_shard: called with ``(shard index, reused)`` as each output shard completes.

    Returns ``StreamSummary``; ``summary.stats`` equals ``curate_rows``'s statistics (but
    for seconds).
    """
    from twinkle.io import SUFFIXES

    if batch_size < 1 or shard_rows < 1:
        raise ValueError(f"batch_size={batch_size!r} and shard_rows={shard_rows!r} must be >= 1")
    t_start = time.perf_counter()
    out_path = Path(out)
    if out_path.suffix.lower() not in SUFFIXES:  # fail before any work
        raise ValueError(f"{out_path}: the output must end in one of {', '.join(SUFFIXES)}")
    if isinstance(steps, (str, bytes)) or not all(isinstance(s, Stage) for s in steps):
        stages = build_pipeline(steps, params)  # type: ignore[arg-type]
    else:
        stages = list(steps)  # type: ignore[arg-type]
    work = Path(work_dir) if work_dir else out_path.with_name(f".{out_path.name}.work")
    keep = resume if keep_work is None else keep_work
    try:
        summary = _run(
            inputs, out_path, str(dropped or ""), stages, batch_size, input_format, shard_rows,
            work, resume, append, progress, on_shard,
        )  # fmt: skip
    except BaseException:
        if not keep:  # nothing to resume from: leave no parts behind
            shutil.rmtree(work, ignore_errors=True)
        raise
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    summary.seconds = time.perf_counter() - t_start
    return summary


def _run(
    inputs: Any,
    out_path: Path,
    dropped_path: str,
    stages: list[Stage],
    batch_size: int,
    input_format: str | None,
    shard_rows: int,
    work: Path,
    resume: bool,
    append: bool,
    progress: bool,
    on_shard: Callable[[int, bool], None] | None,
) -> StreamSummary:
    settings = {"batch_size": batch_size, "shard_rows": shard_rows, "format": input_format}
    fresh = open_work(work, _fingerprint(inputs, stages, settings), settings, resume)

    # Segments: per-row steps, each run closed by a global step; the last has none.
    segments: list[tuple[list[Stage], Stage | None]] = []
    run: list[Stage] = []
    for stage in stages:
        if stage.is_global:
            segments.append((run, stage))
            run = []
        else:
            run.append(stage)
    segments.append((run, None))

    stats = PipelineStats()  # every step in chain order first, as curate_rows reports them
    for perrow, gstage in segments:
        for name in QualityPreprocessor([s.step for s in perrow]).names:
            stats.record(name, 0, 0, {}, 0.0)
        if gstage is not None:
            stats.record(step_name(gstage.step), 0, 0, {}, 0.0)

    bar = _Bar(progress)
    total = _count(inputs)
    logs: list[Path] = []

    from twinkle.io import read_rows

    def raw_source() -> Iterator[Any]:
        return read_rows(inputs, input_format)

    source: Source = raw_source
    plan: Plan | None = None
    prev_name = ""
    rows_in: int | None = None
    # The last global step, when it has a compact index, shares one read with the steps
    # around it (``stream_last``); earlier ones build their plan first.
    one_read = len(segments) > 1 and supported(segments[-2][1].step)  # type: ignore[union-attr]
    for gi, (perrow, gstage) in enumerate(segments[:-1]):
        if one_read and gi == len(segments) - 2:
            break
        assert gstage is not None
        sdir = work / f"stage{gi}"
        done = sdir / "done.json"
        spool = sdir / "rows.jsonl"
        log = sdir / "dropped.jsonl"
        logs.append(log)
        needs_spool = bool(perrow) or plan is not None
        if done.is_file() and not fresh:
            meta = json.loads(done.read_text())
            _stats_from(meta["stats"], stats)
            plan = Plan(np.load(sdir / "codes.npy"), meta["reasons"])
            if needs_spool:
                source = _spool_source(spool)
            rows_in = meta["rows_in"] if rows_in is None else rows_in
            total = len(plan.codes)
            prev_name = step_name(gstage.step)
            continue
        shutil.rmtree(sdir, ignore_errors=True)
        sdir.mkdir(parents=True)
        seg_stats = PipelineStats()
        if needs_spool:  # run the per-row steps once; log the previous global step's drops
            bar.start(f"read {gi + 1}: {_label(perrow) or 'spool'}", total)
            qp = QualityPreprocessor([s.step for s in perrow], str(log))
            n_seen = 0
            with open(spool, "wb") as f:
                for batch in _batches(_marked(source, plan), batch_size):
                    n_seen += len(batch)
                    kept = _drop_marked(batch, plan, prev_name, str(log))
                    if kept:
                        survivors = qp(kept) if perrow else kept
                        if survivors:
                            f.write(b"\n".join(_dumps(r) for r in survivors) + b"\n")
                    bar.tick(len(batch))
            seg_stats.merge(qp.stats)
            rows_in = n_seen if rows_in is None else rows_in
            source = _spool_source(spool)
        bar.start(f"read {gi + 1}: {gstage.name} index", None if needs_spool else total)
        plan = plan_global(gstage.step, source, bar.tick)
        bar.close()
        rows_in = len(plan.codes) if rows_in is None else rows_in
        name = step_name(gstage.step)
        seg_stats.record(name, len(plan.codes), plan.kept, plan.dropped(), plan.seconds)
        np.save(sdir / "codes.npy", plan.codes)
        _write_json_atomic(
            done,
            {"stats": _stats_dict(seg_stats), "reasons": plan.reasons, "rows_in": rows_in},
        )
        stats.merge(seg_stats)
        prev_name = name
        total = plan.kept

    if one_read:
        before, gstage = segments[-2]
        assert gstage is not None
        bar.start(f"read {len(segments) - 1}: {_label([*before, gstage, *segments[-1][0]])}",
                  len(plan.codes) if plan is not None else total)  # fmt: skip
        last_plan, last_name = plan, prev_name
        # Without resume the parts serve nothing: the kept rows go straight to the output.
        sink = None
        if not resume and out_path.suffix.lower() == ".jsonl":
            out_path.parent.mkdir(parents=True, exist_ok=True)
            sink = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
        try:
            parts, part_logs, n_seen, reused, kept = run_last(
                _marked(source, last_plan), before, gstage, segments[-1][0], work, fresh=fresh,
                batch_size=batch_size, shard_rows=shard_rows, stats=stats, bar=bar,
                drop_marked=lambda batch, log: _drop_marked(batch, last_plan, last_name, log),
                on_shard=on_shard, log_drops=bool(dropped_path), sink=sink,
                reread=None if before else lambda: (r for r, c in _marked(source, plan) if not c),
            )  # fmt: skip
            if sink is not None:
                os.replace(sink, out_path)
        finally:
            if sink is not None:
                sink.unlink(missing_ok=True)
        logs.extend(part_logs)
        return _finish_run(
            stats, n_seen if rows_in is None else rows_in, parts, logs, reused, out_path,
            dropped_path, append, kept if sink is not None else None,
        )  # fmt: skip

    # The last segment, shard by shard.
    perrow = segments[-1][0]
    bar.start(
        f"read {len(segments)}: {_label(perrow) or 'write'}",
        len(plan.codes) if plan is not None else total,
    )
    parts: list[Path] = []
    n_seen = reused = 0
    rows_iter = _marked(source, plan)
    for k in itertools.count():
        part = work / f"part-{k:05d}.jsonl"
        plog = work / f"part-{k:05d}.dropped.jsonl"
        marker = work / f"part-{k:05d}.done"
        chunk = itertools.islice(rows_iter, shard_rows)
        was_reused = False
        if marker.is_file() and part.is_file() and not fresh:
            n = sum(1 for _ in chunk)  # read past it: nothing is computed again
            if not n:
                break
            meta = json.loads(marker.read_text())
            _stats_from(meta["stats"], stats)
            reused += 1
            was_reused = True
        else:
            qp = QualityPreprocessor([s.step for s in perrow], str(plog) + ".tmp")
            n = 0
            tmp = part.with_name(part.name + ".tmp")
            Path(str(plog) + ".tmp").unlink(missing_ok=True)
            with open(tmp, "wb") as f:
                for batch in _batches(chunk, batch_size):
                    n += len(batch)
                    kept = _drop_marked(batch, plan, prev_name, str(plog) + ".tmp")
                    survivors = qp(kept) if kept and perrow else kept
                    if survivors:
                        f.write(b"\n".join(_dumps(r) for r in survivors) + b"\n")
                    bar.tick(len(batch))
            if not n and k:
                tmp.unlink()
                break
            os.replace(tmp, part)
            if Path(str(plog) + ".tmp").exists():
                os.replace(str(plog) + ".tmp", plog)
            _write_json_atomic(marker, {"rows": n, "stats": _stats_dict(qp.stats)})
            _stats_from(_stats_dict(qp.stats), stats)
        parts.append(part)
        if plog.exists():
            logs.append(plog)
        n_seen += n
        if on_shard:
            on_shard(k, was_reused)
        if n < shard_rows:
            break
    bar.close()
    return _finish_run(
        stats, n_seen if rows_in is None else rows_in, parts, logs, reused, out_path,
        dropped_path, append,
    )  # fmt: skip


def _finish_run(
    stats: PipelineStats, rows_in: int, parts: list[Path], logs: list[Path], reused: int,
    out_path: Path, dropped_path: str, append: bool, rows_out: int | None = None,
) -> StreamSummary:  # fmt: skip
    """Join the parts into ``out_path`` (unless written there: ``rows_out`` given) and the
    dropped logs into ``dropped_path``."""
    if rows_out is None:
        rows_out = _join_parts(parts, out_path)
    if dropped_path:
        if not append:
            truncate_dropped_logs(dropped_path)
        with open(dropped_path, "ab") as dst:
            for log in logs:
                if log.is_file():
                    with open(log, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
    return StreamSummary(
        stats=stats,
        rows_in=rows_in,
        rows_out=rows_out,
        output=str(out_path),
        dropped=dropped_path,
        shards=len(parts),
        shards_reused=reused,
        peak_rss_mb=_peak_rss_mb(),
    )


def _label(stages: Sequence[Stage]) -> str:
    return ",".join(s.name for s in stages)


def _count(inputs: Any) -> int | None:
    from twinkle.io import count_rows

    try:
        return count_rows(inputs)
    except (OSError, ValueError):  # read_rows reports the problem with its file and line
        return None


def _spool_source(path: Path) -> Source:
    return lambda: _spool_rows(path)


def _marked(source: Source, plan: Plan | None) -> Iterator[tuple[Any, int]]:
    """``(row, code)`` for each row of ``source`` (code 0 when there is no plan)."""
    if plan is None:
        return ((row, 0) for row in source())
    codes = plan.codes
    rows = source()

    def gen() -> Iterator[tuple[Any, int]]:
        n = 0
        for n, row in enumerate(rows, 1):
            yield row, int(codes[n - 1]) if n <= len(codes) else 0
        if n != len(codes):
            raise RuntimeError(
                f"the rows changed while curating: {n} read, {len(codes)} expected; "
                "run again without resume"
            )

    return gen()


def _drop_marked(batch: list[tuple[Any, int]], plan: Plan | None, step: str, log: str) -> list[Any]:
    """The rows a global step kept; the others go to ``log`` under ``step``."""
    if plan is None:
        return [row for row, _ in batch]
    from twinkle.preprocessor.base import drop

    kept = [row for row, code in batch if not code]
    if len(kept) < len(batch):
        append_dropped(log, step, (drop(r, plan.reasons[c]) for r, c in batch if c))
    return kept


def _join_parts(parts: Sequence[Path], out: Path) -> int:
    """Join the part files into ``out`` (renamed into place); returns the rows written."""
    from twinkle.io import write_rows

    kind = out.suffix.lower()
    if kind != ".jsonl":
        return write_rows(out, (r for p in parts for r in _spool_rows(p)))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with open(tmp, "wb") as dst:
            for p in parts:  # each part ends in a newline: copy in blocks, count the lines
                with open(p, "rb") as src:
                    while block := src.read(1 << 22):
                        dst.write(block)
                        n += block.count(b"\n")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n
