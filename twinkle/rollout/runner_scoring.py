"""Rewards of finished trajectories, and the prompts and policy a batch rolls out.

``score`` rewards a task trajectory through its environment (the rollout bridge) or a
re-run conversation by replay fidelity; ``score_episode`` an episode (OpenEnv, or a
multi-turn registry environment) by its cumulative ``episode_reward``. A trajectory that
failed gets no rewards, ``reward_outcome`` ``'failed'`` and its error as ``reward_error``.
``twinkle.rollout.runner`` re-exports these.

Example:
    >>> score_episode({'stop_reason': 'error', 'error': 'SandboxError: gone'}, 1.0)['rewards']
    {}
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from twinkle.rollout.runner_stats import PolicyConfig, is_failed

__all__ = [
    "OPENENV_SYSTEM",
    "is_registry_spec",
    "openenv_rows",
    "policy_api",
    "score",
    "score_episode",
    "task_environments",
]

#: The system prompt of an OpenEnv episode; the user message adds the env's first observation.
OPENENV_SYSTEM = (
    "You are an agent playing an interactive environment through its tools. Call one tool "
    "at a time, read each observation, and stop calling tools once the episode is over."
)


def openenv_rows(names: Sequence[str], episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """Prompt rows of episodes: ``user_data`` names the env and the episode's reset seed,
    ``seed + k`` for episode k (so a rerun replays the same episodes, another ``seed`` draws new
    ones), and so does the row id; the env's first observation and its tool schemas are added
    when the env is provisioned.

    A name is an OpenEnv package (``openenv-<name>-<seed>``) or a multi-turn registry spec
    (``adapter/name?...`` or ``@/path/envs.yaml#key``, played by ``RegistryEnv``): its rows
    are ``episode-<label>-<seed>``, the label the entry's key or ``adapter/name``, so ids
    and the prompt never hold a query string or the YAML file's absolute path.

    Example:
        >>> [r['id'] for r in openenv_rows(['number_guess'], 2, seed=5)]
        ['openenv-number_guess-5', 'openenv-number_guess-6']
        >>> [r['id'] for r in openenv_rows(['@/abs/envs.yaml#lake'], 1)]
        ['episode-lake-0']
    """
    from twinkle.data_format import pack_value

    return [
        {
            "id": f"{'episode' if is_registry_spec(name) else 'openenv'}-"
            f"{_episode_label(name)}-{seed + k}",
            "messages": [
                {"role": "system", "content": OPENENV_SYSTEM},
                {
                    "role": "user",
                    "content": f"Play the '{_episode_label(name)}' environment until the "
                    "episode ends, using its tools.",
                },
            ],
            "user_data": [["openenv", pack_value(name)], ["seed", pack_value(seed + k)]],
        }
        for name in names
        for k in range(episodes)
    ]


def is_registry_spec(name: object) -> bool:
    """Whether an episode's name is a registry spec (``adapter/name?...``, ``@envs.yaml#key``)
    rather than an OpenEnv package name (those have no ``/``).

    Example:
        >>> is_registry_spec("gymnasium/FrozenLake-v1"), is_registry_spec("number_guess")
        (True, False)
    """
    return isinstance(name, str) and ("/" in name or name.startswith("@"))


def _episode_label(name: str) -> str:
    """``@/path/envs.yaml#key`` -> ``key``; ``adapter/name?k=v`` -> ``adapter/name``."""
    if name.startswith("@"):
        return name.partition("#")[2] or name.rsplit("/", 1)[-1]
    return name.partition("?")[0]


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
    fidelity; none for a trajectory that failed (errors are never rewards), nor for one its
    environment could not grade (the grading sandbox failed, an unknown task): that one
    becomes failed too, ``stop_reason`` ``'error'``, the cause its ``error``."""
    from twinkle.data_format import user_data_get

    if is_failed(trajectory):
        return _failed(trajectory)
    if user_data_get(trajectory.get("user_data"), "env"):
        from twinkle.integrations.rollout_bridge import score_trajectories

        result = score_trajectories([trajectory], environments=environments)[0]
        if result["outcome"] == "error":
            why = _grading_error(result)
            kind = "SandboxError: grading" if why.startswith("sandbox failure") else "ScoringError"
            return _failed({**trajectory, "stop_reason": "error", "error": f"{kind}: {why}"})
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


def _grading_error(result: Mapping[str, Any]) -> str:
    """Why the environment could not grade: the result's error, else its signals'."""
    if result.get("error"):
        return str(result["error"])
    for signal in getattr(result.get("bundle"), "signals", None) or ():
        error = (getattr(signal, "metadata", None) or {}).get("error")
        if error:
            return str(error)
    return "the environment could not grade it"


def score_episode(trajectory: dict[str, Any], reward: float | None) -> dict[str, Any]:
    """Rewards of an episode (OpenEnv or ``RegistryEnv``): the env's cumulative
    ``episode_reward`` (None: no env); none for an episode that failed."""
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
