"""Rollout flow: provision sandboxes -> multi-turn rollouts -> scoring -> scored trajectories.

Library calls per task: ``AgentEnv`` + ``EnvTool`` + ``ToolManager`` (one sandbox per
trajectory), ``APIMultiTurnRollout`` over ``ReplayAPI`` (recorded assistant turns, the
default) or ``OpenAI`` (when ``policy.base_url`` and ``policy.model`` are given),
``twinkle.integrations.rollout_bridge`` for task environments and
``twinkle.integrations.replay`` for the replay-fidelity reward of re-run conversations,
and ``OpenEnv`` / ``OpenEnvClient`` (one environment per episode, in-process or on an
OpenEnv server) whose cumulative ``episode_reward`` is the reward of an OpenEnv episode.
The rollout is one task (one event loop; shards only under a Ray task runner); each
trajectory is scored as it finishes and streamed to MLflow (``TraceStream``) while the
others still run. Stages pass files (see ``flows.common``); results are persisted and
cached on the input file's hash + settings, so a rerun resumes after the finished stages.

Failures are data: a sandbox or OpenEnv environment that cannot be created, an endpoint
that is down, a tool that fails, each marks only the trajectories concerned
(``stop_reason`` ``error`` or ``api_error``, ``error`` holding the reason), and the flow
completes.

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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

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
    work_path,
    write_work_rows,
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

#: The system prompt of an OpenEnv episode; the user message adds the env's first observation.
OPENENV_SYSTEM = (
    "You are an agent playing an interactive environment through its tools. Call one tool "
    "at a time, read each observation, and stop calling tools once the episode is over."
)


def openenv_rows(names: list[str], episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """Prompt rows of OpenEnv episodes: ``user_data`` names the env and the episode's reset seed,
    ``seed + k`` for episode k (so a rerun replays the same episodes, another ``seed`` draws new
    ones), and so does the row id; the env's first observation and its tool schemas are added
    when the env is provisioned (``provision_openenvs``)."""
    from twinkle.data_format import pack_value

    return [
        {
            "id": f"openenv-{name}-{seed + k}",
            "messages": [
                {"role": "system", "content": OPENENV_SYSTEM},
                {
                    "role": "user",
                    "content": f"Play the '{name}' environment until the episode ends, "
                    "using its tools.",
                },
            ],
            "user_data": [["openenv", pack_value(name)], ["seed", pack_value(seed + k)]],
        }
        for name in names
        for k in range(episodes)
    ]


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
    """The rollout's input file: recorded agent conversations (rows with tool calls, at most
    ``limit``), then task rows of registered environments (``rollout_bridge.trajectories_for``),
    then ``episodes`` prompt rows per OpenEnv environment in ``openenv``, reset with seeds
    ``seed``, ``seed + 1``, ..."""
    from twinkle.data_format import is_agent_row

    rows = read_rows_cached(paths) if paths else []
    agent = [r for r in rows if is_agent_row(r.get("messages"))]
    over = max(0, len(agent) - limit) if limit is not None else 0
    agent = agent[:limit] if limit is not None else agent
    tasks: list[dict[str, Any]] = []
    if envs:
        from twinkle.integrations.rollout_bridge import trajectories_for

        for env in envs:
            items = trajectories_for(env)
            tasks.extend(items[:tasks_limit] if tasks_limit else items)
    tasks.extend(openenv_rows(list(openenv or []), episodes, seed))
    path = work_path(out, "rollout-input", fp)
    n = write_work_rows(path, agent + tasks)
    return {
        "path": path,
        "fingerprint": fp,
        "rows": n,
        "conversations": len(agent),
        "not_agent": len(rows) - len(agent) - over,
        "over_limit": over,
    }


@task(
    name="provision-sandboxes",
    task_run_name="provision-sandboxes",
    cache_policy=NO_CACHE,
    persist_result=False,
)
def provision_sandboxes(
    n: int, endpoint: dict[str, Any] | None, sandbox: SandboxParams, workers: int
) -> list[tuple[Any, str | None]]:
    """One fresh sandbox (``AgentEnv``) per trajectory, created concurrently; (env, error) pairs."""
    if endpoint is None or endpoint.get("error"):
        reason = (endpoint or {}).get("error") or "no sandbox endpoint"
        return [(None, reason)] * n
    from twinkle.envs.agentenv import AgentEnv

    def one(_: int) -> tuple[Any, str | None]:
        env = AgentEnv(
            template=sandbox.template,
            api_url=endpoint["api_url"],
            api_key=endpoint["api_key"],
            sandbox_timeout=sandbox.sandbox_timeout,
            command_timeout=sandbox.tool_timeout_s,
        )
        try:
            env.reset()
            return env, None
        except Exception as exc:  # noqa: BLE001 - a failed reset fails only this trajectory
            env.close()
            return None, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, min(n, workers))) as pool:
        return list(pool.map(one, range(n)))


@task(
    name="provision-openenvs",
    task_run_name="provision-openenvs",
    cache_policy=NO_CACHE,
    persist_result=False,
)
def provision_openenvs(
    prompts: list[dict[str, Any]],
    base_url: str | None,
    workers: int,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
) -> list[tuple[Any, str | None, dict[str, Any]]]:
    """One fresh OpenEnv environment per episode prompt (``OpenEnv(env_name, env_kwargs=...)``
    in-process, or an ``OpenEnvClient`` session on ``base_url``), created and reset
    concurrently with the episode's seed; (env, error, prompt) triples, the prompt completed
    with the env's first observation and its real tool schemas (``env.tools()``).

    ``env_kwargs`` (constructor arguments by env name) only apply in-process: an OpenEnv
    server builds each session's environment with its own settings (openenv 0.10's session
    protocol carries no constructor arguments), so an episode given arguments against a
    server fails with that reason rather than silently playing other settings."""
    from twinkle.data_format import user_data_get
    from twinkle.envs.openenv import OpenEnv, OpenEnvClient

    def one(prompt: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
        ud = prompt.get("user_data")
        env = None
        try:
            name = user_data_get(ud, "openenv")
            kwargs = (env_kwargs or {}).get(name)
            if base_url and kwargs:
                return (
                    None,
                    (
                        f"openenv_env_kwargs for '{name}' ({', '.join(sorted(kwargs))}) cannot be "
                        f"applied on the OpenEnv server {base_url}: the server builds its own "
                        "environments; configure them where it is started, or play in-process "
                        "(no openenv_base_url)"
                    ),
                    prompt,
                )
            env = (
                OpenEnvClient(name, base_url=base_url)
                if base_url
                else OpenEnv(env_name=name, env_kwargs=kwargs)
            )
            first = env.reset(seed=user_data_get(ud, "seed"))
            tools = env.tools()
        except Exception as exc:  # noqa: BLE001 - this episode fails with the reason; others go on
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()
            return None, f"{type(exc).__name__}: {exc}", prompt
        messages = [dict(m) for m in prompt["messages"]]
        messages[-1]["content"] = f"{messages[-1]['content']}\n\n{first.observation}"
        return env, None, {**prompt, "messages": messages, "tools": tools}

    if not prompts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(len(prompts), workers))) as pool:
        return list(pool.map(one, prompts))


def _policy_api(
    settings: dict[str, Any], rows: list[dict[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    """The chat API and the prompts to roll out: replay of ``rows`` or an OpenAI endpoint."""
    from twinkle.protocol.replay import ReplayAPI

    policy = settings["policy"]
    if not (policy.get("base_url") and policy.get("model")):
        return ReplayAPI.from_rows(rows)
    from twinkle.protocol.openai import OpenAI

    key = os.environ.get(policy["api_key_env"]) if policy.get("api_key_env") else None
    api = OpenAI(
        policy["model"], api_key=key or "EMPTY", base_url=policy["base_url"], max_retries=2
    )
    return api, [ReplayAPI.prompt_of(r) for r in rows]


def _task_environments(endpoint: dict[str, Any] | None) -> dict[str, Any]:
    """Task environments that must not use their defaults here: the code environment grades
    model-written code in the run's sandbox server, never in a host subprocess."""
    if not endpoint:
        return {}
    from twinkle.core.environments import CodeEnvironment

    code = CodeEnvironment(sandbox_url=endpoint["api_url"], sandbox_api_key=endpoint["api_key"])
    return {"code": code, "tasks/code": code}


