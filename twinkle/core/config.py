"""Environments from configuration: ``EnvironmentConfig``, ``JudgeConfig``, ``EnvironmentFactory``.

One YAML file names environments by adapter and name, each with its config, its cleaners
and an optional judge; :class:`EnvironmentFactory` builds them through the registry and
applies the cleaning layer automatically (the environment's answer extractor is rebuilt
with the configured pre- and post-cleaners)::

    judge:                      # default judge for every environment (optional)
      base_url: http://127.0.0.1:8000/v1
      model: judge
      template: correctness
      weight: 0.5
    environments:
      - adapter: reasoning_gym
        name: leg_counting
        config: {size: 50, seed: 42}
        cleaners: {pre: [strip_special_tokens, strip_thinking_tokens], post: []}
      - adapter: gymnasium
        name: FrozenLake-v1
        id: lake                # the key in the result (default "adapter/name")
        config: {is_slippery: false}
        judge: null             # no judge here

``adapter/name?key=value&...`` strings (``--tasks`` on the command line) parse into the
same :class:`EnvironmentConfig` (values are JSON where they parse, else strings).

Example:
    >>> cfg = EnvironmentConfig.parse("reasoning_gym/leg_counting?size=5&seed=1")
    >>> cfg.adapter, cfg.name, cfg.config, cfg.key
    ('reasoning_gym', 'leg_counting', {'size': 5, 'seed': 1}, 'reasoning_gym/leg_counting')
    >>> env = EnvironmentFactory().build(EnvironmentConfig("tasks", "math", {"limit": 2},
    ...                                  post_cleaners=["strip_latex_dollars"]))
    >>> len(env), env.extractor.extract("\\\\boxed{$4$}")[0]
    (2, '4')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

__all__ = [
    "EPISODES_KEY",
    "EnvironmentConfig",
    "EnvironmentFactory",
    "JudgeConfig",
    "env_file_tasks",
    "load_environments",
]

#: The config key of a multi-turn entry that says how many episodes the rollout plays: the
#: rollout's, never passed to the environment's constructor (``EnvironmentFactory.build``).
EPISODES_KEY = "episodes"
#: adapters whose environment takes the judge as ``judge=`` instead of ``extra_rewards``
_JUDGE_KWARG = {"dialogue": "judge"}


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@dataclass(frozen=True)
class JudgeConfig:
    """An LLM judge at an OpenAI-compatible endpoint, scored as an extra reward.

    Example:
        >>> JudgeConfig.from_dict({"base_url": "http://h/v1", "model": "j"}).template
        'correctness'
    """

    base_url: str
    model: str
    template: str = "correctness"
    api_key: str = "EMPTY"
    name: str = "judge"
    weight: float = 1.0
    default_score: float = 0.0
    max_concurrency: int = 64
    timeout_s: float = 60.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeConfig:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"judge: unknown keys {sorted(unknown)}")
        return cls(**data)

    def build(self) -> Any:
        from twinkle.core.judge import JudgeReward

        return JudgeReward.from_endpoint(
            self.base_url,
            self.model,
            self.template,
            api_key=self.api_key,
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s,
            name=self.name,
            weight=self.weight,
            default_score=self.default_score,
        )


@dataclass(frozen=True)
class EnvironmentConfig:
    """One environment: adapter, name, constructor config, cleaners, judge.

    ``pre_cleaners``/``post_cleaners`` None keep the environment's own defaults.
    """

    adapter: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    pre_cleaners: list[Any] | None = None
    post_cleaners: list[Any] | None = None
    judge: JudgeConfig | None = None
    id: str | None = None

    @property
    def key(self) -> str:
        return self.id or f"{self.adapter}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> EnvironmentConfig:
        """``adapter/name?key=value&key=value`` (a bare built-in name means ``tasks``)."""
        spec, _, query = text.strip().partition("?")
        adapter, sep, name = spec.partition("/")
        if not sep:
            adapter, name = "tasks", spec
        if not adapter or not name:
            raise ValueError(f"expected 'adapter/name[?key=value&...]', got {text!r}")
        config = {k: _value(v) for k, v in parse_qsl(query, keep_blank_values=True)}
        return cls(adapter, name, config)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], default_judge: JudgeConfig | None = None
    ) -> EnvironmentConfig:
        known = {"adapter", "name", "config", "cleaners", "judge", "id"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"environment entry: unknown keys {sorted(unknown)} (use {known})")
        if "adapter" not in data or "name" not in data:
            raise ValueError(f"environment entry needs 'adapter' and 'name': {dict(data)}")
        cleaners = data.get("cleaners") or {}
        if not isinstance(cleaners, Mapping) or set(cleaners) - {"pre", "post"}:
            raise ValueError("cleaners: expected {pre: [...], post: [...]}")
        judge = default_judge
        if "judge" in data:
            judge = JudgeConfig.from_dict(data["judge"]) if data["judge"] else None
        return cls(
            adapter=str(data["adapter"]),
            name=str(data["name"]),
            config=dict(data.get("config") or {}),
            pre_cleaners=cleaners.get("pre"),
            post_cleaners=cleaners.get("post"),
            judge=judge,
            id=data.get("id"),
        )


class EnvironmentFactory:
    """Builds environments from :class:`EnvironmentConfig` s, YAML files or spec strings.

    Args:
        registry: the environment registry (default the process-wide one).
    """

    def __init__(self, registry: Any = None) -> None:
        if registry is None:
            from twinkle.core.registry import environment_registry

            registry = environment_registry
        self.registry = registry

    def build(self, cfg: EnvironmentConfig | str | Mapping[str, Any]) -> Any:
        """One environment, with its cleaners applied and its judge attached."""
        if isinstance(cfg, str):
            cfg = EnvironmentConfig.parse(cfg)
        elif isinstance(cfg, Mapping):
            cfg = EnvironmentConfig.from_dict(cfg)
        # ``episodes`` is the rollout's (how many episodes of a multi-turn entry to play),
        # never a constructor argument: a file written for the flow builds here as well.
        config = {k: v for k, v in cfg.config.items() if k != EPISODES_KEY}
        if cfg.judge is not None:
            judge = cfg.judge.build()
            kwarg = _JUDGE_KWARG.get(cfg.adapter)
            if kwarg:
                config[kwarg] = judge
            else:
                config["extra_rewards"] = [*config.get("extra_rewards", ()), judge]
        env = self.registry.get(cfg.name, cfg.adapter, **config)
        if cfg.pre_cleaners is not None or cfg.post_cleaners is not None:
            apply_cleaners(env, cfg.pre_cleaners, cfg.post_cleaners)
        return env

    def build_all(self, configs: list[EnvironmentConfig]) -> dict[str, Any]:
        envs: dict[str, Any] = {}
        for cfg in configs:
            if cfg.key in envs:
                raise ValueError(f"two environments share the key {cfg.key!r}; give each an id")
            envs[cfg.key] = self.build(cfg)
        return envs

    def from_yaml(self, path: str | Path) -> dict[str, Any]:
        """``{key: environment}`` for every entry of a YAML file (in file order)."""
        return self.build_all(load_environments(path))


def load_environments(path: str | Path) -> list[EnvironmentConfig]:
    """The :class:`EnvironmentConfig` entries of a YAML file (``environments:`` list)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if isinstance(data, list):
        data = {"environments": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("environments"), list):
        raise ValueError(f"{path}: expected a mapping with an 'environments' list")
    judge = JudgeConfig.from_dict(data["judge"]) if data.get("judge") else None
    configs = [EnvironmentConfig.from_dict(entry, judge) for entry in data["environments"]]
    return [_beside(cfg, Path(path).resolve().parent) for cfg in configs]


