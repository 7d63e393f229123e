"""A rollout runner: provision an environment per row, roll out a policy, score, one batch.

What a pipeline's rollout stage calls (a Prefect task in ``flows.rollout``, or any script):
``RolloutRunner(config, endpoint).run(rows)`` returns a typed ``BatchResult``. Per row:

* an environment: a fresh sandbox (``AgentEnv`` + ``EnvTool``, one per trajectory) on the
  E2B-compatible ``endpoint``, or for an OpenEnv episode row an ``OpenEnv`` /
  ``OpenEnvClient`` environment reset with the episode's seed;
* a multi-turn rollout (``APIMultiTurnRollout``) over the replay policy (the recorded
  assistant turns) or an OpenAI-compatible endpoint, at most ``config.concurrency`` in
  flight on one event loop;
* rewards the moment the trajectory finishes (task environments through the rollout bridge,
  replay fidelity for re-run conversations, the cumulative ``episode_reward`` of an OpenEnv
  episode), then ``on_done(index, trajectory)`` (tracing) and ``on_progress(done, total)``.

Errors are never rewards: a trajectory that failed (``stop_reason`` ``api_error`` or
``error``, or an ``error`` set: an environment that could not be created, an endpoint that
is down) gets no rewards, ``reward_outcome`` ``'failed'`` and its error as
``reward_error``; it counts in ``RolloutStats.failed``, never in reward statistics.
``RolloutStats`` merges the figures of batches (shards) and ``check_failure_rate`` turns a
failure share above a threshold into a ``RunFailedError`` that names the failing endpoint.

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
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from twinkle.errors import TwinkleError
from twinkle.rollout.base import endpoint_label

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
    "is_failed",
    "load_checkpoint",
    "openenv_rows",
]

#: Stop reasons of a trajectory that failed (the rollout could not finish it).
FAILED_STOPS = frozenset({"api_error", "error", "abort", "sandbox_error", "env_error"})

#: The system prompt of an OpenEnv episode; the user message adds the env's first observation.
OPENENV_SYSTEM = (
    "You are an agent playing an interactive environment through its tools. Call one tool "
    "at a time, read each observation, and stop calling tools once the episode is over."
)

#: How many distinct errors a ``RolloutStats`` keeps (the first ones, for messages).
FIRST_ERRORS = 5


def is_failed(trajectory: Mapping[str, Any]) -> bool:
    """A trajectory failed when its rollout stopped on an error or it carries one.

    Example:
        >>> is_failed({'stop_reason': 'stop'}), is_failed({'stop_reason': 'api_error'})
        (False, True)
    """
    return bool(trajectory.get("error")) or trajectory.get("stop_reason") in FAILED_STOPS


class RunFailedError(TwinkleError, RuntimeError):
    """A stage failed: more of its items failed than ``max_failure_rate`` allows, or a check
    before the work found an input, endpoint or tracking URI unusable.

    Example:
        >>> err = RunFailedError('rollout: 3 of 4 trajectories failed', stage='rollout')
        >>> err.stage, str(err)
        ('rollout', 'rollout: 3 of 4 trajectories failed')
    """

    def __init__(self, message: str, *, stage: str = "", stats: dict[str, Any] | None = None):
        super().__init__(message)
        self.stage = stage
        self.stats = stats or {}


@dataclass(slots=True)
class PolicyConfig:
    """The policy: an OpenAI-compatible endpoint, or replay of the recorded turns (no URL)."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    request_timeout_s: float = 120.0

    @property
    def replay(self) -> bool:
        return not (self.base_url and self.model)


