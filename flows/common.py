"""What the twinkle flows share: work files, fingerprints, cache keys, task runners, tracking.

Stages hand data to each other as files, never as row lists: each task reads its input
file(s) with ``twinkle.io``, writes its output under ``<output_dir>/.work`` and returns a
small dict (path, row count, *fingerprint*). The fingerprint is a hash of the input files'
bytes and every upstream stage's settings; the flow computes it before calling a task, it
names the task's output file, and it is the task's whole cache key (``stage_key``), so
Prefect never pickles or hashes rows. A rerun with the same inputs and settings finds each
finished stage by fingerprint (state ``Cached``) and its output file in place; a stage
whose output file is gone is run again (``refresh_cache``).

Reading a file that this process has just written would cost as much as the stage
itself on 10,000 rows, so ``remember_rows`` keeps the last few written row lists in memory
(checked against the file's size and mtime); a task in another process (Ray) reads the file.

Example:
    >>> fingerprint('abc', {'filters': ['hard']}) == fingerprint('abc', {'filters': ['hard']})
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle.errors import require


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (upstream fingerprints, stage settings)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def files_fingerprint(paths: Iterable[str]) -> str:
    """Hash of the paths and the bytes of each file (a changed file changes every later stage)."""
    h = hashlib.sha256()
    for path in paths:
        # A folder (a ``save_to_disk`` dataset) stands for every file under it.
        if os.path.isdir(path):
            files = sorted(str(p) for p in Path(path).rglob("*") if p.is_file())
        else:
            files = [path]
        for file in files:
            h.update(os.path.abspath(file).encode())
            try:
                with open(file, "rb") as f:
                    for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                        h.update(chunk)
            except OSError as exc:
                h.update(f"unreadable:{type(exc).__name__}".encode())
    return h.hexdigest()[:20]


def stage_key(context: Any, parameters: dict[str, Any]) -> str:
    """Prefect ``cache_key_fn``: the task's name and its ``fp`` parameter, nothing else."""
    return f"{context.task.name}-{parameters['fp']}"


def work_path(out: str | Path, stage: str, fp: str, ext: str = ".jsonl") -> str:
    """The output file of stage ``stage`` with fingerprint ``fp``."""
    return str(Path(out) / ".work" / f"{stage}-{fp}{ext}")


_MEMO: OrderedDict[str, tuple[tuple[int, int], list[Any]]] = OrderedDict()
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 4


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def remember_rows(path: str, rows: list[Any]) -> None:
    """Keep ``rows`` (just written to ``path``) for the next task of this process."""
    stat = _stat(path)
    if stat is None:
        return
    with _MEMO_LOCK:
        _MEMO[os.path.abspath(path)] = (stat, rows)
        _MEMO.move_to_end(os.path.abspath(path))
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)


def take_rows(
    paths: list[str], keep: Callable[[Any], bool], limit: int | None
) -> tuple[list[Any], int, int]:
    """The first ``limit`` rows of ``paths`` that ``keep`` accepts (all, with no limit), how
    many rows were read to find them, and how many were left unread.

    Reading stops at the limit: 500 conversations for a rollout do not need the other 9,500
    rows of a curated file parsed (0.5 s on 23 MB). Remembered rows (``remember_rows``) are
    taken from memory. The rows left unread are counted, not decoded (``twinkle.io.count_rows``).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), 'rows.jsonl')
        >>> _ = open(path, 'w').write(''.join('{"n": %d}\\n' % n for n in range(10)))
        >>> take_rows([path], lambda r: r['n'] % 2 == 1, 2)
        ([{'n': 1}, {'n': 3}], 4, 6)
    """
    from twinkle.io import count_rows, read_rows

    hits = [_remembered(path) for path in paths]
    remembered = None if None in hits else [row for hit in hits for row in hit]
    source = iter(remembered) if remembered is not None else read_rows(paths)
    taken: list[Any] = []
    read = 0
    try:
        for row in source:
            read += 1
            if keep(row):
                taken.append(row)
                if limit is not None and len(taken) >= limit:
                    break
        else:
            return taken, read, 0
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()  # a generator left mid-file closes it now
    total = len(remembered) if remembered is not None else count_rows(paths)
    return taken, read, total - read


def _remembered(path: str) -> list[Any] | None:
    """The rows of ``path`` from memory, or None if they are not remembered (or the file
    changed since)."""
    with _MEMO_LOCK:
        hit = _MEMO.get(os.path.abspath(path))
    return hit[1] if hit is not None and hit[0] == _stat(path) else None


def read_rows_cached(paths: list[str], input_format: str | None = None) -> list[Any]:
    """Rows of ``paths`` (``twinkle.io``), from memory when this process wrote or read them last.

    ``input_format``: a named row format (``twinkle.io_formats``) every row must be in; None
    or ``"auto"`` converts rows in a known format and passes others on, so the filters drop
    them with a ``malformed_*`` reason instead of the read failing.
    """
    from twinkle.io import read_rows_list

    fmt = None if input_format in (None, "auto") else input_format
    rows: list[Any] = []
    for path in paths:
        hit = _remembered(path) if fmt is None else None
        if hit is not None:
            rows.extend(hit)
            continue
        part = read_rows_list([path], fmt)
        if fmt is None:
            remember_rows(path, part)
        rows.extend(part)
    return rows