def _score(
    recorded: dict[str, Any],
    trajectory: dict[str, Any],
    replay: bool,
    environments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Rewards of one finished trajectory: its task environment via the bridge, or replay
    fidelity."""
    from twinkle.data_format import user_data_get

    if user_data_get(trajectory.get("user_data"), "env"):
        from twinkle.integrations.rollout_bridge import score_trajectories

        score = score_trajectories([trajectory], environments=environments)[0]
    elif replay:
        from twinkle.integrations.replay import replay_fidelity

        score = replay_fidelity(recorded, trajectory)
    else:
        score = {
            "rewards": {},
            "outcome": "unscored",
            "error": "a conversation rolled out by a live policy has no reward function",
        }
    return {
        **trajectory,
        "rewards": score["rewards"],
        "reward_outcome": score["outcome"],
        "reward_error": score["error"],
    }


def _score_episode(trajectory: dict[str, Any], reward: float | None) -> dict[str, Any]:
    """Rewards of an OpenEnv episode: the env's cumulative ``episode_reward`` (None: no env)."""
    if reward is None:
        return {
            **trajectory,
            "rewards": {},
            "reward_outcome": "error",
            "reward_error": trajectory.get("error") or "no environment",
        }
    return {
        **trajectory,
        "rewards": {"episode_reward": reward, "total": reward},
        "reward_outcome": "solved" if reward > 0 else "unsolved",
        "reward_error": None,
    }


def _each_done(
    rollout: Any, prompts: list[dict[str, Any]], managers: list[Any], done: Any
) -> list[Any]:
    """Run ``rollout`` over ``prompts`` on one event loop, calling ``done(i, trajectory)`` in a
    worker thread as each trajectory finishes (``APIMultiTurnRollout.acall`` per trajectory,
    at most ``rollout.concurrency`` in flight), so scoring and tracing overlap the rest."""
    import asyncio

    async def main() -> list[Any]:
        gate = asyncio.Semaphore(rollout.concurrency)

        async def one(i: int) -> Any:
            async with gate:
                out = (await rollout.acall([prompts[i]], tool_manager=[managers[i]]))[0]
            return await asyncio.to_thread(done, i, out)

        return await asyncio.gather(*(one(i) for i in range(len(prompts))))

    return rollout.run_in_own_loop(main)


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
) -> dict[str, Any]:
    """Rows ``[start, end)`` of the rollout input: one sandbox per trajectory, multi-turn
    rollouts, and each trajectory scored and streamed to MLflow the moment it finishes.

    ``fp`` (input file hash + settings, computed by the flow) is the cache key and names the
    output file; ``endpoint`` and ``trace`` (live connections) are not part of it.
    """
    from twinkle.data_format import SamplingParams, user_data_get
    from twinkle.envs.env_tool import EnvTool
    from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
    from twinkle.tools import ToolManager

    started = time.perf_counter()
    rows = read_rows_cached([source])[start:end]
    api, prompts = _policy_api(settings, rows)
    sandbox = SandboxParams(**settings["sandbox"])
    # OpenEnv episodes get an OpenEnv environment, every other row a sandbox.
    games = [i for i, r in enumerate(rows) if user_data_get(r.get("user_data"), "openenv")]
    episodes = set(games)
    boxed = [i for i in range(len(rows)) if i not in episodes]
    envs: list[tuple[Any, str | None]] = [(None, None)] * len(prompts)
    for i, pair in zip(
        boxed, provision_sandboxes(len(boxed), endpoint, sandbox, settings["concurrency"])
    ):
        envs[i] = pair
    if games:  # no task run (and no Prefect API calls) for a rollout without OpenEnv episodes
        for i, (env, error, prompt) in zip(
            games,
            provision_openenvs(
                [prompts[i] for i in games],
                settings.get("openenv_base_url"),
                settings["concurrency"],
                settings.get("openenv_env_kwargs"),
            ),
        ):
            envs[i], prompts[i] = (env, error), prompt
    toolsets: dict[int, list[Any]] = {}
    provisioned = time.perf_counter()
    stream = open_trace_stream(trace) if trace else None
    task_envs = _task_environments(endpoint)
    scoring_s = [0.0]
    progress = StageProgress("rollout", total=len(prompts))  # one per task: a shard under Ray

    def done(i: int, traj: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        if i in episodes:
            scored = _score_episode(traj, toolsets[i][0].episode_reward if i in toolsets else None)
        else:
            scored = _score(rows[i], traj, settings["replay"], task_envs)
        scoring_s[0] += time.perf_counter() - t0
        if stream is not None:
            stream.put(scored, scored["rewards"], trace_key(scored, start + i))
        progress.advance()
        return scored

    try:
        ready = [i for i, (env, _) in enumerate(envs) if env is not None]
        trajectories: list[Any] = [None] * len(prompts)
        for i, (env, error) in enumerate(envs):
            if env is None:
                kind = "OpenEnvError" if i in episodes else "SandboxError"
                trajectories[i] = done(
                    i,
                    {
                        **prompts[i],
                        "turns": 0,
                        "stop_reason": "error",
                        "truncated": True,
                        "turn_log": [],
                        "error": f"{kind}: {error}",
                    },
                )
        if ready:
            policy = settings["policy"]
            rollout = APIMultiTurnRollout(
                api,
                sampling_params=SamplingParams(
                    temperature=policy["temperature"], max_tokens=policy["max_tokens"]
                ),
                max_turns=settings["max_turns"],
                concurrency=settings["concurrency"],
                tool_timeout_s=sandbox.tool_timeout_s,
                request_timeout_s=policy["request_timeout_s"],
            )
            toolsets.update({i: EnvTool.from_env(envs[i][0]) for i in ready})
            outputs = _each_done(
                rollout,
                [prompts[i] for i in ready],
                [ToolManager(toolsets[i]) for i in ready],
                lambda j, traj: done(ready[j], traj),
            )
            for i, traj in zip(ready, outputs):
                trajectories[i] = traj
    finally:
        for env, _ in envs:
            if env is not None:
                with contextlib.suppress(
                    Exception
                ):  # one env failing to close must not leak the others
                    env.close()
        progress.close()  # first: a trace batch that failed raises from stream.close()
        traces = stream.close() if stream is not None else {}
    rolled = time.perf_counter()
    path = work_path(out, "rollout", fp)
    write_work_rows(path, trajectories)
    return {
        "path": path,
        "fingerprint": fp,
        "rows": len(trajectories),
        "provision_s": provisioned - started,
        "rollout_s": rolled - provisioned,
        "scoring_s": scoring_s[0],
        "traces": traces,
    }


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


class _LocalSandboxServer:
    """``twinkle sandbox serve`` in a child process, started now and waited for on first use.

    A child process rather than ``SandboxServer`` in this one: the server's request handling
    then does not share the GIL with the rollout's event loop, its start-up overlaps
    curation, and starting uvicorn here would reconfigure logging under Prefect's feet
    (it flushes Prefect's API log handler under logging's global lock: a 5 s stall, and
    seen deadlocked against Prefect's event threads).
    """

    def __init__(self) -> None:
        import subprocess
        import sys

        self.api_key = secrets.token_urlsafe(24)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from twinkle.cli import main; main()",
                "sandbox",
                "serve",
                "--port",
                "0",
            ],
            env={**os.environ, "E2B_API_KEY": self.api_key},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._endpoint: dict[str, Any] | None = None

    def endpoint(self, timeout: float = 120.0) -> dict[str, Any]:
        """``{'api_url', 'api_key'}`` once the server accepts connections, else ``{'error'}``."""
        import select

        if self._endpoint is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            url = self.proc.stdout.readline().strip() if ready else ""
            if url.startswith("http"):
                self._endpoint = {"api_url": url, "api_key": self.api_key}
            else:
                self.stop()
                why = (self.proc.stderr.read() or "").strip().splitlines()[-1:] or [
                    f"no URL within {timeout:.0f} s"
                ]
                self._endpoint = {"error": f"local sandbox server unavailable: {why[0]}"}
        return self._endpoint

    def release(self) -> None:
        """Ask the server to stop (SIGTERM) without waiting: it kills its sandboxes and removes
        their files while the flow logs its results; ``stop`` then finds it gone."""
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        import subprocess

        self.release()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SandboxEndpoint:
    """The sandbox API of a flow run: call it for ``{'api_url', 'api_key'}`` (or ``{'error'}``),
    waiting for a local server started with the flow if it is not up yet; ``release()`` once
    no sandbox is needed any more lets a local server shut down while the flow goes on."""

    def __init__(
        self, fixed: dict[str, Any] | None = None, server: _LocalSandboxServer | None = None
    ) -> None:
        self._fixed, self._server = fixed, server

    def __call__(self) -> dict[str, Any]:
        return self._fixed if self._server is None else self._server.endpoint()

    def release(self) -> None:
        if self._server is not None:
            self._server.release()


