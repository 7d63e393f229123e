"""A rollout runner: an environment per row on demand, a policy rolled out, scores, one batch.

What a pipeline's rollout stage calls (a Prefect task in ``flows.rollout``, or any script):
``RolloutRunner(config, endpoint).run(rows)`` returns a typed ``BatchResult``. Per row, at most
``config.concurrency`` rows at once on one event loop:

* an environment, created when the row's trajectory starts and released (killed) when it
  ends, so that live environments never outnumber ``concurrency`` whatever the batch size:
  a fresh sandbox (``AgentEnv`` + ``EnvTool``) on the E2B-compatible ``endpoint``, or for
  an episode row an ``OpenEnv`` / ``OpenEnvClient`` environment (a ``RegistryEnv`` for a
  multi-turn environment of the registry) reset with the episode's seed; creation and
  release run in worker threads, off the event loop;
* a multi-turn rollout (``APIMultiTurnRollout``) over the replay policy (the recorded
  assistant turns) or an OpenAI-compatible endpoint;
* rewards the moment the trajectory finishes (task environments through the rollout bridge,
  replay fidelity for re-run conversations, the cumulative ``episode_reward`` of an OpenEnv
  episode), then ``on_done(index, trajectory)`` (tracing) and ``on_progress(done, total)``.

Errors are never rewards: a trajectory that failed gets no rewards, ``reward_outcome``
``'failed'`` and its error as ``reward_error``; it counts in ``RolloutStats.failed``, never
in reward statistics. That covers the model endpoint (``stop_reason`` ``api_error``) and the
environment: one that could not be created, or whose sandbox died or whose server became
unreachable mid-rollout (``stop_reason`` ``error``, ``error`` ``'SandboxError: ...'``; the
model is never shown such a failure as a tool result). ``RolloutStats`` merges the figures of
batches (shards) and ``check_failure_rate`` turns a failure share above a threshold into a
``RunFailedError`` that names the failing endpoint (``twinkle.rollout.runner_stats``);
scoring lives in ``twinkle.rollout.runner_scoring``. Both are re-exported here.

Example:
    >>> config = RolloutConfig(max_turns=4)
    >>> config.replay
    True
    >>> RolloutStats.of([{'stop_reason': 'stop'}, {'stop_reason': 'api_error'}]).failed
    1
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from twinkle.rollout.runner_scoring import (
    OPENENV_SYSTEM,
    is_registry_spec,
    openenv_rows,
    policy_api,
    score,
    score_episode,
    task_environments,
)
from twinkle.rollout.runner_stats import (
    FAILED_STOPS,
    BatchResult,
    PolicyConfig,
    RolloutConfig,
    RolloutStats,
    RunFailedError,
    check_failure_rate,
    failing_endpoint,
    is_failed,
)

__all__ = [
    "FAILED_STOPS",
    "OPENENV_SYSTEM",
    "BatchResult",
    "PolicyConfig",
    "RolloutConfig",
    "RolloutRunner",
    "RolloutStats",
    "RunFailedError",
    "check_failure_rate",
    "failing_endpoint",
    "is_failed",
    "is_registry_spec",
    "load_checkpoint",
    "openenv_rows",
    "policy_api",
    "score",
    "score_episode",
    "task_environments",
]


def _in_parallel(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list[Any]:
    """``fn`` over ``items`` with ``workers`` blocking calls (SDK resets) at once, in order."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(len(items), workers))) as pool:
        return list(pool.map(fn, items))


