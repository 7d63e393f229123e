"""Embedded ``OpenEnv`` and the in-process ``EnvPool`` over real OpenEnv environments."""

from __future__ import annotations

from typing import Any

import pytest
from openenv.core.env_server import Environment, MCPEnvironment, State

from twinkle.envs import EnvPool, EnvTool, OpenEnv
from twinkle.envs.openenv_envs.number_guess.server import NumberGuessEnvironment
from twinkle.tools import ToolManager

PKG = "twinkle.envs.openenv_envs.number_guess"


def call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


class DictEnv(Environment):
    """Returns plain dicts, with a None reward until the last step."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> dict[str, Any]:
        self.n = 0
        return {"observation": {"text": "ready"}, "reward": None, "done": False}

    def step(
        self, action: dict[str, Any], timeout_s: float | None = None, **kw: Any
    ) -> dict[str, Any]:
        self.n += 1
        done = self.n == 3
        return {"observation": {"output": action}, "reward": 0.5 if done else None, "done": done}

    @property
    def state(self) -> State:
        return State(step_count=self.n)


class CalcEnv(MCPEnvironment):
    """An MCP environment whose tools come from a FastMCP server."""

    def __init__(self) -> None:
        from fastmcp import FastMCP

        mcp = FastMCP("calc")

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        super().__init__(mcp)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
        from openenv.core.env_server import Observation

        return Observation()

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kw: Any) -> Any:
        raise ValueError(f"unsupported action {action!r}")

    @property
    def state(self) -> State:
        return State()


def test_discovery_by_short_name_package_and_class_path():
    for env in (
        OpenEnv(env_name="number_guess"),
        OpenEnv(env_name=PKG),
        OpenEnv(
            env_cls=f"{PKG}.server:NumberGuessEnvironment", action_cls=f"{PKG}.models.GuessAction"
        ),
    ):
        assert env.env_cls is NumberGuessEnvironment
        assert env.action_cls.__name__ == "GuessAction"


def test_action_class_from_the_environment_type_parameters():
    env = OpenEnv(env_cls=NumberGuessEnvironment)
    assert env.action_cls.__name__ == "GuessAction"
    env.reset(target=1)
    assert env.step("guess", {"guess": 1}).reward == 1.0


def test_construction_errors_are_clear():
    with pytest.raises(ValueError, match="Either 'env_name' or 'env_cls' is required"):
        OpenEnv()
    with pytest.raises(ModuleNotFoundError, match="pip install -e <OpenEnv checkout>/envs/no_such"):
        OpenEnv(env_name="no_such_env")
    with pytest.raises(ModuleNotFoundError, match="Cannot import module 'nowhere'"):
        OpenEnv(env_cls="nowhere:Env")
    with pytest.raises(ImportError, match="has no attribute 'Nope'"):
        OpenEnv(env_cls=f"{PKG}.server:Nope")


def test_tools_are_the_real_action_schema():
    env = OpenEnv(env_name="number_guess")
    (tool,) = env.tools()
    assert tool["function"]["name"] == "guess"
    assert tool["function"]["parameters"]["properties"]["guess"]["type"] == "integer"
    assert tool["function"]["parameters"]["required"] == ["guess"]
    custom = [{"type": "function", "function": {"name": "play", "parameters": {}}}]
    assert OpenEnv(env_name="number_guess", tool_schema=custom).tools() == custom


def test_episode_reward_is_cumulative_and_in_info():
    env = OpenEnv(env_name="number_guess", env_kwargs={"high": 10, "max_attempts": 3})
    first = env.reset(target=6)
    assert first.observation == "Guess a number between 1 and 10. You have 3 attempts."
    assert first.info == {"episode_reward": 0.0}
    wrong = env.step("guess", {"guess": 2})  # reward None on the wire
    assert (wrong.observation, wrong.reward, wrong.done) == ("Higher.", 0.0, False)
    right = env.step("guess", {"guess": 6})
    assert (right.reward, right.done, right.info["episode_reward"]) == (1.0, True, 1.0)
    assert env.episode_reward == 1.0
    assert env.reset(seed=1).info["episode_reward"] == 0.0 and env.episode_reward == 0.0


def test_dict_results_with_none_rewards():
    env = OpenEnv(env_cls=DictEnv, action_mapper=lambda tool, args: {"tool": tool, **args})
    assert env.reset().observation == "ready"
    assert env.step("poke", {"x": 1}).reward == 0.0
    env.step("poke", {})
    last = env.step("poke", {"x": 3})
    assert last.done and last.reward == 0.5 and last.info["episode_reward"] == 0.5
    assert last.observation == '{"tool": "poke", "x": 3}'


def test_bad_arguments_and_env_failures_are_observations():
    env = OpenEnv(env_name="number_guess")
    env.reset(target=5)
    bad = env.step("guess", {"guess": "five"})
    assert bad.observation.startswith(
        "Error: invalid arguments for 'guess': guess: Input should be a valid integer"
    )
    assert not bad.done
    extra = env.step("guess", {"guess": 5, "hint": True})  # Action models forbid extra fields
    assert extra.observation.startswith("Error: invalid arguments") and not extra.done
    broken = OpenEnv(env_name="number_guess", action_mapper=lambda tool, args: object())
    broken.reset(target=5)
    result = broken.step("guess", {"guess": 5})
    assert (
        result.done
        and result.observation.startswith("Error: AttributeError")
        and "error" in result.info
    )
    # The env broke, not the action: through the tools it ends the trajectory as an error.
    from twinkle.errors import EnvironmentFailure

    broken.reset(target=5)
    with pytest.raises(EnvironmentFailure, match="^OpenEnvError: AttributeError"):
        ToolManager(EnvTool.from_env(broken))(call("guess", '{"guess": 5}'))


def test_mcp_environment_tools_and_calls():
    env = OpenEnv(env_cls=CalcEnv)
    (tool,) = env.tools()
    assert tool["function"]["name"] == "add"
    assert set(tool["function"]["parameters"]["properties"]) == {"a", "b"}
    env.reset()
    assert env.step("add", {"a": 2, "b": 3}).observation == "5"
    assert env.step("nope", {}).observation.startswith("Error: ")
    env.close()


def test_env_tool_and_tool_manager_see_the_real_names():
    env = OpenEnv(env_name="number_guess")
    tools = EnvTool.from_env(env)
    manager = ToolManager(tools)
    assert manager.names() == ["guess"]
    tools[0].reset()
    env.reset(target=4)
    assert manager(call("guess", '{"guess": 9}')) == "Lower."
    assert manager(call("guess", '{"guess": 4}')) == "Correct! The number was 4."
    assert tools[0].done and tools[0].episode_reward == 1.0
    assert manager(call("env_action", "{}")).startswith("Error: unknown tool 'env_action'")


def test_local_pool_shards_and_routes():
    pool = EnvPool(pool_size=5, env_kwargs={"env_name": "number_guess"}, world_size=2)
    assert (pool.pool_size, pool.world_size) == (5, 2)
    assert [sorted(s.envs) for s in pool._shards] == [[0, 1, 2], [3, 4]]
    envs = pool.get_adapters()
    assert len(envs) == 5
    with pytest.raises(ValueError, match="Requested 6 adapters but pool only has 5 slots."):
        pool.get_adapters(6)
    results = pool.reset_batch([4, 0], target=3)
    assert [r.observation[:14] for r in results] == ["Guess a number"] * 2
    steps = pool.step_batch([0, 4], ["guess", "guess"], [{"guess": 3}, {"guess": 1}])
    assert [(s.observation, s.reward) for s in steps] == [
        ("Correct! The number was 3.", 1.0),
        ("Higher.", 0.0),
    ]
    with pytest.raises(IndexError):
        pool.reset(5)
    bad = envs[2].step("guess", {"guess": 1})  # never reset: the env ends the episode
    assert bad.done
    pool.close()
