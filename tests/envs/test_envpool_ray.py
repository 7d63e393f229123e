"""``EnvPool`` sharded over real Ray actors (a one-CPU local Ray runtime)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import ray

from twinkle.envs import EnvPool, EnvPoolAdapter, EnvTool
from twinkle.tools import ToolManager

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    if ray.is_initialized():  # another test module's runtime: share it, leave it running
        yield
        return
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@dataclass
class Mesh:
    world_size: int


@pytest.fixture(scope="module")
def pool(ray_runtime) -> Iterator[EnvPool]:
    p = EnvPool(
        pool_size=5,
        device_mesh=Mesh(world_size=2),
        env_kwargs={"env_name": "number_guess"},
        timeout_s=120,
    )
    yield p
    p.close()


def test_geometry_is_known_on_the_driver(pool):
    assert pool.remote and (pool.pool_size, pool.world_size) == (5, 2)
    adapters = pool.get_adapters(5)
    assert [a.idx for a in adapters] == [0, 1, 2, 3, 4]
    assert all(isinstance(a, EnvPoolAdapter) for a in adapters)
    with pytest.raises(ValueError, match="Requested 6 adapters but pool only has 5 slots."):
        pool.get_adapters(6)


def test_adapters_route_to_their_shard_and_sum_rewards(pool):
    envs = pool.get_adapters()
    assert envs[4].reset(target=9).observation.startswith("Guess a number")
    assert envs[0].reset(target=2).observation.startswith("Guess a number")
    assert envs[4].step("guess", {"guess": 1}).observation == "Higher."
    last = envs[4].step("guess", {"guess": 9})
    assert (last.reward, last.done, last.info["episode_reward"]) == (1.0, True, 1.0)
    assert envs[4].episode_reward == 1.0 and envs[0].episode_reward == 0.0
    assert envs[0].step("guess", {"guess": 3}).observation == "Lower."  # slot 0 kept its own state


def test_batches_keep_the_callers_order(pool):
    resets = pool.reset_batch([3, 1, 4], target=7)
    assert len(resets) == 3
    steps = pool.step_batch([4, 1, 3], ["guess"] * 3, [{"guess": 7}, {"guess": 8}, {"guess": 6}])
    assert [s.observation for s in steps] == ["Correct! The number was 7.", "Lower.", "Higher."]


def test_tool_names_reach_the_tool_manager(pool):
    env = pool.get_adapters(1)[0]
    manager = ToolManager(EnvTool.from_env(env))
    assert manager.names() == ["guess"]
    env.reset(target=5)
    assert (
        manager({"function": {"name": "guess", "arguments": '{"guess": 5}'}})
        == "Correct! The number was 5."
    )


def _wait_until_dead(actor, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.tools.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed shard actor is still answering")


def test_a_dead_shard_ends_only_its_episodes(pool):
    # Runs last in this module: it kills shard 1 (slots 3 and 4) of the shared pool.
    a, b = pool.get_adapters()[0], pool.get_adapters()[4]
    a.reset(target=1)
    b.reset(target=1)
    shard = pool._shards[1]
    ray.kill(shard, no_restart=True)
    _wait_until_dead(shard)  # ray.kill is asynchronous: a step could still reach the actor
    broken = b.step("guess", {"guess": 1})
    assert broken.done and broken.observation.startswith("Error: ") and "error" in broken.info
    assert a.step("guess", {"guess": 1}).reward == 1.0
    pool.close()  # tolerates the dead shard
    assert pool._shards == []