class RolloutRunner:
    """Provision, roll out and score one batch of rows (see the module docstring).

    Args:
        config: ``RolloutConfig``.
        endpoint: the sandbox API, ``{'api_url', 'api_key'}``; ``{'error': why}`` or None
            fails every sandboxed row with that reason (OpenEnv rows need none).
        on_done: ``callable(index, trajectory)`` for each scored trajectory as it finishes
            (index into the batch), e.g. a trace stream; called from a worker thread.
        on_progress: ``callable(done, total)`` after each finished trajectory.

    Example:
        >>> runner = RolloutRunner(RolloutConfig(), {'api_url': 'http://127.0.0.1:9',
        ...                                          'api_key': 'k'})  # doctest: +SKIP
        >>> result = runner.run(rows)  # doctest: +SKIP
        >>> result.stats.trajectories == len(rows)  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        config: RolloutConfig,
        endpoint: Mapping[str, Any] | None = None,
        *,
        on_done: Callable[[int, dict[str, Any]], Any] | None = None,
        on_progress: Callable[[int, int], Any] | None = None,
    ) -> None:
        self.config = config
        self.endpoint = endpoint
        self.on_done = on_done
        self.on_progress = on_progress
        #: Set once the sandbox server is found down: later rows fail at once with it.
        self._down: str | None = None

    # -- environments ---------------------------------------------------------------------
    def provision_sandbox(self) -> tuple[Any, str | None]:
        """A fresh sandbox (``AgentEnv``, reset) for one trajectory: (env, None), or
        (None, error) when it could not be created. Blocking (SDK calls).

        A creation that fails on the connection, with a server that does not answer its
        health probe either, marks the server down: the rows after it fail at once with
        that cause instead of each paying the SDK's connection retries."""
        endpoint, c = self.endpoint, self.config
        if endpoint is None or endpoint.get("error"):
            return None, (endpoint or {}).get("error") or "no sandbox endpoint"
        if self._down is not None:
            return None, self._down
        from twinkle.envs.agentenv import AgentEnv

        env = AgentEnv(
            template=c.template,
            api_url=endpoint["api_url"],
            api_key=endpoint["api_key"],
            sandbox_timeout=c.sandbox_timeout,
            command_timeout=c.tool_timeout_s,
        )
        try:
            env.reset()
            return env, None
        except Exception as exc:  # noqa: BLE001 - a failed reset fails only this trajectory
            env.close()
            error = f"{type(exc).__name__}: {exc}"
            if _server_down(endpoint, exc):
                self._down = f"sandbox server down, trajectory not started; it failed with {error}"
            return None, error

    def provision_sandboxes(self, n: int) -> list[tuple[Any, str | None]]:
        """``n`` sandboxes at once, ``concurrency`` created in parallel; (env, error) pairs.
        ``run`` does not use it: it creates each trajectory's sandbox when it starts."""
        return _in_parallel(lambda _: self.provision_sandbox(), range(n), self.config.concurrency)

    def provision_openenv(self, prompt: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
        """A fresh environment for one episode prompt, reset with the episode's seed: (env,
        error, prompt), the prompt completed with the env's first observation and its real
        tool schemas. Blocking.

        An OpenEnv name gets an in-process ``OpenEnv`` or an ``OpenEnvClient`` session on
        ``config.openenv_base_url``; a registry spec (``adapter/name?...`` or
        ``@envs.yaml#key``, a multi-turn entry of ``tasks``/``envs``) a ``RegistryEnv``,
        always in-process. ``openenv_env_kwargs`` only apply to in-process OpenEnv: an
        OpenEnv server builds each session's environment with its own settings, so an
        episode given arguments against a server fails with that reason rather than
        silently playing other settings."""
        from twinkle.data_format import user_data_get
        from twinkle.envs.openenv import OpenEnv, OpenEnvClient

        base_url, env_kwargs = self.config.openenv_base_url, self.config.openenv_env_kwargs
        ud = prompt.get("user_data")
        env = None
        try:
            name = user_data_get(ud, "openenv")
            if is_registry_spec(name):
                from twinkle.envs.registry_env import RegistryEnv

                env = RegistryEnv(name)
                return self._started(env, prompt, user_data_get(ud, "seed"))
            kwargs = (env_kwargs or {}).get(name)
            if base_url and kwargs:
                why = (
                    f"openenv_env_kwargs for '{name}' ({', '.join(sorted(kwargs))}) cannot "
                    f"be applied on the OpenEnv server {base_url}: the server builds its own "
                    "environments; configure them where it is started, or play in-process "
                    "(no openenv_base_url)"
                )
                return None, why, prompt
            env = (
                OpenEnvClient(name, base_url=base_url)
                if base_url
                else OpenEnv(env_name=name, env_kwargs=kwargs)
            )
            return self._started(env, prompt, user_data_get(ud, "seed"))
        except Exception as exc:  # noqa: BLE001 - this episode fails with the reason
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()
            return None, f"{type(exc).__name__}: {exc}", prompt

    @staticmethod
    def _started(
        env: Any, prompt: dict[str, Any], seed: Any
    ) -> tuple[Any, str | None, dict[str, Any]]:
        """``env`` reset with ``seed``, and ``prompt`` completed with its first observation
        and tool schemas; raises what the reset raised."""
        first = env.reset(seed=seed)
        tools = env.tools()
        messages = [dict(m) for m in prompt["messages"]]
        messages[-1]["content"] = f"{messages[-1]['content']}\n\n{first.observation}"
        return env, None, {**prompt, "messages": messages, "tools": tools}

    def provision_openenvs(
        self, prompts: Sequence[dict[str, Any]]
    ) -> list[tuple[Any, str | None, dict[str, Any]]]:
        """``provision_openenv`` over ``prompts``, ``concurrency`` at once, in order."""
        return _in_parallel(self.provision_openenv, list(prompts), self.config.concurrency)

    # -- the batch ------------------------------------------------------------------------
    def run(self, rows: Sequence[Mapping[str, Any]], checkpoint: str | None = None) -> BatchResult:
        """Roll out and score ``rows``, each in an environment of its own created when its
        trajectory starts and released when it ends; none is left when it returns.

        ``checkpoint``: a JSONL file that each trajectory finished without error is appended
        to as it finishes; a run given the file of a run that crashed keeps those (traced and
        counted again, never re-requested) and rolls out only the rest. The caller removes
        the file once it has the batch's output.

        Stats: ``provision_s`` is the time spent creating and releasing environments and
        ``scoring_s`` the time spent scoring, each summed over trajectories (they overlap
        one another and the rollouts); ``rollout_s`` is the wall time of the rollouts,
        their environments and scoring included.
        """
        from twinkle.data_format import user_data_get

        c = self.config
        self._down = None
        api, prompts = policy_api(c.policy, rows)
        kept = load_checkpoint(checkpoint, rows) if checkpoint else {}
        todo = [i for i in range(len(rows)) if i not in kept]
        # OpenEnv episodes get an OpenEnv environment, every other row a sandbox.
        episodes = {i for i in todo if user_data_get(rows[i].get("user_data"), "openenv")}
        task_envs = task_environments(self.endpoint)
        figures = {"provision_s": 0.0, "scoring_s": 0.0}
        finished = [0]
        lock = threading.Lock()

        def done(
            i: int, traj: dict[str, Any], reward: float | None = None, resumed: bool = False
        ) -> dict[str, Any]:
            t0 = time.perf_counter()
            if resumed:
                scored = traj
            elif i in episodes:
                scored = score_episode(traj, reward)
            else:
                scored = score(rows[i], traj, c.replay, task_envs)
            line = None
            if checkpoint and not resumed and not is_failed(scored):
                line = json.dumps({"index": i, "trajectory": scored}, default=str) + "\n"
            with lock:
                figures["scoring_s"] += time.perf_counter() - t0
                if line is not None:
                    with open(checkpoint, "a", encoding="utf-8") as f:
                        f.write(line)
            if self.on_done is not None:
                self.on_done(i, scored)
            with lock:
                finished[0] += 1
                count = finished[0]
            if self.on_progress is not None:
                self.on_progress(count, len(prompts))
            return scored

        trajectories: list[Any] = [None] * len(prompts)
        for i, traj in sorted(kept.items()):
            trajectories[i] = done(i, traj, resumed=True)
        started = time.perf_counter()
        if todo:
            outputs = self._roll(api, todo, prompts, episodes, done, figures)
            for i, traj in zip(todo, outputs):
                trajectories[i] = traj
        stats = RolloutStats.of(
            trajectories,
            provision_s=figures["provision_s"],
            rollout_s=time.perf_counter() - started,
            scoring_s=figures["scoring_s"],
        )
        return BatchResult(trajectories=trajectories, stats=stats)

    def _environment(
        self, prompt: dict[str, Any], episode: bool
    ) -> tuple[Any, list[Any], str | None, dict[str, Any]]:
        """A row's environment, its tools, the error if it could not be created, and the
        prompt to roll out (an episode's completed with its first observation). Blocking."""
        if episode:
            from twinkle.data_format import user_data_get

            registry = is_registry_spec(user_data_get(prompt.get("user_data"), "openenv"))
            env, error, prompt = self.provision_openenv(prompt)
            kind = "EnvError" if registry else "OpenEnvError"
        else:
            (env, error), kind = self.provision_sandbox(), "SandboxError"
        if env is None:
            return None, [], f"{kind}: {error}", prompt
        try:
            return env, _env_tools(env), None, prompt
        except Exception as exc:  # noqa: BLE001 - an env without usable tools fails its row only
            _release(env)
            return None, [], f"{kind}: {type(exc).__name__}: {exc}", prompt

    def _roll(
        self,
        api: Any,
        todo: list[int],
        prompts: list[dict[str, Any]],
        episodes: set[int],
        done: Callable[..., dict[str, Any]],
        figures: dict[str, float],
    ) -> list[Any]:
        """Roll out ``todo`` on one event loop, at most ``concurrency`` at once. Each takes a
        slot, creates its environment in a worker thread, rolls out
        (``APIMultiTurnRollout.acall``), releases the environment and is scored
        (``done(i, trajectory, reward)``, in a worker thread) before it gives the slot back:
        live environments, those of code grading included, never outnumber the slots."""
        import asyncio

        from twinkle.data_format import SamplingParams
        from twinkle.rollout.api_multi_turn import APIMultiTurnRollout
        from twinkle.tools import ToolManager

        c = self.config
        rollout = APIMultiTurnRollout(
            api,
            sampling_params=SamplingParams(
                temperature=c.policy.temperature, max_tokens=c.policy.max_tokens
            ),
            max_turns=c.max_turns,
            concurrency=c.concurrency,
            tool_timeout_s=c.tool_timeout_s,
            request_timeout_s=c.policy.request_timeout_s,
        )
        envs: dict[int, Any] = {}  # by row: the environments not released yet
        lock = threading.Lock()

        def create(i: int) -> tuple[Any, list[Any], str | None, dict[str, Any]]:
            t0 = time.perf_counter()
            env, tools, error, prompt = self._environment(prompts[i], i in episodes)
            with lock:
                figures["provision_s"] += time.perf_counter() - t0
                if env is not None:
                    envs[i] = env
            return env, tools, error, prompt

        def release(i: int) -> None:
            t0 = time.perf_counter()
            with lock:
                env = envs.pop(i, None)
            if env is not None:
                _release(env)
            with lock:
                figures["provision_s"] += time.perf_counter() - t0

        async def main() -> list[Any]:
            gate = asyncio.Semaphore(rollout.concurrency)
            me = (asyncio.get_running_loop(), asyncio.current_task())
            with _ACTIVE_LOCK:
                _ACTIVE.add(me)

            async def one(i: int) -> Any:
                async with gate:
                    env, tools, error, prompt = await asyncio.to_thread(create, i)
                    if env is None:
                        return await asyncio.to_thread(done, i, _unprovisioned(prompt, error))
                    try:
                        manager = ToolManager(tools)
                        out = (await rollout.acall([prompt], tool_manager=[manager]))[0]
                    finally:
                        await asyncio.to_thread(release, i)
                    reward = tools[0].episode_reward if i in episodes and tools else None
                    return await asyncio.to_thread(done, i, out, reward)

            try:
                return await asyncio.gather(*(one(i) for i in todo))
            finally:
                with _ACTIVE_LOCK:
                    _ACTIVE.discard(me)

        try:
            return rollout.run_in_own_loop(main)
        finally:
            for i in list(envs):  # interrupted: what was not released yet
                release(i)


#: The event loops and main tasks of the batches rolling out in this process (``stop_all``).
_ACTIVE: set[tuple[Any, Any]] = set()
_ACTIVE_LOCK = threading.Lock()


def stop_all() -> int:
    """Cancel every batch ``RolloutRunner.run`` is rolling out in this process, from any
    thread: in-flight trajectories stop at their next await and their environments are
    released, so an interrupted run exits in seconds instead of finishing its rollout
    first. Returns how many batches were asked to stop; ``run`` then raises
    ``asyncio.CancelledError`` in its own thread. What an interrupted CLI run calls.

    Example:
        >>> stop_all()  # nothing rolling out here
        0
    """
    with _ACTIVE_LOCK:
        active = list(_ACTIVE)
    for loop, task in active:
        with contextlib.suppress(RuntimeError):  # that loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)
    return len(active)


def _unprovisioned(prompt: dict[str, Any], error: str | None) -> dict[str, Any]:
    """The trajectory of a row whose environment could not be created."""
    return {
        **prompt,
        "turns": 0,
        "stop_reason": "error",
        "truncated": True,
        "turn_log": [],
        "error": error,
    }


def _server_down(endpoint: Mapping[str, Any], exc: BaseException) -> bool:
    """Whether ``exc`` (a sandbox creation's) failed on the connection and the server does
    not answer ``/health`` either (any HTTP answer, even 401 or 404, counts as up)."""
    import httpx

    from twinkle.envs.agentenv import is_environment_failure

    if not is_environment_failure(exc):
        return False
    try:
        httpx.get(
            f"{endpoint['api_url'].rstrip('/')}/health",
            headers={"X-API-Key": endpoint.get("api_key") or ""},
            timeout=5.0,
        )
    except httpx.TransportError:
        return True
    return False


def _release(env: Any) -> None:
    with contextlib.suppress(Exception):  # it may be gone already (server died, timeout)
        env.close()


def load_checkpoint(path: str, rows: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """Trajectories a crashed run finished (``RolloutRunner.run``'s checkpoint), by index; a
    torn last line, an index out of range or a row id that does not match is left out."""
    kept: dict[int, dict[str, Any]] = {}
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - closed below; missing file: no resume
    except FileNotFoundError:
        return kept
    with f:
        for line in f:
            try:
                entry = json.loads(line)
                i, traj = entry["index"], entry["trajectory"]
            except (ValueError, KeyError, TypeError):
                continue  # the line being written when the run died
            if isinstance(i, int) and 0 <= i < len(rows) and traj.get("id") == rows[i].get("id"):
                kept[i] = traj
    return kept


def _env_tools(env: Any) -> list[Any]:
    from twinkle.envs.env_tool import EnvTool

    return EnvTool.from_env(env)
