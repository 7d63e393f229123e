"""EnvTool: from_env with and without schemas, manual construction, cumulative reward."""

import pytest

from twinkle.envs import EnvTool
from twinkle.envs.base import Env, StepResult
from twinkle.tools import ToolManager


class Counter(Env):
    """Each step earns 1.0 and reports a misleading per-step ``episode_reward`` in info."""

    def __init__(self, schemas=None):
        self.schemas = schemas or []
        self.calls = []

    def reset(self, trajectory=None):
        self.calls.clear()
        return StepResult(observation="ready")

    def step(self, tool_name, arguments):
        self.calls.append((tool_name, arguments))
        return StepResult(
            observation=f"{tool_name}:{arguments}",
            reward=1.0,
            done=len(self.calls) >= 3,
            info={"episode_reward": 99.0},
        )

    def tools(self):
        return self.schemas


SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "play",
            "description": "Play.",
            "parameters": {"type": "object", "properties": {"action": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "stand"}},
]


def test_generic_env_action_tool_has_a_real_schema():
    tools = EnvTool.from_env(Counter())
    assert len(tools) == 1
    info = tools[0].tool_info()
    assert info["function"]["name"] == "env_action"
    assert info["function"]["parameters"]["type"] == "object"
    assert "action" in info["function"]["parameters"]["properties"]


def test_one_tool_per_schema_sharing_the_episode():
    env = Counter(SCHEMAS)
    tools = EnvTool.from_env(env)
    manager = ToolManager(tools)
    assert manager.names() == ["play", "stand"]
    assert tools[1].tool_info()["function"]["description"] == ""
    assert (
        manager({"function": {"name": "play", "arguments": '{"action": "hit"}'}})
        == "play:{'action': 'hit'}"
    )
    manager({"function": {"name": "stand", "arguments": "{}"}})
    assert not tools[0].done
    manager({"function": {"name": "play", "arguments": "{}"}})
    # Cumulative over the episode, whatever the env puts in info, and shared by both tools.
    assert tools[0].episode_reward == tools[1].episode_reward == 3.0
    assert tools[1].done and tools[0].last_result.observation == "play:{}"
    tools[0].reset()
    assert tools[1].episode_reward == 0.0 and tools[1].last_result is None and env.calls == []


def test_manual_construction_and_bad_input():
    tool = EnvTool(
        Counter(),
        "execute_code",
        "Run code.",
        {"type": "object", "properties": {"code": {"type": "string"}}},
    )
    assert tool.tool_info()["function"]["description"] == "Run code."
    assert tool.episode_reward == 0.0 and not tool.done and tool.last_result is None
    manager = ToolManager([tool])
    assert manager({"function": {"name": "execute_code", "arguments": "[1, 2]"}}).startswith(
        "Error: tool 'execute_code' raised TypeError"
    )
    with pytest.raises(ValueError, match="without a function name"):
        EnvTool.from_schemas(Counter(), [{"type": "function", "function": {}}])
    with pytest.raises(ValueError, match="tool_name"):
        EnvTool(Counter(), "")