def write_work_rows(path: str, rows: list[Any]) -> int:
    """Write a stage's rows (``twinkle.io``, format by extension) and remember them."""
    from twinkle.io import write_rows

    n = write_rows(path, rows)
    remember_rows(path, rows)
    return n


def concat_files(sources: list[str], target: str) -> None:
    """``target`` = the sources' bytes in order (JSONL shards), written beside and renamed."""
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{target}.tmp-{os.getpid()}"
    if os.path.exists(tmp):
        os.unlink(tmp)
    try:
        if len(sources) != 1:
            raise OSError("not a single file")
        # One shard: a hard link, no copy. Safe because twinkle.io never rewrites a file in
        # place (it writes beside and renames), so neither name can change the other.
        os.link(sources[0], tmp)
    except OSError:
        with open(tmp, "wb") as sink:
            for src in sources:
                if src and os.path.exists(src):
                    with open(src, "rb") as f:
                        shutil.copyfileobj(f, sink, 1 << 20)
    os.replace(tmp, target)
    if len(sources) == 1:  # same rows, new path: the next reader need not parse them again
        with _MEMO_LOCK:
            hit = _MEMO.get(os.path.abspath(sources[0]))
        if hit is not None and hit[0] == _stat(sources[0]):
            remember_rows(target, hit[1])


def count_lines(path: str) -> int:
    """Rows of a JSONL file, without parsing them."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def stage_task(task_obj: Any, out: Path, refresh: bool, *outputs: str) -> Any:
    """``task_obj`` persisting under ``out``; recomputed when ``refresh`` or an output file is
    gone."""
    missing = any(not os.path.exists(p) for p in outputs)
    return with_storage(task_obj, out, refresh or missing)


def output_dir(path: str) -> Path:
    out = Path(path).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def results_dir(out: Path) -> Path:
    """Where Prefect persists task results and cache records for this output directory."""
    return out / ".prefect-results"


def with_storage(task_obj: Any, out: Path, refresh: bool = False) -> Any:
    """``task_obj`` persisting its result under ``out`` (refresh: ignore cached results)."""
    return task_obj.with_options(
        result_storage=results_dir(out), persist_result=True, refresh_cache=refresh or None
    )


def task_runner_for(ray_address: str | None, workers: int) -> Any:
    """Ray when an address is given (prefect-ray imported lazily), else a thread pool."""
    if ray_address:
        return require("prefect_ray", "ray_address", "ray").RayTaskRunner(address=ray_address)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=workers)


def needs_ray_switch(ray_address: str | None) -> bool:
    """True inside a flow run whose task runner is not yet Ray although an address was given."""
    if not ray_address:
        return False
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None)
    return type(runner).__name__ != "RayTaskRunner"


def on_ray_if_asked(flow_obj: Any, run: Any, tracking: Any, **params: Any) -> Any | None:
    """Re-run ``flow_obj`` on Ray when ``run`` names a cluster this flow run is not on yet.

    A flow's task runner is fixed when it starts, so a flow given ``run.ray_address`` calls
    itself as a subflow with a ``RayTaskRunner`` and returns that subflow's result. The
    subflow's MLflow run is keyed by this flow run (the one a retry reuses), not by the
    subflow. Returns None when the flow should go on in this run (no address, or already
    on Ray); the flows return dicts, so None never stands for a result.

    Call it first in the flow body, with the flow's parameters besides ``tracking``/``run``
    as keywords::

        result = on_ray_if_asked(curation_flow, run, tracking, curation=curation)
        if result is not None:
            return result
    """
    if not needs_ray_switch(run.ray_address):
        return None
    tracking = tracking.model_copy(update={"run_key": tracking.run_key or flow_run_id()})
    on_ray = flow_obj.with_options(task_runner=task_runner_for(run.ray_address, run.workers))
    return on_ray(**params, tracking=tracking, run=run)


def flow_run_id() -> str:
    """The current Prefect flow run id (the default MLflow run key and trace session)."""
    from prefect.runtime import flow_run

    return str(flow_run.id or "local")


@dataclass(slots=True)
class Tracking:
    """The MLflow run a flow logs into: tracker (strings only, so it pickles), run id and key."""

    tracker: Any
    run_id: str
    run_key: str

    def stage(self, name: str) -> str:
        return self.tracker.start_stage(self.run_id, self.run_key, name)


def tracking_target(
    tracking_uri: str | None, artifact_location: str | None
) -> tuple[str, str | None]:
    """The MLflow URI and artifact root: the given URI, else ``MLFLOW_TRACKING_URI``, else
    ``./mlflow.db`` with artifacts in ``./mlruns`` (absolute paths)."""
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if tracking_uri:
        if artifact_location is None and tracking_uri.startswith("sqlite:///"):
            # Beside the database, never relative to whatever directory the flow runs in.
            artifact_location = str(
                Path(tracking_uri[len("sqlite:///") :]).resolve().parent / "mlruns"
            )
        return tracking_uri, artifact_location
    cwd = Path.cwd().resolve()
    return f"sqlite:///{cwd / 'mlflow.db'}", artifact_location or str(cwd / "mlruns")


def spans(n: int, size: int | None) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of ``size`` items over ``n`` (one range when ``size`` is None)."""
    if not size or n <= size:
        return [(0, n)]
    return [(i, min(n, i + size)) for i in range(0, n, size)]