@dataclass(slots=True)
class RolloutConfig:
    """How a batch is rolled out.

    Args:
        policy: the policy model (``PolicyConfig``).
        max_turns: model calls per trajectory at most.
        concurrency: trajectories in flight at once (and environments created at once).
        template, sandbox_timeout, tool_timeout_s: the sandbox of each trajectory.
        openenv_base_url: an OpenEnv server for episode rows (None: in-process).
        openenv_env_kwargs: constructor arguments by OpenEnv name (in-process only).
    """

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    max_turns: int = 8
    concurrency: int = 8
    template: str = "base"
    sandbox_timeout: int = 300
    tool_timeout_s: float = 60.0
    openenv_base_url: str | None = None
    openenv_env_kwargs: dict[str, dict[str, Any]] | None = None

    @property
    def replay(self) -> bool:
        return self.policy.replay

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> RolloutConfig:
        """From a nested settings dict (``policy``, ``sandbox`` sub-dicts; unknown keys
        ignored), such as a pipeline's rollout parameters dumped to a dict."""
        policy = {
            k: v for k, v in (settings.get("policy") or {}).items() if k in PolicyConfig.__slots__
        }
        sandbox = settings.get("sandbox") or {}
        top = {
            k: settings[k]
            for k in ("max_turns", "concurrency", "openenv_base_url", "openenv_env_kwargs")
            if k in settings
        }
        box = {
            k: sandbox[k] for k in ("template", "sandbox_timeout", "tool_timeout_s") if k in sandbox
        }
        return cls(policy=PolicyConfig(**policy), **top, **box)


@dataclass(slots=True)
class RolloutStats:
    """Figures of one or more rollout batches; ``merge`` adds a shard's.

    Example:
        >>> a = RolloutStats.of([{'stop_reason': 'stop'}], rollout_s=1.0)
        >>> b = RolloutStats.of([{'stop_reason': 'api_error', 'error': 'E: down'}], rollout_s=2.0)
        >>> m = a.merge(b)
        >>> m.trajectories, m.failed, m.failure_rate, m.rollout_s, m.errors
        (2, 1, 0.5, 3.0, ['E: down'])
    """

    trajectories: int = 0
    failed: int = 0
    stop_reasons: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    provision_s: float = 0.0
    rollout_s: float = 0.0
    scoring_s: float = 0.0
    traces: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, trajectories: Sequence[Mapping[str, Any]], **figures: Any) -> RolloutStats:
        """The figures of ``trajectories`` plus timings/trace counts given as keywords."""
        errors: list[str] = []
        for t in trajectories:
            if is_failed(t):
                text = str(t.get("error") or t.get("stop_reason"))
                if text not in errors and len(errors) < FIRST_ERRORS:
                    errors.append(text)
        return cls(
            trajectories=len(trajectories),
            failed=sum(1 for t in trajectories if is_failed(t)),
            stop_reasons=dict(Counter(str(t.get("stop_reason")) for t in trajectories)),
            errors=errors,
            **figures,
        )

    @property
    def failure_rate(self) -> float:
        return self.failed / self.trajectories if self.trajectories else 0.0

    def merge(self, other: RolloutStats) -> RolloutStats:
        stops = Counter(self.stop_reasons)
        stops.update(other.stop_reasons)
        errors = list(self.errors)
        errors += [e for e in other.errors if e not in errors][: FIRST_ERRORS - len(errors)]
        traces = Counter(self.traces)
        traces.update(other.traces)
        return RolloutStats(
            trajectories=self.trajectories + other.trajectories,
            failed=self.failed + other.failed,
            stop_reasons=dict(stops),
            errors=errors,
            provision_s=self.provision_s + other.provision_s,
            rollout_s=self.rollout_s + other.rollout_s,
            scoring_s=self.scoring_s + other.scoring_s,
            traces=dict(traces),
        )

    @classmethod
    def merged(cls, parts: Sequence[RolloutStats]) -> RolloutStats:
        out = cls()
        for part in parts:
            out = out.merge(part)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failure_rate": self.failure_rate}


_HTTP_RE = re.compile(r"\(HTTP (\d{3})\)|Error code: (\d{3})")


def _status_of(errors: Sequence[str]) -> str:
    """What the errors say about an endpoint: an HTTP status, unreachable, or timing out."""
    for text in errors:
        m = _HTTP_RE.search(text)
        if m:
            return f"HTTP {m.group(1) or m.group(2)}"
    joined = " ".join(errors)
    if "connection" in joined.lower() or "ConnectError" in joined:
        return "unreachable"
    if "Timeout" in joined or "timed out" in joined or "no reply" in joined:
        return "timing out"
    return "failing"


