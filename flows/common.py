"""What the twinkle flows share: output layout, fingerprints, task runners, tracking context.

Stages hand rows to each other in memory (Prefect futures), and each task's result is
persisted under ``<output_dir>/.prefect-results`` with ``cache_policy=INPUTS``. The rows
themselves are left out of the cache key; instead every stage result carries a
*fingerprint*: a hash of its input files' bytes and of every upstream stage's
configuration. A rerun with the same inputs and settings finds each finished stage by
that fingerprint and loads its persisted result instead of recomputing it, and hashing a
few hundred bytes costs nothing next to hashing 10,000 rows.

Example:
    >>> fingerprint('abc', {'filters': ['hard']}) == fingerprint('abc', {'filters': ['hard']})
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from prefect.cache_policies import INPUTS

#: Cache on inputs, but not on rows (large) or live endpoints (contain per-run secrets).
STAGE_CACHE = INPUTS - "rows" - "endpoint" - "recorded" - "trajectories" - "rolled"


def fingerprint(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (upstream fingerprints, stage settings)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def files_fingerprint(paths: Iterable[str]) -> str:
    """Hash of the paths and the bytes of each file (a changed file changes every later stage)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.abspath(path).encode())
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            h.update(f"unreadable:{type(exc).__name__}".encode())
    return h.hexdigest()[:20]


def output_dir(path: str) -> Path:
    out = Path(path).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def results_dir(out: Path) -> Path:
    """Where Prefect persists task results and cache records for this output directory."""
    return out / ".prefect-results"


def with_storage(task_obj: Any, out: Path, refresh: bool = False) -> Any:
    """``task_obj`` persisting its result under ``out`` (refresh: ignore cached results)."""
    return task_obj.with_options(result_storage=results_dir(out), persist_result=True,
                                 refresh_cache=refresh or None)


def task_runner_for(ray_address: str | None, workers: int) -> Any:
    """Ray when an address is given (prefect-ray imported lazily), else a thread pool."""
    if ray_address:
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as exc:
            raise ImportError("ray_address needs the 'ray' extra: pip install 'twinkle[ray]'") from exc
        return RayTaskRunner(address=ray_address)
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


def tracking_target(tracking_uri: str | None, artifact_location: str | None) -> tuple[str, str | None]:
    """The MLflow URI and artifact root: the given URI, else ``MLFLOW_TRACKING_URI``, else
    ``./mlflow.db`` with artifacts in ``./mlruns`` (absolute paths)."""
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if tracking_uri:
        if artifact_location is None and tracking_uri.startswith("sqlite:///"):
            # Beside the database, never relative to whatever directory the flow runs in.
            artifact_location = str(Path(tracking_uri[len("sqlite:///"):]).resolve().parent / "mlruns")
        return tracking_uri, artifact_location
    cwd = Path.cwd().resolve()
    return f"sqlite:///{cwd / 'mlflow.db'}", artifact_location or str(cwd / "mlruns")


def chunks(rows: list[Any], size: int) -> list[list[Any]]:
    return [rows[i:i + size] for i in range(0, len(rows), size)] or [[]]
