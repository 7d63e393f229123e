"""Bridge task environments and the rollouts: tasks in as trajectories, trajectories out as rewards.

``APIMultiTurnRollout`` and ``MultiTurnRollout`` consume and return trajectory dicts
(``messages``, ``tools``, ``id``, ``user_data``). This module turns task items into such
dicts, recording which environment and task each came from in ``user_data``, and scores
the rollouts' outputs with that environment: the action scored is the environment's
``action_from_messages(messages)`` (the final assistant text; for ``code`` also every
``write_file``/``submit_solution`` tool call), and the result is a ``SignalBundle`` per
trajectory plus a flat ``{name: value}`` dict for tracking. Stdlib only.

Functions the flow calls (exact signatures)::

    trajectories_for(env_name: str, indices: Sequence[int] | None = None, *,
                     adapter: str | None = None, system_prompt: str | None = None,
                     tools: Sequence[dict] | None = None, **config) -> list[dict]

    items_to_trajectories(items: Iterable[TaskItem], env_name: str, *,
                          adapter: str | None = None, system_prompt: str | None = None,
                          tools: Sequence[dict] | None = None) -> list[dict]

    score_trajectories(trajectories: Sequence[dict], env_name: str | None = None, *,
                       adapter: str | None = None,
                       environments: Mapping[str, Environment] | None = None,
                       default: float = 0.0, **config) -> list[dict]

Each input trajectory carries ``user_data`` pairs ``("env", "tasks/math")``,
``("task_index", 3)``, ``("task_id", "math-004")``, ``("ground_truth", "...")`` and
``("id", "math/math-004")`` (values JSON-packed with ``pack_value``). ``env_name``, when
given, overrides the trajectory's own. Each score dict has:

* ``id``, ``env`` (``"adapter/name"``), ``task_index``;
* ``bundle``: the :class:`~twinkle.core.signals.SignalBundle`;
* ``rewards``: ``{"total": float, <signal name>: float | None, ...}``;
* ``outcome``: ``correct`` / ``wrong`` / ``unparsed`` / ``error``;
* ``extracted_answer``; ``stop_reason`` and ``truncated`` copied from the trajectory;
* ``error``: why it could not be scored, or None.

``score_trajectories`` never raises for a bad trajectory: it gets the ``default`` reward in
a ``score_error`` signal, and the reason.

Multi-turn environments (gymnasium, gem games, textarena, dialogue) have no task rows:
``trajectories_for`` refuses them, and a caller tells them apart with
``is_episode_spec(spec)`` and plays them as episodes (``twinkle.envs.RegistryEnv``,
``build_environment``; ``episode_count`` and ``episode_seed`` read how many and from which
seed).

Example:
    >>> rows = trajectories_for("math", [0])
    >>> rows[0]["messages"][-1]["role"], rows[0]["id"]
    ('user', 'math/math-001')
    >>> rows[0]["messages"].append({"role": "assistant", "content": "\\\\boxed{18}"})
    >>> [s["rewards"]["total"] for s in score_trajectories(rows)]
    [1.0]
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twinkle.core.config import EPISODES_KEY
from twinkle.core.state import Action
from twinkle.data_format import message_text, pack_value, user_data_get
from twinkle.integrations.dataset import DatasetProvider, TaskItem
from twinkle.integrations.scorer import Scorer, ScoringResult, error_bundle

__all__ = [
    "EPISODES_KEY",
    "build_environment",
    "episode_count",
    "episode_seed",
    "is_episode_spec",
    "items_to_trajectories",
    "score_trajectories",
    "spec_config",
    "trajectories_for",
]


def items_to_trajectories(
    items: Iterable[TaskItem],
    env_name: str,
    *,
    adapter: str | None = None,
    system_prompt: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Rollout input rows for task items of environment ``env_name``.

    ``tools`` (OpenAI function tools) are added to the environment's own; with none at
    all, the row has no ``tools`` key and the rollout's tool manager decides.
    """
    qualified = f"{adapter}/{env_name}" if adapter else env_name
    short = env_name.split("/")[-1]
    rows = []
    for item in items:
        messages = [dict(m) for m in item.messages]
        if system_prompt and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system_prompt})
        row_id = f"{short}/{item.task_id}"
        row: dict[str, Any] = {
            "id": row_id,
            "messages": messages,
            "user_data": [
                ("id", pack_value(row_id)),
                ("env", pack_value(qualified)),
                ("task_index", pack_value(item.task_index)),
                ("task_id", pack_value(item.task_id)),
                (
                    "ground_truth",
                    pack_value(item.ground_truth if item.ground_truth is not None else ""),
                ),
            ],
        }
        all_tools = [t.to_openai() for t in item.available_tools] + [dict(t) for t in tools or ()]
        if all_tools:
            row["tools"] = all_tools
        rows.append(row)
    return rows