@contextlib.contextmanager
def sandbox_endpoint(sandbox: SandboxParams) -> Iterator[SandboxEndpoint]:
    """The sandbox API for the block (``SandboxEndpoint``): ``api_url``, else ``E2B_API_URL``,
    else a local sandbox server started in a child process and stopped at the block's end.
    Open it first in a flow: the server starts while curation runs.
    """
    api_url = sandbox.api_url or os.environ.get("E2B_API_URL")
    if api_url:
        yield SandboxEndpoint(
            {"api_url": api_url, "api_key": os.environ.get(sandbox.api_key_env) or "local"}
        )
        return
    server = _LocalSandboxServer()
    try:
        yield SandboxEndpoint(server=server)
    finally:
        server.stop()


def run_rollout(
    params: RolloutParams,
    run: RunParams,
    endpoint: Any,
    conversations: list[str] | None = None,
    ctx: Tracking | None = None,
    tracking: TrackingParams | None = None,
    conversations_fp: str | None = None,
) -> dict[str, Any]:
    """The rollout stages as tasks of the current flow run; returns the stage summary.

    ``conversations`` (files, with their fingerprint) come from the curation stage in the
    pipeline; standalone, ``params.conversations`` are read and hashed. The rollout runs as one
    task (one event loop, the rollout's own asyncio concurrency) under the thread-pool runner,
    and as one task per ``shard_size`` trajectories under Ray. With ``ctx`` each trajectory is
    traced while the others still roll out; a stage found in the cache is traced from its file
    instead (idempotent: traces already in the session are skipped). ``endpoint``: the sandbox
    API (the ``SandboxEndpoint`` ``sandbox_endpoint`` yields), opened by the flow before any task
    runs.
    """
    started = time.perf_counter()
    out = output_dir(run.output_dir)
    o, refresh = str(out), run.refresh_cache
    replay = params.policy.replay
    skipped: dict[str, str] = {}
    paths = list(conversations if conversations is not None else params.conversations)
    envs = list(params.tasks) if params.tasks and not replay else []
    if params.tasks and replay:
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
    source = conversations_fp or files_fingerprint(
        paths
    )  # the curation stage's fingerprint, when given
    played = [games, params.openenv_episodes, params.openenv_seed] if games else []
    pfp = fingerprint(
        "rollout-input", source, params.limit, envs, params.tasks_limit, *played
    )  # unchanged keys without OpenEnv
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
    if prepared["over_limit"]:
        skipped["limit"] = (
            f"{prepared['over_limit']} conversations over limit={params.limit} not re-run"
        )
    settings = {
        **params.model_dump(
            exclude={
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
            }
        ),
        "replay": replay,
    }
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
    futures = [
        stage_task(run_rollouts, out, refresh, work_path(o, "rollout", fps[k])).submit(
            prepared["path"], a, b, k, settings, api, fps[k], o, trace
        )
        for k, (a, b) in enumerate(ranges)
    ]
    for f in futures:
        f.wait()
    rolled, traced = [], []
    for k, f in enumerate(futures):
        rolled.append(f.result())
        if (
            trace is not None and f.state.name == "Cached"
        ):  # traced by an earlier run, maybe another session
            traced.append(trace_file(trace, rolled[-1]["path"], ranges[k][0], k))
        else:
            traced.append(rolled[-1]["traces"])
    path = str(out / "trajectories" / f"{params.dataset}.scored.jsonl")
    written = stage_task(write_trajectories, out, refresh, path)(
        [r["path"] for r in rolled], path, fingerprint("write", fps, path)
    )
    traces = {
        k: sum(t.get(k, 0) for t in traced)
        for k in ("written", "existing", "unsampled", "spans", "seconds")
    }
    return {
        "scored_path": path,
        "written": written["rows"],
        "trajectories": written["rows"],
        "skipped": skipped,
        "policy": "replay" if replay else f"openai:{params.policy.model}",
        "settings": {
            **settings,
            "tasks": params.tasks,
            "tasks_limit": params.tasks_limit,
            "openenv": params.openenv,
            "openenv_episodes": params.openenv_episodes,
            "openenv_base_url": params.openenv_base_url,
            "openenv_seed": params.openenv_seed,
            "openenv_env_kwargs": params.openenv_env_kwargs,
        },
        "provision_s": sum(r["provision_s"] for r in rolled),
        "rollout_s": sum(r["rollout_s"] for r in rolled),
        "scoring_s": sum(r["scoring_s"] for r in rolled),
        "seconds": time.perf_counter() - started,
        "stage_run_id": stage,
        "traces": traces,
    }