def failing_endpoint(stats: RolloutStats, config: RolloutConfig, sandbox_url: str | None) -> str:
    """``'<what> <url>: <status>'`` for the endpoint most of the first errors point at."""
    errors = stats.errors
    boxed = [e for e in errors if e.startswith("SandboxError")]
    games = [e for e in errors if e.startswith("OpenEnvError")]
    if boxed and len(boxed) >= len(errors) / 2:
        return f"sandbox endpoint {endpoint_label(sandbox_url) or '(none)'}: {_status_of(boxed)}"
    if games and len(games) >= len(errors) / 2:
        where = endpoint_label(config.openenv_base_url) or "in-process"
        return f"OpenEnv environments ({where}): {_status_of(games)}"
    if config.replay:
        return f"replay policy: {_status_of(errors)}"
    return f"policy endpoint {endpoint_label(config.policy.base_url)}: {_status_of(errors)}"


def check_failure_rate(
    stats: RolloutStats,
    max_failure_rate: float,
    *,
    stage: str = "rollout",
    config: RolloutConfig | None = None,
    sandbox_url: str | None = None,
) -> str | None:
    """None when nothing failed; a warning line when failures stay within
    ``max_failure_rate``; raises ``RunFailedError`` (naming the failing endpoint and the
    first errors) above it.

    Example:
        >>> ok = RolloutStats.of([{'stop_reason': 'stop'}] * 3 + [{'error': 'E: x'}])
        >>> check_failure_rate(ok, 0.5)
        'rollout: 1 of 4 trajectories failed (25%, within max_failure_rate 50%): E: x'
        >>> check_failure_rate(RolloutStats.of([{'error': 'E: x'}]), 0.5)
        Traceback (most recent call last):
        ...
        twinkle.rollout.runner.RunFailedError: rollout: 1 of 1 trajectories failed ...
    """
    if not stats.failed:
        return None
    share = (
        f"{stats.failed} of {stats.trajectories} trajectories failed "
        f"({stats.failure_rate:.0%}, {{}} max_failure_rate {max_failure_rate:.0%})"
    )
    first = "; ".join(e[:300] for e in stats.errors[:3])
    if stats.failure_rate <= max_failure_rate:
        return f"{stage}: {share.format('within')}: {first}"
    where = failing_endpoint(stats, config or RolloutConfig(), sandbox_url)
    raise RunFailedError(
        f"{stage}: {share.format('over')}; {where}; first errors: {first}",
        stage=stage,
        stats=stats.as_dict(),
    )


@dataclass(slots=True)
class BatchResult:
    """What ``RolloutRunner.run`` returns: the scored trajectories in input order and the
    batch's figures (``stats``, timings included)."""

    trajectories: list[dict[str, Any]]
    stats: RolloutStats