def trajectories_for(
    env_name: str,
    indices: Sequence[int] | None = None,
    *,
    adapter: str | None = None,
    system_prompt: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    **config: Any,
) -> list[dict[str, Any]]:
    """Rollout input rows for tasks ``indices`` (all when None) of a registered environment.

    ``env_name`` may be a spec ``adapter/name?key=value&...`` (twinkle.core.config), or
    ``@envs.yaml#key`` for one entry of an environments file (``@envs.yaml``: all of them,
    with their cleaners and judges). The rows then record the whole spec as their ``env``,
    so scoring rebuilds the same tasks.
    """
    from twinkle.core.registry import environment_registry

    if env_name.startswith("@") and "#" not in env_name:  # every entry of a YAML file
        from twinkle.core.config import load_environments

        path = env_name[1:]
        return [
            row
            for cfg in load_environments(path)
            for row in trajectories_for(
                f"@{path}#{cfg.key}", indices, system_prompt=system_prompt, tools=tools, **config
            )
        ]
    if "?" in env_name or env_name.startswith("@"):
        from twinkle.core.config import EnvironmentConfig

        if env_name.startswith("@"):
            cfg = _yaml_entry(env_name)
            env = _spec_environment(env_name)
            _refuse_multi_turn(env, f"{cfg.adapter}/{cfg.name}")
            provider = DatasetProvider(env)
        else:
            cfg = EnvironmentConfig.parse(env_name)
            cfg = EnvironmentConfig(cfg.adapter, cfg.name, {**cfg.config, **config})
            provider = DatasetProvider(_build(cfg))
        rows = items_to_trajectories(
            provider.get_items(indices),
            cfg.name,
            adapter=cfg.adapter,
            system_prompt=system_prompt,
            tools=tools,
        )
        for row in rows:
            row["user_data"] = [
                ("env", pack_value(env_name)) if key == "env" else (key, value)
                for key, value in row["user_data"]
            ]
        return rows
    adapter, name = environment_registry.resolve(env_name, adapter)
    provider = DatasetProvider(environment_registry.get(name, adapter, **config))
    return items_to_trajectories(
        provider.get_items(indices), name, adapter=adapter, system_prompt=system_prompt, tools=tools
    )


def _build(cfg: Any) -> Any:
    """A single-turn environment of ``cfg``; a multi-turn one is refused (no task rows)."""
    env = build_environment(cfg)
    _refuse_multi_turn(env, f"{cfg.adapter}/{cfg.name}")
    return env


def _refuse_multi_turn(env: Any, name: str) -> None:
    if env.spec.is_multi_turn:
        raise ValueError(
            f"{name} is multi-turn: it has no task rows; play it as episodes "
            "(twinkle.envs.RegistryEnv; the rollout flow's tasks/envs do so for multi-turn "
            "entries, see is_episode_spec)"
        )


def spec_config(spec: str) -> Any:
    """The ``EnvironmentConfig`` of ``adapter/name?key=value`` or ``@envs.yaml#key``."""
    from twinkle.core.config import EnvironmentConfig

    return _yaml_entry(spec) if spec.startswith("@") else EnvironmentConfig.parse(spec)


def build_environment(spec: Any) -> Any:
    """A fresh environment of a spec string or an ``EnvironmentConfig``, single- or
    multi-turn (the factory leaves the rollout's ``episodes`` key out of its constructor)."""
    from twinkle.core.config import EnvironmentFactory

    cfg = spec_config(spec) if isinstance(spec, str) else spec
    return EnvironmentFactory().build(cfg)


def is_episode_spec(spec: str) -> bool:
    """Whether ``spec`` (``adapter/name?...`` or ``@envs.yaml#key``) names a multi-turn
    environment, played as episodes rather than rolled out as task rows. Builds the
    environment once (cached); a spec that cannot be built raises.

    Example:
        >>> is_episode_spec("gymnasium/FrozenLake-v1?is_slippery=false")
        True
        >>> is_episode_spec("reasoning_gym/leg_counting?size=2")
        False
    """
    return bool(_spec_environment(spec).spec.is_multi_turn)


def episode_count(spec: str, limit: int | None = None) -> int:
    """How many episodes of the multi-turn ``spec`` to play: its ``episodes`` config key (at
    most ``limit``), else ``limit``, else ``len(env)`` for an environment with a task list
    (dialogue scenarios), else 1.

    Example:
        >>> episode_count("gymnasium/FrozenLake-v1?episodes=5", limit=3)
        3
        >>> episode_count("gymnasium/FrozenLake-v1", limit=2)
        2
    """
    count = spec_config(spec).config.get(EPISODES_KEY)
    if count is None:
        if limit:
            return limit
        env = _spec_environment(spec)
        return len(env) if env.spec.supports_len else 1
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{spec}: {EPISODES_KEY} must be a positive integer, got {count!r}")
    return min(count, limit) if limit else count


