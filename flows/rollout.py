"""Rollout flow: provision sandboxes -> multi-turn rollouts -> scoring -> scored trajectories.

Library calls per task: ``AgentEnv`` + ``EnvTool`` + ``ToolManager`` (one sandbox per
trajectory), ``APIMultiTurnRollout`` over ``ReplayAPI`` (recorded assistant turns, the
default) or ``OpenAI`` (when ``policy.base_url`` and ``policy.model`` are given),
``twinkle.integrations.rollout_bridge`` for task environments, and ``flows.rewards`` for
the replay-fidelity reward of re-run conversations. Trajectories run in shards, one task
per shard, so the task runner (threads, or Ray) spreads them out; every shard result is
persisted and cached on its inputs, so a rerun resumes after the last finished shard.

Failures are data: a sandbox that cannot be created, an endpoint that is down, a tool
that fails, each marks only the trajectories concerned (``stop_reason`` ``error`` or
``api_error``, ``error`` holding the reason), and the flow completes.

With no ``sandbox.api_url`` (and no ``E2B_API_URL``) the flow starts
``twinkle.sandbox.SandboxServer`` on a free loopback port with a random API key for its own
duration.

Example:
    >>> from flows.rollout import rollout_flow
    >>> rollout_flow.name
    'twinkle-rollout'
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

from prefect import flow, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.utilities.annotations import quote

from flows.common import (
    STAGE_CACHE,
    chunks,
    files_fingerprint,
    fingerprint,
    flow_run_id,
    needs_ray_switch,
    output_dir,
    task_runner_for,
    with_storage,
)
from flows.params import RolloutParams, RunParams, SandboxParams, TrackingParams
from flows.common import Tracking
from flows.tracking import finish_tracking, log_rollout, start_stage, start_tracking, trace_trajectories


@task(name="load-conversations", task_run_name="load-conversations", cache_policy=NO_CACHE, persist_result=False)
def load_conversations(paths: list[str], source: str) -> dict[str, Any]:
    """Recorded agent conversations (rows with tool calls) to re-run against live tools."""
    from twinkle.data_format import is_agent_row
    from twinkle.io import read_rows_list

    rows = read_rows_list(paths) if paths else []
    agent = [r for r in rows if is_agent_row(r.get("messages"))]
    return {"rows": agent, "fingerprint": fingerprint("conversations", source), "not_agent": len(rows) - len(agent)}


@task(name="load-tasks", task_run_name="load-tasks", cache_policy=STAGE_CACHE)
def load_tasks(envs: list[str], limit: int | None) -> dict[str, Any]:
    """Task rows from registered environments (``rollout_bridge.trajectories_for``)."""
    from twinkle.integrations.rollout_bridge import trajectories_for

    rows: list[dict[str, Any]] = []
    for env in envs:
        items = trajectories_for(env)
        rows.extend(items[:limit] if limit else items)
    return {"rows": rows, "fingerprint": fingerprint("tasks", envs, limit)}


@task(name="provision-sandboxes", task_run_name="provision-sandboxes", cache_policy=NO_CACHE, persist_result=False)
def provision_sandboxes(n: int, endpoint: dict[str, Any] | None, sandbox: SandboxParams,
                        workers: int) -> list[tuple[Any, str | None]]:
    """One fresh sandbox (``AgentEnv``) per trajectory, created concurrently; (env, error) pairs."""
    if endpoint is None or endpoint.get("error"):
        reason = (endpoint or {}).get("error") or "no sandbox endpoint"
        return [(None, reason)] * n
    from twinkle.envs.agentenv import AgentEnv

    def one(_: int) -> tuple[Any, str | None]:
        env = AgentEnv(template=sandbox.template, api_url=endpoint["api_url"], api_key=endpoint["api_key"],
                       sandbox_timeout=sandbox.sandbox_timeout, command_timeout=sandbox.tool_timeout_s)
        try:
            env.reset()
            return env, None
        except Exception as exc:  # this trajectory fails with the reason; the others go on
            env.close()
            return None, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, min(n, workers))) as pool:
        return list(pool.map(one, range(n)))


def _policy_api(settings: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """The chat API and the prompts to roll out: replay of ``rows`` or an OpenAI endpoint."""
    from twinkle.protocol.replay import ReplayAPI

    policy = settings["policy"]
    if not (policy.get("base_url") and policy.get("model")):
        return ReplayAPI.from_rows(rows)
    from twinkle.protocol.openai import OpenAI

    key = os.environ.get(policy["api_key_env"]) if policy.get("api_key_env") else None
    api = OpenAI(policy["model"], api_key=key or "EMPTY", base_url=policy["base_url"], max_retries=2)
    return api, [ReplayAPI.prompt_of(r) for r in rows]


@task(name="run-rollouts", task_run_name="run-rollouts-{shard}", cache_policy=STAGE_CACHE,
      retries=1, retry_delay_seconds=2)
def run_rollouts(rows: list[dict[str, Any]], fp: str, shard: int, settings: dict[str, Any],
                 endpoint: dict[str, Any] | None) -> dict[str, Any]:
    """Provision one sandbox per trajectory, run the multi-turn rollouts, close the sandboxes.

    ``fp`` is this result's fingerprint (inputs + settings, computed by the flow).
    """
    from twinkle.data_format import SamplingParams
    from twinkle.envs.env_tool import EnvTool
    from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
    from twinkle.tools import ToolManager

    started = time.perf_counter()
    api, prompts = _policy_api(settings, rows)
    sandbox = SandboxParams(**settings["sandbox"])
    envs = provision_sandboxes(len(prompts), endpoint, sandbox, settings["concurrency"])
    provisioned = time.perf_counter()
    try:
        ready = [i for i, (env, _) in enumerate(envs) if env is not None]
        policy = settings["policy"]
        rollout = APIMultiTurnRollout(
            api, tool_manager=[ToolManager(EnvTool.from_env(envs[i][0])) for i in ready],
            sampling_params=SamplingParams(temperature=policy["temperature"], max_tokens=policy["max_tokens"]),
            max_turns=settings["max_turns"], concurrency=settings["concurrency"],
            tool_timeout_s=sandbox.tool_timeout_s, request_timeout_s=policy["request_timeout_s"],
        )
        outputs = rollout([prompts[i] for i in ready]) if ready else []
    finally:
        for env, _ in envs:
            if env is not None:
                env.close()
    by_index = dict(zip(ready, outputs))
    trajectories = []
    for i, prompt in enumerate(prompts):
        if i in by_index:
            trajectories.append(by_index[i])
        else:
            trajectories.append({**prompt, "turns": 0, "stop_reason": "error", "truncated": True,
                                 "turn_log": [], "error": f"SandboxError: {envs[i][1]}"})
    return {"trajectories": trajectories, "fingerprint": fp,
            "provision_s": provisioned - started, "rollout_s": time.perf_counter() - provisioned}


@task(name="score-trajectories", task_run_name="score-trajectories-{shard}", cache_policy=STAGE_CACHE)
def score_trajectories(rolled: dict[str, Any], recorded: list[dict[str, Any]],
                       fp: str, shard: int, replay: bool) -> dict[str, Any]:
    """Rewards: task environments via the bridge; replay fidelity for re-run conversations."""
    from twinkle.data_format import user_data_get
    from twinkle.integrations.rollout_bridge import score_trajectories as bridge_score

    from flows.rewards import replay_fidelity

    started = time.perf_counter()
    scored = [dict(t) for t in rolled["trajectories"]]
    task_idx = [i for i, t in enumerate(scored) if user_data_get(t.get("user_data"), "env")]
    for i, score in zip(task_idx, bridge_score([scored[i] for i in task_idx])):
        scored[i].update(rewards=score["rewards"], reward_outcome=score["outcome"], reward_error=score["error"])
    for i, traj in enumerate(scored):
        if i in task_idx:
            continue
        if replay:
            score = replay_fidelity(recorded[i], traj)
        else:
            score = {"rewards": {}, "outcome": "unscored",
                     "error": "a conversation rolled out by a live policy has no reward function"}
        traj.update(rewards=score["rewards"], reward_outcome=score["outcome"], reward_error=score["error"])
    return {"trajectories": scored, "fingerprint": fp, "seconds": time.perf_counter() - started}


@task(name="write-trajectories", task_run_name="write-trajectories", cache_policy=STAGE_CACHE, retries=2, retry_delay_seconds=1)
def write_trajectories(trajectories: list[dict[str, Any]], upstream: str, path: str) -> dict[str, Any]:
    """Write the scored trajectories (JSONL, or Parquet by extension)."""
    from twinkle.io import write_rows

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return {"rows": write_rows(path, trajectories), "fingerprint": fingerprint("write", upstream, path)}


@contextlib.contextmanager
def sandbox_endpoint(sandbox: SandboxParams) -> Iterator[dict[str, Any]]:
    """The sandbox API: ``api_url``, else ``E2B_API_URL``, else a local server started for the block."""
    api_url = sandbox.api_url or os.environ.get("E2B_API_URL")
    if api_url:
        yield {"api_url": api_url, "api_key": os.environ.get(sandbox.api_key_env) or "local"}
        return
    try:
        from twinkle.sandbox import SandboxServer

        server = SandboxServer(port=0, api_key=secrets.token_urlsafe(24)).start()
    except Exception as exc:  # no bubblewrap, no sandbox package: every trajectory fails with why
        yield {"error": f"local sandbox server unavailable: {type(exc).__name__}: {exc}"}
        return
    try:
        yield {"api_url": server.url, "api_key": server.api_key}
    finally:
        server.stop()


def run_rollout(params: RolloutParams, run: RunParams, conversations: list[dict[str, Any]] | None = None,
                conversations_fp: str | None = None, ctx: Tracking | None = None,
                tracking: TrackingParams | None = None) -> dict[str, Any]:
    """The rollout stages as tasks of the current flow run; returns the stage summary.

    ``conversations`` (with their fingerprint) come from the curation stage in the pipeline;
    standalone, ``params.conversations`` files are read. With ``ctx`` each shard is traced
    to MLflow as soon as it is scored, while later shards still roll out.
    """
    started = time.perf_counter()
    out = output_dir(run.output_dir)
    store = dict(out=out, refresh=run.refresh_cache)
    replay = params.policy.replay
    skipped: dict[str, str] = {}
    if conversations is None:
        loaded = load_conversations(params.conversations, files_fingerprint(params.conversations))
        conversations, conversations_fp = loaded["rows"], loaded["fingerprint"]
        not_agent = loaded["not_agent"]
    else:
        from twinkle.data_format import is_agent_row

        agent = [r for r in conversations if is_agent_row(r.get("messages"))]
        not_agent = len(conversations) - len(agent)
        conversations = agent
    if not_agent:
        skipped["conversations"] = f"{not_agent} rows without tool calls are not re-run"
    if params.limit is not None and len(conversations) > params.limit:
        skipped["limit"] = f"{len(conversations) - params.limit} conversations over limit={params.limit} not re-run"
        conversations = conversations[:params.limit]
        conversations_fp = fingerprint(conversations_fp, "limit", params.limit)
    rows = list(conversations)
    upstream = [conversations_fp]
    if params.tasks and replay:
        skipped["tasks"] = ("task environments need a policy model (give base_url and model); "
                            "the replay policy only answers recorded conversations")
    elif params.tasks:
        tasks = with_storage(load_tasks, **store)(params.tasks, params.tasks_limit)
        rows += tasks["rows"]
        upstream.append(tasks["fingerprint"])
    settings = params.model_dump(exclude={"conversations", "tasks", "tasks_limit", "dataset", "limit"})
    base_fp = fingerprint(*upstream)
    shards = chunks(rows, params.shard_size)
    offsets = [i * params.shard_size for i in range(len(shards))]
    stage = start_stage(ctx, "rollout") if ctx is not None else None
    rollout_task, score_task = with_storage(run_rollouts, **store), with_storage(score_trajectories, **store)
    with sandbox_endpoint(params.sandbox) as endpoint:
        # One chain per shard (rollout -> scoring -> tracing); the task runner runs chains side by
        # side. Fingerprints are computed here so each task's cache key is known before it runs.
        rfps = [fingerprint("rollout", base_fp, k, settings) for k in range(len(shards))]
        rolled = [rollout_task.submit(quote(shard), rfps[k], k, settings, endpoint) for k, shard in enumerate(shards)]
        scored = [score_task.submit(r, quote(shard), fingerprint("score", rfps[k]), k, replay)
                  for k, (r, shard) in enumerate(zip(rolled, shards))]
        traced = []
        if ctx is not None:
            traced = [trace_trajectories.submit(ctx, stage, sc, tracking, params.dataset, k, offsets[k])
                      for k, sc in enumerate(scored)]
        scored = [s.result() for s in scored]
        traced = [t.result() for t in traced]
    rolled = [r.result() for r in rolled]
    trajectories = [t for s in scored for t in s["trajectories"]]
    path = str(out / "trajectories" / f"{params.dataset}.scored.jsonl")
    written = with_storage(write_trajectories, **store)(quote(trajectories),
                                                        fingerprint(*[s["fingerprint"] for s in scored]), path)
    traces = {k: sum(t[k] for t in traced) for k in ("written", "existing", "unsampled", "spans", "seconds")}
    return {
        "trajectories": trajectories, "scored_path": path, "written": written["rows"],
        "skipped": skipped, "policy": "replay" if replay else f"openai:{params.policy.model}",
        "settings": {**settings, "tasks": params.tasks, "tasks_limit": params.tasks_limit},
        "provision_s": sum(r["provision_s"] for r in rolled), "rollout_s": sum(r["rollout_s"] for r in rolled),
        "scoring_s": sum(s["seconds"] for s in scored), "seconds": time.perf_counter() - started,
        "stage_run_id": stage, "traces": traces,
    }


def publish_rollout(result: dict[str, Any], tracked: dict[str, Any]) -> None:
    """Prefect artifacts: the reward table and a markdown summary (stable keys)."""
    rows = []
    for t in result["trajectories"]:
        rewards = t.get("rewards") or {}
        rows.append({"id": str(t.get("id")), "stop_reason": t.get("stop_reason"), "turns": t.get("turns"),
                     "total": rewards.get("total"), "outcome": t.get("reward_outcome"),
                     "error": (t.get("error") or t.get("reward_error") or "")[:200]})
    create_table_artifact(key="rollout-rewards", table=rows or [{"id": "-", "total": None}],
                          description="Reward and stop reason per trajectory.")
    stops = tracked.get("stop_reasons", {})
    create_markdown_artifact(key="rollout-summary", markdown="\n".join([
        "# Rollout and scoring",
        f"- policy: `{result['policy']}`; trajectories: **{len(result['trajectories'])}**",
        f"- stop reasons: {', '.join(f'{k}={v}' for k, v in sorted(stops.items())) or 'none'}",
        f"- mean reward (total): **{tracked.get('reward.total.mean', 'n/a')}**, pass rate: {tracked.get('pass_rate', 'n/a')}",
        f"- traces written: {tracked.get('traces_written', 0)} (already there: {tracked.get('traces_existing', 0)})",
        *[f"- skipped {k}: {v}" for k, v in result["skipped"].items()],
        f"- scored trajectories: `{result['scored_path']}`",
    ]), description="Rollout summary.")


def rollout_summary(result: dict[str, Any], tracked: dict[str, Any]) -> dict[str, Any]:
    keep = ("scored_path", "written", "skipped", "policy", "provision_s", "rollout_s", "scoring_s", "seconds")
    return {**{k: result[k] for k in keep},
            "trajectories": len(result["trajectories"]),
            "failed": tracked.get("failed", 0),
            "stop_reasons": tracked.get("stop_reasons", {}),
            "reward_mean": tracked.get("reward.total.mean"),
            "pass_rate": tracked.get("pass_rate"),
            "traces_written": tracked.get("traces_written", 0),
            "trace_stats": result.get("traces", {})}


@flow(name="twinkle-rollout", log_prints=True)
def rollout_flow(rollout: RolloutParams | None = None, tracking: TrackingParams | None = None,
                 run: RunParams | None = None) -> dict[str, Any]:
    """Roll out a policy in sandboxes, score the trajectories and trace them in MLflow."""
    rollout, tracking, run = rollout or RolloutParams(), tracking or TrackingParams(), run or RunParams()
    if needs_ray_switch(run.ray_address):
        return rollout_flow.with_options(task_runner=task_runner_for(run.ray_address, run.workers))(
            rollout, tracking, run)
    ctx = start_tracking(tracking, tracking.run_key or flow_run_id(), "twinkle-rollout",
                         {"rollout": rollout.model_dump(), "run": run.model_dump()})
    result = run_rollout(rollout, run, ctx=ctx, tracking=tracking)
    tracked = log_rollout(ctx, result["stage_run_id"], quote(result))
    publish_rollout(result, tracked)
    summary = rollout_summary(result, tracked)
    finish_tracking(ctx, {**summary, "mlflow_run_id": ctx.run_id})
    return {**summary, "mlflow_run_id": ctx.run_id}