def env_file_tasks(path: str | Path | None) -> list[str]:
    """One ``@<file>#<key>`` task spec per environment of a YAML file (none for None).

    The rollout bridge rebuilds each environment from its spec, so a flow or a CLI run
    names the file once and every entry becomes a task of its own.

    Example:
        >>> env_file_tasks(None)
        []
    """
    if not path:
        return []
    resolved = Path(path).resolve()
    return [f"@{resolved}#{cfg.key}" for cfg in load_environments(resolved)]


def _beside(cfg: EnvironmentConfig, folder: Path) -> EnvironmentConfig:
    """A relative ``path`` in the config that exists next to the YAML file, made absolute
    (so the file works from any directory, and on workers)."""
    value = cfg.config.get("path")
    if isinstance(value, str) and not Path(value).expanduser().is_absolute():
        candidate = folder / value
        if candidate.exists():
            return replace(cfg, config={**cfg.config, "path": str(candidate)})
    return cfg


def apply_cleaners(env: Any, pre: list[Any] | None, post: list[Any] | None) -> None:
    """Rebuild ``env``'s answer extractor with these cleaners (None keeps a side's default).

    Environments with ``set_cleaners`` (the adapters) use it; others with a
    ``CleanedExtractor`` in ``extractor`` get it rebuilt. Non-extracting environments
    (dialogue, openenv) raise ``ValueError``: cleaners would do nothing there.
    """
    if callable(getattr(env, "set_cleaners", None)):
        env.set_cleaners(pre, post)
        return
    from twinkle.core.extraction import CleanedExtractor

    current = getattr(env, "extractor", None)
    if not isinstance(current, CleanedExtractor):
        name = getattr(getattr(env, "spec", None), "name", type(env).__name__)
        raise ValueError(f"environment {name!r} has no answer extractor to clean")
    env.extractor = CleanedExtractor(
        current.inner,
        pre_cleaners=current.pre_cleaners if pre is None else pre,
        post_cleaners=current.post_cleaners if post is None else post,
    )
