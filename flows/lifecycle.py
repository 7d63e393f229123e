"""A flow run's life around its stages: checks before work, the run's own output folder,
the MLflow run's end state, and the links and log lines that tie Prefect and MLflow together.

* ``check_before_work``: inputs, endpoint URLs and the tracking URI, before any task runs
  (``PreflightError``, one line per problem: the flow run fails in seconds, with no MLflow
  run); ``probe_endpoints`` asks the policy, sandbox and OpenEnv endpoints once, after the
  MLflow run exists, so a dead endpoint leaves a FAILED run that says why.
* ``run_guard``: the MLflow run (and its stage runs) ends FAILED when the flow body raises,
  KILLED when it is interrupted; on entry it closes runs of the same run key left RUNNING
  by an earlier attempt that died, and runs of any key whose process on this host is gone
  (``kill -9``, a lost machine's power): each run carries its owner as ``twinkle.owner``.
* ``run_folder``: ``<output>/<run name>/`` for the run's outputs, and ``<output>/latest``
  pointing at the newest finished one; stage caches stay shared in ``<output>/.work``.
* ``mlflow_run_url``, ``stage_log``, ``reused_stages``: the MLflow run's UI address for the
  Prefect artifacts, stage lines in the Prefect run log, and the stages served from cache.
* ``temporary_api_settings``: the Prefect settings of a flow run on the temporary API that
  ``twinkle run`` starts itself (no flow-run heartbeats).

Example:
    >>> from flows.lifecycle import mlflow_run_url
    >>> mlflow_run_url('http://127.0.0.1:5000', '1', 'abc')
    'http://127.0.0.1:5000/#/experiments/1/runs/abc'
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from twinkle.preflight import PreflightError, check_inputs, check_tracking_uri, check_url, probe

#: Where ``mlflow server`` (README, infra/mlflow/) serves a local store's UI.
LOCAL_UI = os.environ.get("TWINKLE_MLFLOW_UI", "http://127.0.0.1:5000")

_logger = logging.getLogger("twinkle.flows")


#: Third-party loggers whose routine lines would bury the stage lines in the Prefect run log
#: (Presidio says "Recognizer not added" for each language it skips, ~11 per run).
QUIET_LOGGERS = {"presidio-analyzer": logging.ERROR, "alembic": logging.WARNING}


def quiet_third_party() -> None:
    """Raise the level of chatty third-party loggers (``QUIET_LOGGERS``)."""
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def temporary_api_settings(temporary: bool | None = None) -> Iterator[None]:
    """Prefect settings for flow runs on a temporary API, one that lives and dies with this
    process (``twinkle run`` without ``PREFECT_API_URL``): no flow-run heartbeats.

    Heartbeats let a lasting Prefect server mark a run Crashed when its process dies; a
    temporary API dies with the process, so no one would watch them. Their thread sleeps in
    1 s steps and the engine joins it when the flow ends, so every flow run finishes up to
    1 s late (0.7 s measured). Deployment runs, on a real server, keep them.

    ``temporary``: whether the API is temporary (default: no ``PREFECT_API_URL`` is set; a
    test harness's API is one too, though it sets the variable).

    Example:
        >>> from prefect.settings import get_current_settings
        >>> with temporary_api_settings(temporary=True):
        ...     get_current_settings().flows.heartbeat_frequency is None
        True
    """
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        temporary_settings,
    )

    if temporary is None:
        temporary = not PREFECT_API_URL.value()
    if not temporary:
        yield
        return
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def check_before_work(
    inputs: list[str] | None = None, rollout: Any = None, tracking: Any = None
) -> None:
    """Raise ``PreflightError`` (what to fix, one line each) for missing inputs, malformed
    endpoint URLs and an unusable tracking URI; nothing is started before it."""
    problems = check_inputs(inputs or [])
    if rollout is not None:
        for url, what in (
            (rollout.policy.base_url, "policy base_url"),
            (rollout.sandbox.api_url, "sandbox api_url"),
            (rollout.openenv_base_url, "openenv_base_url"),
        ):
            problem = check_url(url, what)
            if problem:
                problems.append(problem)
    if tracking is not None:
        from flows.common import tracking_target

        problem = check_tracking_uri(tracking_target(tracking.tracking_uri, None)[0])
        if problem:
            problems.append(problem)
    if problems:
        raise PreflightError(problems)


def probe_endpoints(rollout: Any, endpoint: Any) -> None:
    """Ask each endpoint the rollout will use once; ``PreflightError`` naming the URL and its
    status for one that is down (or refuses the key). A local sandbox server started by the
    run is not probed: it reports its own failure per trajectory."""
    problems = []
    policy = rollout.policy
    if not policy.replay:
        key = os.environ.get(policy.api_key_env) if policy.api_key_env else None
        problem = probe(policy.base_url.rstrip("/") + "/models", "policy endpoint", api_key=key)
        if problem:
            problems.append(f"{problem}: start the model server or fix --base-url")
    if not getattr(endpoint, "local", True):
        api = endpoint()
        # An E2B-style API answers a bare GET (no X-API-Key) with 401: reachable is enough.
        problem = probe(api["api_url"], "sandbox endpoint", check_key=False)
        if problem:
            problems.append(f"{problem}: start the sandbox server or fix sandbox api_url")
    if rollout.openenv and rollout.openenv_base_url and not policy.replay:
        problem = probe(rollout.openenv_base_url.rstrip("/") + "/health", "OpenEnv server")
        if problem:
            problems.append(problem)
    if problems:
        raise PreflightError(problems)


def close_runs(ctx: Any, status: str, *, keep: str | None = None) -> int:
    """End the runs of ``ctx``'s run key (the run and its stage runs) still RUNNING, but
    ``keep``; returns how many. Public ``MlflowClient`` calls only."""
    return _close_key(ctx.tracker, ctx.run_key, status, keep)


def _close_key(tracker: Any, run_key: str, status: str, keep: str | None = None) -> int:
    client, key = tracker.client, run_key.replace("'", "\\'")
    found = 0
    for tag in (key, f"{key}#stage"):
        runs = client.search_runs(
            [tracker.experiment_id],
            filter_string=f"tags.`twinkle.run_key` = '{tag}' and attributes.status = 'RUNNING'",
            max_results=1000,
        )
        for r in runs:
            if r.info.run_id != keep:
                client.set_terminated(r.info.run_id, status=status)
                found += 1
    return found


def owner_token(pid: int | None = None) -> str:
    """``host:pid:start`` of a process (``start``: its start time in clock ticks from
    ``/proc``, so a recycled pid does not pass for the owner; empty where there is no
    ``/proc``).

    Example:
        >>> owner_token().count(':') >= 2
        True
    """
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def _start_ticks(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The command name (field 2) may hold spaces and ")", so split after its last ")".
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def owner_gone(token: str) -> bool:
    """Whether the process named by ``owner_token`` is known to have ended: only a process
    on this host can be checked, so one elsewhere is never called gone.

    Example:
        >>> owner_gone(owner_token())
        False
    """
    host, _, rest = token.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return bool(start) and _start_ticks(int(pid)) != start


def close_orphans(ctx: Any) -> int:
    """End, KILLED, the RUNNING runs in ``ctx``'s experiment (and their stage runs) whose
    owner process on this host has ended without closing them; returns how many."""
    tracker = ctx.tracker
    client = tracker.client
    host = socket.gethostname().replace("'", "\\'")
    runs = client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`twinkle.owner` LIKE '{host}:%' and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    found = 0
    for r in runs:
        token = r.data.tags.get("twinkle.owner", "")
        if r.info.run_id == ctx.run_id or not owner_gone(token):
            continue
        client.set_tag(r.info.run_id, "twinkle.error", f"its process ({token}) ended mid-run")
        client.set_terminated(r.info.run_id, status="KILLED")
        found += 1
        key = r.data.tags.get("twinkle.run_key")
        if key:
            found += _close_key(tracker, key, "KILLED")
    return found


@contextlib.contextmanager
def run_guard(ctx: Any) -> Iterator[None]:
    """The MLflow run of ``ctx`` (and its stage runs) ends FAILED if the block raises, KILLED
    if it is interrupted (and the rollouts in flight in this process are cancelled); stale
    runs of an earlier attempt, and runs whose process died, are closed on entry."""
    url = mlflow_run_url(ctx.tracker.tracking_uri, ctx.tracker.experiment_id, ctx.run_id)
    stage_log(f"MLflow run {ctx.run_id}: {url}")
    try:
        ctx.tracker.set_tags(ctx.run_id, {"twinkle.owner": owner_token()})
        stale = close_runs(ctx, "KILLED", keep=ctx.run_id) + close_orphans(ctx)
        if stale:
            stage_log(f"closed {stale} MLflow run(s) an earlier attempt left RUNNING")
    except Exception as exc:  # noqa: BLE001 - closing stale runs is housekeeping, not the run
        stage_log(f"could not close stale MLflow runs: {exc}", warning=True)
    try:
        yield
    except BaseException as exc:
        status = "FAILED" if isinstance(exc, Exception) else "KILLED"
        if status == "KILLED":
            # Interrupted (Prefect's TerminationSignal on SIGTERM, Ctrl-C): cancel the
            # rollouts in flight now. They run in the task runner's worker threads, which
            # the flow engine waits for on its way out: the whole rollout long, otherwise.
            from twinkle.rollout.runner import stop_all

            stop_all()
        try:
            ctx.tracker.set_tags(ctx.run_id, {"twinkle.error": f"{type(exc).__name__}: {exc}"})
            ctx.tracker.end_run(ctx.run_id, status)
            close_runs(ctx, status)
        except Exception as inner:  # noqa: BLE001 - the original error is the one to report
            _logger.warning("could not mark MLflow run %s %s: %s", ctx.run_id, status, inner)
        raise


_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")


def run_name(tracking: Any) -> str:
    """The run's folder name: the run key when given (a rerun of the key reuses the folder),
    else the Prefect flow run's name."""
    from prefect.runtime import flow_run

    name = tracking.run_key or flow_run.name or flow_run.id or "local"
    return _NAME_RE.sub("-", str(name)).strip("-.") or "run"


def run_folder(out: Path, name: str) -> Path:
    """``out/name``, created."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def point_latest(out: Path, folder: Path) -> None:
    """``out/latest`` -> ``folder`` (a relative symlink, replaced atomically; a text file
    naming the folder where symlinks are not allowed)."""
    link, tmp = out / "latest", out / f".latest-{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(folder.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:
        with contextlib.suppress(OSError):
            if link.is_symlink():
                link.unlink()
        (out / "latest").write_text(folder.name + "\n")


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI address of a run: on the tracking server itself, or for a local store
    on the review server (``mlflow server``, ``TWINKLE_MLFLOW_UI``, default port 5000)."""
    base = tracking_uri if tracking_uri.startswith(("http://", "https://")) else LOCAL_UI
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def links_markdown(ctx: Any) -> str:
    """The markdown line that links a Prefect artifact to the MLflow run."""
    url = mlflow_run_url(ctx.tracker.tracking_uri, ctx.tracker.experiment_id, ctx.run_id)
    return f"- MLflow run: `{ctx.run_id}` ([open in MLflow]({url}))"


def stage_log(message: str, *, warning: bool = False) -> None:
    """A line in the Prefect run log (the flow or task run in context), else this logger."""
    try:
        from prefect.logging import get_run_logger

        logger = get_run_logger()
    except Exception:  # noqa: BLE001 - outside a run (tests, scripts): plain logging
        logger = _logger
    (logger.warning if warning else logger.info)(message)


def reused_stages(curated: dict[str, Any] | None = None) -> list[str]:
    """Names of this flow run's task runs served from the cache (state ``Cached``), and the
    curation's finished shards when ``curated`` (``run_curation``'s summary) says it resumed
    from them (a run with its own folder is never served the curation from the cache)."""
    names = _cached_task_runs()
    if curated and curated.get("shards_reused") and "curate-stream" not in names:
        names.append(f"curate-stream shards {curated['shards_reused']}")
    return names


def _cached_task_runs() -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.runtime import flow_run

    if not flow_run.id:
        return []
    try:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id]))
            )
    except Exception as exc:  # noqa: BLE001 - a missing list must not fail a finished run
        _logger.debug("could not list cached stages: %s", exc)
        return []
    return sorted({r.name for r in runs if r.state is not None and r.state.name == "Cached"})