def openenv_rows(names: Sequence[str], episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """Prompt rows of OpenEnv episodes: ``user_data`` names the env and the episode's reset seed,
    ``seed + k`` for episode k (so a rerun replays the same episodes, another ``seed`` draws new
    ones), and so does the row id; the env's first observation and its tool schemas are added
    when the env is provisioned.

    Example:
        >>> [r['id'] for r in openenv_rows(['number_guess'], 2, seed=5)]
        ['openenv-number_guess-5', 'openenv-number_guess-6']
    """
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


def task_environments(endpoint: Mapping[str, Any] | None) -> dict[str, Any]:
    """Task environments that must not use their defaults here: the code environment grades
    model-written code in the run's sandbox server, never in a host subprocess."""
    if not endpoint or endpoint.get("error"):
        return {}
    from twinkle.core.environments import CodeEnvironment

    code = CodeEnvironment(sandbox_url=endpoint["api_url"], sandbox_api_key=endpoint["api_key"])
    return {"code": code, "tasks/code": code}


def _failed(trajectory: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
    return {
        **trajectory,
        "rewards": {},
        "reward_outcome": "failed",
        "reward_error": reason or trajectory.get("error") or trajectory.get("stop_reason"),
    }


def score(
    recorded: Mapping[str, Any],
    trajectory: dict[str, Any],
    replay: bool,
    environments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Rewards of one finished trajectory: its task environment via the bridge, or replay
    fidelity; none for a trajectory that failed (errors are never rewards)."""
    from twinkle.data_format import user_data_get

    if is_failed(trajectory):
        return _failed(trajectory)
    if user_data_get(trajectory.get("user_data"), "env"):
        from twinkle.integrations.rollout_bridge import score_trajectories

        result = score_trajectories([trajectory], environments=environments)[0]
    elif replay:
        from twinkle.integrations.replay import replay_fidelity

        result = replay_fidelity(recorded, trajectory)
    else:
        result = {
            "rewards": {},
            "outcome": "unscored",
            "error": "a conversation rolled out by a live policy has no reward function",
        }
    return {
        **trajectory,
        "rewards": result["rewards"],
        "reward_outcome": result["outcome"],
        "reward_error": result["error"],
        "extracted_answer": result.get("extracted_answer"),  # the feedback's rationale
    }


def score_episode(trajectory: dict[str, Any], reward: float | None) -> dict[str, Any]:
    """Rewards of an OpenEnv episode: the env's cumulative ``episode_reward`` (None: no env);
    none for an episode that failed."""
    if reward is None or is_failed(trajectory):
        return _failed(trajectory, trajectory.get("error") or "no environment")
    return {
        **trajectory,
        "rewards": {"episode_reward": reward, "total": reward},
        "reward_outcome": "solved" if reward > 0 else "unsolved",
        "reward_error": None,
    }


def policy_api(
    policy: PolicyConfig, rows: Sequence[Mapping[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    """The chat API and the prompts to roll out: replay of ``rows`` or an OpenAI endpoint."""
    from twinkle.protocol.replay import ReplayAPI

    if policy.replay:
        return ReplayAPI.from_rows(list(rows))
    from twinkle.protocol.openai import OpenAI

    key = os.environ.get(policy.api_key_env) if policy.api_key_env else None
    api = OpenAI(policy.model, api_key=key or "EMPTY", base_url=policy.base_url, max_retries=2)
    return api, [ReplayAPI.prompt_of(r) for r in rows]


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

    # -- environments ---------------------------------------------------------------------
    def provision_sandboxes(self, n: int) -> list[tuple[Any, str | None]]:
        """One fresh sandbox (``AgentEnv``) per trajectory, created concurrently;
        (env, error) pairs."""
        endpoint, c = self.endpoint, self.config
        if endpoint is None or endpoint.get("error"):
            return [(None, (endpoint or {}).get("error") or "no sandbox endpoint")] * n
        from twinkle.envs.agentenv import AgentEnv

        def one(_: int) -> tuple[Any, str | None]:
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
                return None, f"{type(exc).__name__}: {exc}"

        return _in_parallel(one, range(n), c.concurrency)

    def provision_openenvs(
        self, prompts: Sequence[dict[str, Any]]
    ) -> list[tuple[Any, str | None, dict[str, Any]]]:
        """One fresh OpenEnv environment per episode prompt (in-process ``OpenEnv``, or an
        ``OpenEnvClient`` session on ``config.openenv_base_url``), reset with the episode's
        seed; (env, error, prompt) triples, the prompt completed with the env's first
        observation and its real tool schemas.

        ``openenv_env_kwargs`` only apply in-process: an OpenEnv server builds each
        session's environment with its own settings, so an episode given arguments against
        a server fails with that reason rather than silently playing other settings."""
        from twinkle.data_format import user_data_get
        from twinkle.envs.openenv import OpenEnv, OpenEnvClient

        base_url, env_kwargs = self.config.openenv_base_url, self.config.openenv_env_kwargs

        def one(prompt: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any]]:
            ud = prompt.get("user_data")
            env = None
            try:
                name = user_data_get(ud, "openenv")
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
                first = env.reset(seed=user_data_get(ud, "seed"))
                tools = env.tools()
            except Exception as exc:  # noqa: BLE001 - this episode fails with the reason
                if env is not None:
                    with contextlib.suppress(Exception):
                        env.close()
                return None, f"{type(exc).__name__}: {exc}", prompt
            messages = [dict(m) for m in prompt["messages"]]
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{first.observation}"
            return env, None, {**prompt, "messages": messages, "tools": tools}

        return _in_parallel(one, list(prompts), self.config.concurrency)

    # -- the batch ------------------------------------------------------------------------
    def run(self, rows: Sequence[Mapping[str, Any]], checkpoint: str | None = None) -> BatchResult:
        """Provision, roll out and score ``rows``; environments are closed before it returns.

        ``checkpoint``: a JSONL file that each trajectory finished without error is appended
        to as it finishes; a run given the file of a run that crashed keeps those (traced and
        counted again, never re-requested) and rolls out only the rest. The caller removes
        the file once it has the batch's output.
        """
        from twinkle.data_format import user_data_get

        c = self.config
        started = time.perf_counter()
        api, prompts = policy_api(c.policy, rows)
        kept = load_checkpoint(checkpoint, rows) if checkpoint else {}
        todo = [i for i in range(len(rows)) if i not in kept]
        # OpenEnv episodes get an OpenEnv environment, every other row a sandbox.
        games = [i for i in todo if user_data_get(rows[i].get("user_data"), "openenv")]
        episodes = set(games)
        boxed = [i for i in todo if i not in episodes]
        envs: list[tuple[Any, str | None]] = [(None, None)] * len(prompts)
        for i, pair in zip(boxed, self.provision_sandboxes(len(boxed))):
            envs[i] = pair
        if games:
            provisioned = self.provision_openenvs([prompts[i] for i in games])
            for i, (env, error, prompt) in zip(games, provisioned):
                envs[i], prompts[i] = (env, error), prompt
        toolsets: dict[int, list[Any]] = {}
        provisioned_at = time.perf_counter()
        task_envs = task_environments(self.endpoint)
        scoring_s = [0.0]
        finished = [0]
        lock = threading.Lock()

        def done(i: int, traj: dict[str, Any], resumed: bool = False) -> dict[str, Any]:
            t0 = time.perf_counter()
            if resumed:
                scored = traj
            elif i in episodes:
                reward = toolsets[i][0].episode_reward if i in toolsets else None
                scored = score_episode(traj, reward)
            else:
                scored = score(rows[i], traj, c.replay, task_envs)
            scoring_s[0] += time.perf_counter() - t0
            if checkpoint and not resumed and not is_failed(scored):
                line = json.dumps({"index": i, "trajectory": scored}, default=str) + "\n"
                with lock, open(checkpoint, "a", encoding="utf-8") as f:
                    f.write(line)
            if self.on_done is not None:
                self.on_done(i, scored)
            finished[0] += 1
            if self.on_progress is not None:
                self.on_progress(finished[0], len(prompts))
            return scored

        trajectories: list[Any] = [None] * len(prompts)
        try:
            for i, traj in sorted(kept.items()):
                trajectories[i] = done(i, traj, resumed=True)
            for i in todo:
                env, error = envs[i]
                if env is None:
                    kind = "OpenEnvError" if i in episodes else "SandboxError"
                    failed = {
                        **prompts[i],
                        "turns": 0,
                        "stop_reason": "error",
                        "truncated": True,
                        "turn_log": [],
                        "error": f"{kind}: {error}",
                    }
                    trajectories[i] = done(i, failed)
            ready = [i for i in todo if envs[i][0] is not None]
            if ready:
                toolsets.update({i: _env_tools(envs[i][0]) for i in ready})
                outputs = self._roll(api, ready, prompts, toolsets, done)
                for i, traj in zip(ready, outputs):
                    trajectories[i] = traj
        finally:
            for env, _ in envs:
                if env is not None:
                    with contextlib.suppress(Exception):  # one failing must not leak the others
                        env.close()
        rolled = time.perf_counter()
        stats = RolloutStats.of(
            trajectories,
            provision_s=provisioned_at - started,
            rollout_s=rolled - provisioned_at,
            scoring_s=scoring_s[0],
        )
        return BatchResult(trajectories=trajectories, stats=stats)

    def _roll(
        self,
        api: Any,
        ready: list[int],
        prompts: list[dict[str, Any]],
        toolsets: dict[int, list[Any]],
        done: Callable[[int, dict[str, Any]], dict[str, Any]],
    ) -> list[Any]:
        """Roll out ``ready`` on one event loop, ``done(i, trajectory)`` in a worker thread as
        each finishes (``APIMultiTurnRollout.acall`` per trajectory, at most ``concurrency``
        in flight), so scoring and tracing overlap the rest."""
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

        async def main() -> list[Any]:
            gate = asyncio.Semaphore(rollout.concurrency)

            async def one(i: int) -> Any:
                async with gate:
                    manager = ToolManager(toolsets[i])
                    out = (await rollout.acall([prompts[i]], tool_manager=[manager]))[0]
                return await asyncio.to_thread(done, i, out)

            return await asyncio.gather(*(one(i) for i in ready))

        return rollout.run_in_own_loop(main)


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
