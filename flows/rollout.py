"""Rollout flow: provision sandboxes -> multi-turn rollouts -> scoring -> scored trajectories.

The tasks are thin: ``prepare-rollout`` writes the rollout's input file (recorded
conversations, task rows of registered environments via ``twinkle.integrations
.rollout_bridge``, OpenEnv episode prompts and those of multi-turn registry environments via
``twinkle.rollout.runner.openenv_rows``);
``run-rollouts`` calls ``twinkle.rollout.runner.RolloutRunner`` on its rows (an environment
per row, created when its trajectory starts and released when it ends, so no more sandboxes
live at once than ``concurrency``; roll out the policy, score each trajectory as it finishes) and
streams each scored trajectory to MLflow (``TraceStream``) while the others still run;
``write-trajectories`` joins the shards. Under a Ray task runner ``run-rollouts`` is mapped
over shards of ``shard_size`` rows (Prefect's ``.map``); under the thread-pool runner it is
one task, one event loop. Stages pass files (see ``flows.common``); results are persisted
and cached on the input file's hash + settings, so a rerun resumes after finished stages.

A crashed rollout resumes at the trajectory: each trajectory finished without error is
appended to a checkpoint beside the stage's output as it finishes, and the next attempt
(a task retry, or a rerun with the same inputs and settings) keeps those and rolls out only
the rest. A shard with failed trajectories is never served from the cache: a rerun
retries just its failed trajectories (the finished ones come from its checkpoint).

A run's state tells the truth. A trajectory that failed (an environment that could not be
created or died mid-rollout, an endpoint that is down, a tool that raised: ``stop_reason``
``error`` or ``api_error``) gets no reward and counts as failed; when the failed share exceeds
``max_failure_rate`` (default 0.5) the flow logs everything, marks its MLflow run FAILED
and raises ``RunFailedError`` naming the failing endpoint and the first errors (the flow
run ends Failed). Below it the failures are a warning in the Prefect log, the summary and
the artifact. Endpoints are probed once before any work (``flows.lifecycle``).

With no ``sandbox.api_url`` (and no ``E2B_API_URL``) the flow starts a local sandbox server
(``twinkle.sandbox.endpoint``) on a free loopback port with a random API key for its own
duration.

Example:
    >>> from flows.rollout import rollout_flow
    >>> rollout_flow.name
    'twinkle-rollout'
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prefect import flow, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import (
    Tracking,
    concat_files,
    count_lines,
    files_fingerprint,
    fingerprint,
    flow_run_id,
    on_ray_if_asked,
    output_dir,
    read_rows_cached,
    spans,
    stage_key,
    stage_task,
    take_rows,
    work_path,
    write_work_rows,
)
from flows.lifecycle import (
    check_before_work,
    links_markdown,
    point_latest,
    probe_endpoints,
    quiet_third_party,
    reused_stages,
    run_folder,
    run_guard,
    run_name,
    stage_log,
)
from flows.params import RolloutParams, RunParams, SandboxParams, TrackingParams
from flows.progress import StageProgress
from flows.tracking import (
    finish_tracking,
    log_rollout,
    open_trace_stream,
    start_stage,
    start_tracking,
    trace_file,
    trace_key,
)
from twinkle.core.config import env_file_tasks
from twinkle.rollout.runner import (
    RolloutConfig,
    RolloutRunner,
    RolloutStats,
    check_failure_rate,
    is_registry_spec,
    openenv_rows,
)
from twinkle.sandbox.endpoint import SandboxEndpoint
from twinkle.sandbox.endpoint import sandbox_endpoint as _sandbox_endpoint

__all__ = [
    "SandboxEndpoint",
    "check_rollout",
    "publish_rollout",
    "rollout_flow",
    "rollout_summary",
    "run_rollout",
    "sandbox_endpoint",
]

#: Settings that change no trajectory: left out of the rollout's cache keys.
_NOT_IN_KEY = {
    "conversations",
    "tasks",
    "tasks_limit",
    "dataset",
    "limit",
    "openenv",
    "openenv_episodes",
    "openenv_base_url",
    "openenv_seed",
    "openenv_env_kwargs",
    "max_failure_rate",
}


@task(name="prepare-rollout", task_run_name="prepare-rollout", cache_key_fn=stage_key)
def prepare_rollout(
    paths: list[str],
    limit: int | None,
    envs: list[str],
    tasks_limit: int | None,
    fp: str,
    out: str,
    openenv: list[str] | None = None,
    episodes: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """The rollout's input file: recorded agent conversations (rows with tool calls, the first
    ``limit``; the rows after them are counted, not read), then the rows of the environments
    in ``envs``, then ``episodes`` prompt rows per OpenEnv environment in ``openenv``, reset
    with seeds ``seed``, ``seed + 1``, ...

    A single-turn environment gives task rows (``rollout_bridge.trajectories_for``, at most
    ``tasks_limit`` each). A multi-turn one (a registry spec ``adapter/name?...`` or
    ``@envs.yaml#key`` that ``is_episode_spec``: gymnasium, gem, textarena, dialogue) gives
    episode rows (``openenv_rows``, played by ``RegistryEnv``): as many as its ``episodes``
    config key (at most ``tasks_limit``), else ``tasks_limit``, else one per task of a task
    list (dialogue scenarios), else one; episode k is reset with the entry's ``seed`` config
    key (default 0) plus k, so the rows depend only on ``envs``, never on ``seed``."""
    from twinkle.data_format import is_agent_row

    agent, read, unread = (
        take_rows(paths, lambda r: is_agent_row(r.get("messages")), limit) if paths else ([], 0, 0)
    )
    tasks: list[dict[str, Any]] = []
    if envs:
        from twinkle.integrations import rollout_bridge as bridge

        for env in envs:
            if is_registry_spec(env) and bridge.is_episode_spec(env):
                count = bridge.episode_count(env, tasks_limit)
                tasks.extend(openenv_rows([env], count, bridge.episode_seed(env)))
                continue
            items = bridge.trajectories_for(env)
            tasks.extend(items[:tasks_limit] if tasks_limit else items)
    tasks.extend(openenv_rows(list(openenv or []), episodes, seed))
    path = work_path(out, "rollout-input", fp)
    n = write_work_rows(path, agent + tasks)
    return {
        "path": path,
        "fingerprint": fp,
        "rows": n,
        "conversations": len(agent),
        "not_agent": read - len(agent),
        "unread": unread,
    }


@task(
    name="run-rollouts",
    task_run_name="run-rollouts-{shard}",
    cache_key_fn=stage_key,
    retries=1,
    retry_delay_seconds=2,
)
def run_rollouts(
    source: str,
    start: int,
    end: int,
    shard: int,
    settings: dict[str, Any],
    endpoint: dict[str, Any] | None,
    fp: str,
    out: str,
    trace: dict[str, Any] | None,
    progress: Callable[[str, int, int], Any] | None = None,
) -> dict[str, Any]:
    """Rows ``[start, end)`` of the rollout input through ``RolloutRunner``; each scored
    trajectory streamed to MLflow the moment it finishes.

    ``fp`` (input file hash + settings, computed by the flow) is the cache key and names the
    output file; ``endpoint``, ``trace`` and ``progress`` (live connections) are not part of it.
    """
    rows = read_rows_cached([source])[start:end]
    stream = open_trace_stream(trace) if trace else None
    bar = StageProgress("rollout", total=len(rows), callback=progress)  # one per shard
    runner = RolloutRunner(
        RolloutConfig.from_settings(settings),
        endpoint,
        on_done=(
            (lambda i, t: stream.put(t, t["rewards"], trace_key(t, start + i)))
            if stream is not None
            else None
        ),
        on_progress=lambda done, total: bar.advance(),
    )
    # Trajectories finished by an attempt that crashed are kept, not re-requested.
    checkpoint = work_path(out, "rollout", fp, ".partial.jsonl")
    try:
        result = runner.run(rows, checkpoint=checkpoint)
    finally:
        bar.close()  # first: a trace batch that failed raises from stream.close()
        traces = stream.close() if stream is not None else {}
    result.stats.traces = dict(traces)
    path = work_path(out, "rollout", fp)
    write_work_rows(path, result.trajectories)
    if not result.stats.failed:  # else kept: the next attempt re-requests only the failed ones
        Path(checkpoint).unlink(missing_ok=True)
    stats = result.stats.as_dict()
    if result.stats.failed:
        stage_log(
            f"rollout shard {shard}: {result.stats.failed} of {result.stats.trajectories} "
            f"trajectories failed; first: {result.stats.errors[0][:300]}",
            warning=True,
        )
    return {"path": path, "fingerprint": fp, "rows": len(result.trajectories), "stats": stats}


@task(
    name="write-trajectories",
    task_run_name="write-trajectories",
    cache_key_fn=stage_key,
    retries=2,
    retry_delay_seconds=1,
)
def write_trajectories(shards: list[str], path: str, fp: str) -> dict[str, Any]:
    """The scored trajectories file: the shards in order (JSONL bytes appended, or Parquet by
    extension)."""
    from twinkle.io import write_rows

    if path.endswith(".jsonl"):
        concat_files(shards, path)
        n = count_lines(path)
    else:
        n = write_rows(path, read_rows_cached(shards))
    return {"rows": n, "fingerprint": fp}


@contextlib.contextmanager
def sandbox_endpoint(sandbox: SandboxParams) -> Iterator[SandboxEndpoint]:
    """The sandbox API for the block (``twinkle.sandbox.endpoint.sandbox_endpoint`` with the
    flow's parameters). Open it first in a flow: a local server starts while curation runs."""
    with _sandbox_endpoint(sandbox.api_url, api_key_env=sandbox.api_key_env) as endpoint:
        yield endpoint


def _stats_of(part: dict[str, Any]) -> RolloutStats:
    """A shard's stats (a result cached by an older version has timings only)."""
    if "stats" in part:
        return RolloutStats(**{k: v for k, v in part["stats"].items() if k != "failure_rate"})
    rows = read_rows_cached([part["path"]])
    figures = {k: part.get(k, 0.0) for k in ("provision_s", "rollout_s", "scoring_s")}
    return RolloutStats.of(rows, **figures, traces=dict(part.get("traces") or {}))


def run_rollout(
    params: RolloutParams,
    run: RunParams,
    endpoint: Any,
    conversations: list[str] | None = None,
    ctx: Tracking | None = None,
    tracking: TrackingParams | None = None,
    conversations_fp: str | None = None,
    dest: Path | None = None,
    progress: Callable[[str, int, int], Any] | None = None,
) -> dict[str, Any]:
    """The rollout stages as tasks of the current flow run; returns the stage summary.

    ``conversations`` (files, with their fingerprint) come from the curation stage in the
    pipeline; standalone, ``params.conversations`` are read and hashed. With ``ctx`` each
    trajectory is traced while the others still roll out; a stage found in the cache is
    traced from its file instead (idempotent: traces already in the session are skipped).
    ``endpoint``: the sandbox API (``sandbox_endpoint``), opened by the flow before any task
    runs. ``dest``: the run's own folder for the scored file (default: the output folder).
    ``progress``: ``callable(stage, done, total)`` (in-process runs only; not under Ray).
    """
    started = time.perf_counter()
    out = output_dir(run.output_dir)
    dest = dest or out
    o, refresh = str(out), run.refresh_cache
    replay = params.policy.replay
    skipped: dict[str, str] = {}
    paths = list(conversations if conversations is not None else params.conversations)
    tasks = list(params.tasks) + env_file_tasks(params.envs)
    envs = tasks if tasks and not replay else []
    if tasks and replay:
        skipped["tasks"] = (
            "task environments need a policy model (give base_url and model); "
            "the replay policy only answers recorded conversations"
        )
    games = list(params.openenv) if params.openenv and not replay else []
    if params.openenv and replay:
        skipped["openenv"] = (
            f"OpenEnv episodes ({', '.join(params.openenv)}) need a policy model (give "
            "base_url and model); the replay policy has no recordings of them"
        )
    source = conversations_fp or files_fingerprint(paths)
    played = [games, params.openenv_episodes, params.openenv_seed] if games else []
    pfp = fingerprint("rollout-input", source, params.limit, envs, params.tasks_limit, *played)
    prepared = stage_task(prepare_rollout, out, refresh, work_path(o, "rollout-input", pfp))(
        paths,
        params.limit,
        envs,
        params.tasks_limit,
        pfp,
        o,
        games,
        params.openenv_episodes,
        params.openenv_seed,
    )
    if prepared["not_agent"]:
        skipped["conversations"] = f"{prepared['not_agent']} rows without tool calls are not re-run"
    if prepared["unread"]:
        skipped["limit"] = (
            f"{prepared['unread']} rows after the first {params.limit} conversations not read"
        )
    settings = {**params.model_dump(exclude=_NOT_IN_KEY), "replay": replay}
    if games:  # only then: the rollout's cache keys stay what they were without OpenEnv
        settings["openenv_base_url"] = params.openenv_base_url
        settings["openenv_env_kwargs"] = params.openenv_env_kwargs
    ranges = spans(prepared["rows"], params.shard_size if run.ray_address else None)
    stage = start_stage(ctx, "rollout") if ctx is not None else None
    trace = None
    if ctx is not None and tracking is not None:
        trace = {
            "tracker": ctx.tracker,
            "session": ctx.run_key,
            "run_id": stage,
            "dataset": params.dataset,
            "sample_rate": tracking.trace_sample_rate,
            "max_spans": tracking.max_spans_per_trace,
            "max_payload_chars": tracking.max_payload_chars,
        }
    fps = [fingerprint("rollout", pfp, a, b, settings) for a, b in ranges]
    api = endpoint()  # waits for a local sandbox server started with the flow, if not up yet
    futures = stage_task(
        run_rollouts, out, refresh, *[work_path(o, "rollout", f) for f in fps]
    ).map(
        unmapped(prepared["path"]),
        [a for a, _ in ranges],
        [b for _, b in ranges],
        list(range(len(ranges))),
        unmapped(settings),
        unmapped(api),
        fps,
        unmapped(o),
        unmapped(trace),
        unmapped(None if run.ray_address else progress),  # a CLI bar does not travel to Ray
    )
    futures.wait()
    rolled, parts = [], []
    for k, f in enumerate(futures):
        rolled.append(f.result())
        part = _stats_of(rolled[-1])
        if trace is not None and f.state.name == "Cached":  # traced by an earlier run
            part.traces = dict(trace_file(trace, rolled[-1]["path"], ranges[k][0], k))
        parts.append(part)
    stats = RolloutStats.merged(parts)
    path = str(dest / "trajectories" / f"{params.dataset}.scored.jsonl")
    ran = any(f.state.name != "Cached" for f in futures)  # a shard's rows may have changed
    written = stage_task(write_trajectories, out, refresh or ran, path)(
        [r["path"] for r in rolled], path, fingerprint("write", fps, path)
    )
    for r, part in zip(rolled, parts):
        if part.failed:  # never served from the cache: a rerun retries what failed
            Path(r["path"]).unlink(missing_ok=True)
    keys = ("written", "existing", "unsampled", "spans", "seconds", "tail_s")
    return {
        "scored_path": path,
        "written": written["rows"],
        "trajectories": written["rows"],
        "skipped": skipped,
        "policy": "replay" if replay else f"openai:{params.policy.model}",
        "settings": {
            **settings,
            **{k: getattr(params, k) for k in sorted(_NOT_IN_KEY - {"conversations", "dataset"})},
        },
        "provision_s": stats.provision_s,
        "rollout_s": stats.rollout_s,
        "scoring_s": stats.scoring_s,
        "seconds": time.perf_counter() - started,
        "stage_run_id": stage,
        "traces": {k: stats.traces.get(k, 0) for k in keys},
        "stats": stats,
        "sandbox_url": api.get("api_url") if isinstance(api, dict) else None,
    }


def check_rollout(result: dict[str, Any], params: RolloutParams) -> str | None:
    """The rollout's failure verdict (``check_failure_rate``): None, a warning line (logged to
    the Prefect run), or ``RunFailedError`` above ``params.max_failure_rate``."""
    warning = check_failure_rate(
        result["stats"],
        params.max_failure_rate,
        config=RolloutConfig.from_settings(params.model_dump()),
        sandbox_url=result.get("sandbox_url"),
    )
    if warning:
        stage_log(warning, warning=True)
    return warning


def publish_rollout(
    result: dict[str, Any],
    tracked: dict[str, Any],
    ctx: Tracking | None = None,
    verdict: str | None = None,
) -> None:
    """Prefect artifacts: the reward table and a markdown summary (stable keys), linked to the
    MLflow run; ``verdict``: the failure warning or error, shown first."""
    rows = []
    for t in read_rows_cached([result["scored_path"]]):
        rewards = t.get("rewards") or {}
        rows.append(
            {
                "id": str(t.get("id")),
                "stop_reason": t.get("stop_reason"),
                "turns": t.get("turns"),
                "total": rewards.get("total"),
                "outcome": t.get("reward_outcome"),
                "error": (t.get("error") or t.get("reward_error") or "")[:200],
            }
        )
    link = links_markdown(ctx) if ctx is not None else None
    create_table_artifact(
        key="rollout-rewards",
        table=rows or [{"id": "-", "total": None}],
        description="Reward and stop reason per trajectory."
        + (f" MLflow run: {ctx.run_id}." if ctx is not None else ""),
    )
    stats: RolloutStats = result["stats"]
    stops = stats.stop_reasons
    mean, rate = tracked.get("reward.total.mean"), tracked.get("pass_rate")
    stage_log(
        f"rollout: {result['trajectories']} trajectories with policy {result['policy']}, "
        f"{stats.failed} failed; mean reward {_num(mean)}, pass rate {_num(rate)}"
    )
    create_markdown_artifact(
        key="rollout-summary",
        markdown="\n".join(
            [
                "# Rollout and scoring",
                *([f"> **{verdict}**", ""] if verdict else []),
                *([link] if link else []),
                f"- policy: `{result['policy']}`; trajectories: **{result['trajectories']}**, "
                f"failed: **{stats.failed}** ({stats.failure_rate:.0%})",
                "- stop reasons: "
                f"{', '.join(f'{k}={v}' for k, v in sorted(stops.items())) or 'none'}",
                f"- mean reward (total, failed excluded): **{_num(mean)}**, "
                f"pass rate: {_num(rate)}",
                f"- traces written: {tracked.get('traces_written', 0)} "
                f"(already there: {tracked.get('traces_existing', 0)})",
                *[f"- skipped {k}: {v}" for k, v in result["skipped"].items()],
                f"- scored trajectories: `{result['scored_path']}`",
            ]
        ),
        description="Rollout summary.",
    )


def _num(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def rollout_summary(result: dict[str, Any], tracked: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "scored_path",
        "written",
        "skipped",
        "policy",
        "provision_s",
        "rollout_s",
        "scoring_s",
        "seconds",
    )
    stats: RolloutStats = result["stats"]
    return {
        **{k: result[k] for k in keep},
        "trajectories": result["trajectories"],
        "failed": stats.failed,
        "failure_rate": stats.failure_rate,
        "errors": stats.errors,
        "stop_reasons": stats.stop_reasons,
        "reward_mean": tracked.get("reward.total.mean"),
        "pass_rate": tracked.get("pass_rate"),
        "traces_written": tracked.get("traces_written", 0),
        "trace_stats": result.get("traces", {}),
    }


@flow(name="twinkle-rollout", log_prints=True)
def rollout_flow(
    rollout: RolloutParams | None = None,
    tracking: TrackingParams | None = None,
    run: RunParams | None = None,
    progress: Callable[[str, int, int], Any] | None = None,
) -> dict[str, Any]:
    """Roll out a policy in sandboxes, score the trajectories and trace them in MLflow.

    ``progress``: ``callable(stage, done, total)`` for a caller in this process (a CLI bar).
    """
    rollout, tracking, run = (
        rollout or RolloutParams(),
        tracking or TrackingParams(),
        run or RunParams(),
    )
    on_ray = on_ray_if_asked(rollout_flow, run, tracking, rollout=rollout)
    if on_ray is not None:
        return on_ray
    quiet_third_party()
    check_before_work(rollout.conversations, rollout, tracking)
    with _sandbox_endpoint(rollout.sandbox.api_url, api_key_env=rollout.sandbox.api_key_env) as ep:
        ctx = start_tracking(
            tracking,
            tracking.run_key or flow_run_id(),
            "twinkle-rollout",
            {"rollout": rollout.model_dump(), "run": run.model_dump()},
        )
        with run_guard(ctx):
            probe_endpoints(rollout, ep)
            out = output_dir(run.output_dir)
            dest = run_folder(out, run_name(tracking))
            result = run_rollout(
                rollout, run, ep, ctx=ctx, tracking=tracking, dest=dest, progress=progress
            )
            ep.release()  # a local server shuts down while the results are logged
            tracked = log_rollout(ctx, result["stage_run_id"], result)
            summary = {
                **rollout_summary(result, tracked),
                "mlflow_run_id": ctx.run_id,
                "run_dir": str(dest),
                "reused": reused_stages(),
            }
            close_run(ctx, result, tracked, rollout, summary)
            point_latest(out, dest)
    return summary


def close_run(
    ctx: Any,
    result: dict[str, Any],
    tracked: dict[str, Any],
    params: RolloutParams,
    summary: dict[str, Any],
) -> None:
    """Judge the rollout against ``max_failure_rate``, publish the artifacts and end the
    MLflow run: FAILED (and re-raised) over the threshold, with a warning under it."""
    try:
        verdict = check_rollout(result, params)
    except Exception as exc:
        publish_rollout(result, tracked, ctx, verdict=f"Failed: {exc}")
        stage = [result["stage_run_id"]] if result.get("stage_run_id") else []
        finish_tracking(ctx, {**summary, "error": str(exc)}, status="FAILED", failed_stages=stage)
        raise
    if verdict:  # after the curation's own warning, if any
        summary["warning"] = "; ".join(w for w in (summary.get("warning"), verdict) if w)
    publish_rollout(result, tracked, ctx, verdict=verdict)
    finish_tracking(ctx, summary)