def publish_rollout(result: dict[str, Any], tracked: dict[str, Any]) -> None:
    """Prefect artifacts: the reward table and a markdown summary (stable keys)."""
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
    create_table_artifact(
        key="rollout-rewards",
        table=rows or [{"id": "-", "total": None}],
        description="Reward and stop reason per trajectory.",
    )
    stops = tracked.get("stop_reasons", {})
    create_markdown_artifact(
        key="rollout-summary",
        markdown="\n".join(
            [
                "# Rollout and scoring",
                f"- policy: `{result['policy']}`; trajectories: **{result['trajectories']}**",
                "- stop reasons: "
                f"{', '.join(f'{k}={v}' for k, v in sorted(stops.items())) or 'none'}",
                f"- mean reward (total): **{tracked.get('reward.total.mean', 'n/a')}**, "
                f"pass rate: {tracked.get('pass_rate', 'n/a')}",
                f"- traces written: {tracked.get('traces_written', 0)} "
                f"(already there: {tracked.get('traces_existing', 0)})",
                *[f"- skipped {k}: {v}" for k, v in result["skipped"].items()],
                f"- scored trajectories: `{result['scored_path']}`",
            ]
        ),
        description="Rollout summary.",
    )


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
    return {
        **{k: result[k] for k in keep},
        "trajectories": result["trajectories"],
        "failed": tracked.get("failed", 0),
        "stop_reasons": tracked.get("stop_reasons", {}),
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
) -> dict[str, Any]:
    """Roll out a policy in sandboxes, score the trajectories and trace them in MLflow."""
    rollout, tracking, run = (
        rollout or RolloutParams(),
        tracking or TrackingParams(),
        run or RunParams(),
    )
    on_ray = on_ray_if_asked(rollout_flow, run, tracking, rollout=rollout)
    if on_ray is not None:
        return on_ray
    with sandbox_endpoint(rollout.sandbox) as endpoint:  # first: see sandbox_endpoint
        ctx = start_tracking(
            tracking,
            tracking.run_key or flow_run_id(),
            "twinkle-rollout",
            {"rollout": rollout.model_dump(), "run": run.model_dump()},
        )
        result = run_rollout(rollout, run, endpoint, ctx=ctx, tracking=tracking)
        endpoint.release()  # a local server shuts down while the results are logged
        tracked = log_rollout(ctx, result["stage_run_id"], result)
        publish_rollout(result, tracked)
    summary = rollout_summary(result, tracked)
    finish_tracking(ctx, {**summary, "mlflow_run_id": ctx.run_id})
    return {**summary, "mlflow_run_id": ctx.run_id}
