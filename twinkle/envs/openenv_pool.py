"""``EnvPool``: embedded ``OpenEnv`` slots sharded in-process or over Ray actors.

``EnvPool`` keeps ``pool_size`` embedded envs in shards and ``EnvPoolAdapter`` is the
``Env`` over one slot. The driver knows the pool's geometry, so nothing needs a round trip
to answer "how many slots". Ray is imported only for ``remote=True`` (or ``EnvPool.remote``);
without a running Ray runtime a local one is started, as Ray's own libraries do.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from twinkle.envs.base import Env, StepResult
from twinkle.envs.openenv_discovery import (
    ToolInfo,
    error_result,
    import_env_package,
    import_openenv,
    reward_value,
)
from twinkle.envs.openenv_embedded import OpenEnv
from twinkle.utils.remote import ensure_ray, remote_class

__all__ = ["EnvPool", "EnvPoolAdapter"]

logger = logging.getLogger("twinkle.envs")


class _EnvShard:
    """Slots ``[start, end)`` of an ``EnvPool``, each an embedded ``OpenEnv``; runs in-process
    or as a Ray actor."""

    def __init__(self, start: int, end: int, env_kwargs: dict[str, Any]) -> None:
        self.start, self.end = start, end
        self.envs = {i: OpenEnv(**env_kwargs) for i in range(start, end)}

    def _env(self, idx: int) -> OpenEnv:
        try:
            return self.envs[idx]
        except KeyError:
            raise IndexError(f"slot {idx} is not in shard [{self.start}, {self.end})") from None

    def reset(self, idx: int, kwargs: dict[str, Any]) -> StepResult:
        return self._env(idx).reset(**kwargs)

    def step(self, idx: int, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        return self._env(idx).step(tool_name, arguments)

    def reset_batch(self, indices: list[int], kwargs: dict[str, Any]) -> list[StepResult]:
        return [self.reset(i, kwargs) for i in indices]

    def step_batch(self, calls: list[tuple[int, str, dict[str, Any]]]) -> list[StepResult]:
        return [self.step(*call) for call in calls]

    def tools(self) -> list[ToolInfo]:
        return self.envs[self.start].tools()

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


@remote_class()
class EnvPool:
    """``pool_size`` embedded ``OpenEnv`` slots, sharded in-process or over Ray actors.

    Each of the ``world_size`` shards owns ``ceil(pool_size / world_size)`` consecutive
    slots (the last may hold fewer); calls go straight to the owning shard. The driver keeps
    the geometry, so ``pool_size`` and ``get_adapters`` never need the actors.

    Args:
        pool_size: number of slots.
        device_mesh: where shards run; its ``world_size`` (or ``len``) sets the shard count
            and implies Ray actors.
        env_kwargs: ``OpenEnv`` constructor kwargs for every slot.
        world_size: shard count (default: from ``device_mesh``, else 1).
        remote: run shards as Ray actors (default: when a ``device_mesh`` is given). Without
            a running Ray runtime, ``ray.init()`` starts a local one; call
            ``ray.init(address=...)`` first to use a cluster.
        actor_options: ``ray.remote`` options per shard actor.
        timeout_s: limit for one remote call (None: wait).

    Example:
        >>> pool = EnvPool(pool_size=4, env_kwargs={'env_name': 'number_guess'}, world_size=2)
        >>> envs = pool.get_adapters(4)
        >>> _ = envs[3].reset(target=5)
        >>> envs[3].step('guess', {'guess': 5}).info['episode_reward']
        1.0
        >>> pool.close()
    """

    def __init__(
        self,
        pool_size: int = 32,
        device_mesh: Any = None,
        env_kwargs: dict[str, Any] | None = None,
        *,
        world_size: int | None = None,
        remote: bool | None = None,
        actor_options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if not isinstance(pool_size, int) or pool_size < 1:
            raise ValueError(f"pool_size must be a positive int, got {pool_size!r}")
        if world_size is None and device_mesh is not None:
            world_size = getattr(device_mesh, "world_size", None)
            if world_size is None and hasattr(device_mesh, "__len__"):
                world_size = len(device_mesh)
            if world_size is None:
                raise ValueError("device_mesh needs a world_size (or a length) to shard the pool")
        world_size = world_size or 1
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        self._pool_size = pool_size
        self._shard_size = math.ceil(pool_size / world_size)
        bounds = [
            (min(r * self._shard_size, pool_size), min((r + 1) * self._shard_size, pool_size))
            for r in range(world_size)
        ]
        self._bounds = [b for b in bounds if b[0] < b[1]]
        self.env_kwargs = dict(env_kwargs or {})
        self._remote = device_mesh is not None if remote is None else remote
        self.timeout_s = timeout_s
        self._tools: list[ToolInfo] | None = None
        if self._remote:
            if isinstance(self.env_kwargs.get("env_name"), str):
                # A missing package fails here, in one line, not inside every shard actor.
                import_openenv()
                import_env_package(self.env_kwargs["env_name"])
            ray = ensure_ray("EnvPool(remote=True)")
            actor = ray.remote(**(actor_options or {"num_cpus": 0}))(_EnvShard)
            self._shards: list[Any] = [actor.remote(s, e, self.env_kwargs) for s, e in self._bounds]
        else:
            self._shards = [_EnvShard(s, e, self.env_kwargs) for s, e in self._bounds]

    @property
    def pool_size(self) -> int:
        return self._pool_size

    @property
    def world_size(self) -> int:
        """Number of shards that own at least one slot."""
        return len(self._bounds)

    def _owner(self, idx: int) -> int:
        if not isinstance(idx, int) or not 0 <= idx < self._pool_size:
            raise IndexError(f"slot {idx!r} out of range for a pool of {self._pool_size}")
        return idx // self._shard_size

    def _call(self, shard: int, method: str, *args: Any) -> Any:
        target = getattr(self._shards[shard], method)
        if not self._remote:
            return target(*args)
        import ray

        return ray.get(target.remote(*args), timeout=self.timeout_s)

    def _gather(self, calls: dict[int, tuple[str, tuple[Any, ...]]]) -> dict[int, Any]:
        """One call per shard, run concurrently when remote."""
        if not self._remote:
            return {s: getattr(self._shards[s], m)(*a) for s, (m, a) in calls.items()}
        import ray

        refs = {s: getattr(self._shards[s], m).remote(*a) for s, (m, a) in calls.items()}
        values = ray.get(list(refs.values()), timeout=self.timeout_s)
        return dict(zip(refs, values))

    def reset(self, idx: int, **kwargs: Any) -> StepResult:
        return self._call(self._owner(idx), "reset", idx, kwargs)

    def step(self, idx: int, tool_name: str, arguments: dict[str, Any]) -> StepResult:
        return self._call(self._owner(idx), "step", idx, tool_name, arguments or {})

    def reset_batch(self, indices: list[int], **kwargs: Any) -> list[StepResult]:
        by_shard: dict[int, list[int]] = {}
        for i in indices:
            by_shard.setdefault(self._owner(i), []).append(i)
        results = self._gather({s: ("reset_batch", (ids, kwargs)) for s, ids in by_shard.items()})
        merged = {i: r for s, ids in by_shard.items() for i, r in zip(ids, results[s])}
        return [merged[i] for i in indices]

    def step_batch(
        self, indices: list[int], tool_names: list[str], arguments_list: list[dict[str, Any]]
    ) -> list[StepResult]:
        if not len(indices) == len(tool_names) == len(arguments_list):
            raise ValueError("indices, tool_names and arguments_list must have the same length")
        if len(set(indices)) != len(indices):
            raise ValueError("step_batch takes each slot at most once")
        by_shard: dict[int, list[tuple[int, str, dict[str, Any]]]] = {}
        for call in zip(indices, tool_names, arguments_list):
            by_shard.setdefault(self._owner(call[0]), []).append(call)
        results = self._gather({s: ("step_batch", (calls,)) for s, calls in by_shard.items()})
        merged = {c[0]: r for s, calls in by_shard.items() for c, r in zip(calls, results[s])}
        return [merged[i] for i in indices]

    def tools(self) -> list[ToolInfo]:
        """The slots' tool schemas (all slots run the same env; asked once, then cached)."""
        if self._tools is None:
            self._tools = self._call(0, "tools")
        return list(self._tools)

    def get_adapters(self, n: int | None = None) -> list[EnvPoolAdapter]:
        """``Env`` views of the first ``n`` slots (all by default)."""
        n = self._pool_size if n is None else n
        if n > self._pool_size:
            raise ValueError(f"Requested {n} adapters but pool only has {self._pool_size} slots.")
        return [EnvPoolAdapter(self, i) for i in range(n)]

    def close(self) -> None:
        """Close every env and stop the shard actors (best effort: a dead shard is skipped)."""
        shards, self._shards = self._shards, []
        if not self._remote:
            for shard in shards:
                shard.close()
            return
        import ray

        refs = [s.close.remote() for s in shards]
        for shard, ref in zip(shards, refs):
            try:
                ray.get(ref, timeout=self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - a dead shard must not block closing the rest
                logger.warning("closing an EnvPool shard failed: %r", exc)
            ray.kill(shard)


class EnvPoolAdapter(Env):
    """An ``Env`` over slot ``idx`` of an ``EnvPool``.

    A failing step (a dead actor, a timeout) returns ``done=True`` with ``info['error']``,
    so one broken slot never stalls a batch. ``close`` is a no-op: close the pool.

    Example:
        >>> pool = EnvPool(pool_size=1, env_kwargs={'env_name': 'number_guess'})
        >>> env = pool.get_adapters()[0]
        >>> _ = env.reset(target=2)
        >>> env.step('guess', {'guess': 9}).observation, env.tools()[0]['function']['name']
        ('Lower.', 'guess')
    """

    def __init__(self, pool: EnvPool, idx: int) -> None:
        self.pool = pool
        self.idx = idx
        self._episode_reward = 0.0

    def reset(self, trajectory: dict[str, Any] | None = None, **kwargs: Any) -> StepResult:
        self._episode_reward = 0.0
        return self.pool.reset(self.idx, **kwargs)

    def step(self, tool_name: str, arguments: dict[str, Any] | None = None) -> StepResult:
        try:
            result = self.pool.step(self.idx, tool_name, arguments or {})
        except Exception as exc:  # noqa: BLE001 - a dead actor or timeout ends this slot's episode
            return error_result(
                f"{type(exc).__name__}: {exc}", self._episode_reward, True, str(exc)
            )
        self._episode_reward += reward_value(result.reward)
        return StepResult(
            observation=result.observation,
            reward=reward_value(result.reward),
            done=result.done,
            info={**result.info, "episode_reward": self._episode_reward},
        )

    def tools(self) -> list[ToolInfo]:
        return self.pool.tools()

    @property
    def episode_reward(self) -> float:
        """Sum of this slot's step rewards since its last reset."""
        return self._episode_reward

    def close(self) -> None:
        """Nothing to do: the pool owns the env."""