def episode_seed(spec: str) -> int:
    """The reset seed of a multi-turn spec's first episode: its ``seed`` config key, else 0
    (episode k is reset with ``seed + k``, the adapters' own task-index convention)."""
    seed = spec_config(spec).config.get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def _yaml_entry(spec: str) -> Any:
    """The entry ``key`` of ``@path#key`` (a YAML file of twinkle.core.config)."""
    from twinkle.core.config import load_environments

    path, _, key = spec[1:].partition("#")
    for cfg in load_environments(path):
        if cfg.key == key:
            return cfg
    raise KeyError(f"{path}: no environment {key!r}")


@functools.lru_cache(maxsize=32)
def _spec_environment(spec: str) -> Any:
    """The environment of ``adapter/name?key=value`` or ``@envs.yaml#key``, built once (the
    runner scores one row at a time)."""
    return build_environment(spec)


def _final_text_action(messages: Sequence[Mapping[str, Any]]) -> Action:
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return Action.from_text(message_text(message))
    return Action.from_text("")


def _score_dict(traj: Any, env: str | None, index: Any, result: ScoringResult) -> dict[str, Any]:
    ok = isinstance(traj, Mapping)
    return {
        "id": (traj.get("id") or user_data_get(traj.get("user_data"), "id")) if ok else None,
        "env": env,
        "task_index": index,
        "bundle": result.bundle,
        "rewards": {"total": result.total, **result.signals},
        "outcome": result.outcome,
        "extracted_answer": result.extracted_answer,
        "stop_reason": traj.get("stop_reason") if ok else None,
        "truncated": traj.get("truncated") if ok else None,
        "error": result.error,
    }


def score_trajectories(
    trajectories: Sequence[Mapping[str, Any]],
    env_name: str | None = None,
    *,
    adapter: str | None = None,
    environments: Mapping[str, Any] | None = None,
    default: float = 0.0,
    **config: Any,
) -> list[dict[str, Any]]:
    """Score rollout outputs with their task environments (see the module docstring).

    Args:
        trajectories: rollout outputs (or inputs with assistant turns appended).
        env_name: score every trajectory with this environment instead of its own.
        adapter: the adapter of ``env_name``.
        environments: ready environments by ``"adapter/name"`` (or ``name``), used before
            the registry, e.g. a ``ContainerEnvironment`` or a code environment with a
            sandbox.
        default: the reward of a trajectory that cannot be scored.
        config: constructor arguments for environments built from the registry.
    """
    from twinkle.core.registry import environment_registry

    built: dict[str, Any] = dict(environments or {})
    out: list[dict[str, Any] | None] = [None] * len(trajectories)
    groups: dict[str, list[tuple[int, Any, Any]]] = {}

    def fail(k: int, env: str | None, index: Any, reason: str) -> None:
        result = ScoringResult.from_bundle(error_bundle(reason, default), None, reason)
        out[k] = _score_dict(trajectories[k], env, index, result)

    def _environment(name: str) -> tuple[str, Any]:
        if name in built:
            return name, built[name]
        if "?" in name or name.startswith("@"):  # a spec: the rows' own configured tasks
            built[name] = _spec_environment(name)
            return name, built[name]
        owner, short = environment_registry.resolve(name, adapter)
        key = f"{owner}/{short}"
        if key not in built:
            built[key] = built.get(short) or environment_registry.get(short, owner, **config)
        return key, built[key]

    for k, traj in enumerate(trajectories):
        if not isinstance(traj, Mapping) or not isinstance(traj.get("messages"), list):
            fail(k, env_name, None, "malformed trajectory: expected a dict with a 'messages' list")
            continue
        user_data = traj.get("user_data")
        name = env_name or user_data_get(user_data, "env")
        index = user_data_get(user_data, "task_index")
        if not isinstance(name, str) or not name:
            fail(k, None, index, "no environment: pass env_name or put 'env' in user_data")
            continue
        if not isinstance(index, int) or isinstance(index, bool):
            fail(k, name, index, "no integer 'task_index' in user_data")
            continue
        try:
            key, env = _environment(name)
        except Exception as exc:  # noqa: BLE001 - unknown environment, bad config: this row fails, not the batch
            fail(k, name, index, f"{type(exc).__name__}: {exc}")
            continue
        to_action = getattr(env, "action_from_messages", None) or _final_text_action
        try:
            action = to_action(traj["messages"])
        except Exception as exc:  # noqa: BLE001 - a broken conversation is one failed row
            fail(k, key, index, f"could not read the answer: {type(exc).__name__}: {exc}")
            continue
        groups.setdefault(key, []).append((k, index, action))

    for key, members in groups.items():
        try:
            scorer = Scorer(built[key], default=default, workers=8)
        except TypeError as exc:
            for k, index, _ in members:
                fail(k, key, index, str(exc))
            continue
        results = scorer.score_batch([m[1] for m in members], [m[2] for m in members])
        for (k, index, _), result in zip(members, results):
            out[k] = _score_dict(trajectories[k], key, index, result)
    return [o for o in out if o is not None]
