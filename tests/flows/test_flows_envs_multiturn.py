"""Multi-turn environments of the registry played as episodes: ``RegistryEnv`` on its own
(FrozenLake, a dialogue against a scripted user), then the rollout flow given an environments
file that mixes single-turn tasks and FrozenLake episodes, with a scripted policy served by
the local OpenAI-compatible server; the episode rewards reach MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client

LAKE = "gymnasium/FrozenLake-v1?is_slippery=false"
#: The default 4x4 map: SFFF / FHFH / FFFH / HFFG.
WIN = ["down", "down", "right", "right", "down", "right"]


def _play(env, moves):
    from twinkle.envs.env_tool import EnvTool

    tools = EnvTool.from_env(env)
    observations = [tools[0]("act", {"action": move}) for move in moves]
    return tools[0], observations


def test_frozen_lake_winning_path_ends_the_episode_with_reward_one():
    from twinkle.envs import RegistryEnv

    with RegistryEnv(LAKE) as env:
        first = env.reset(seed=0).observation
        assert "frozen lake" in first and "PFFF" in first
        assert [t["function"]["name"] for t in env.tools()] == ["act"]
        tool, observations = _play(env, WIN)
        assert tool.done and tool.episode_reward == 1.0 and env.episode_reward == 1.0
        assert "The episode ended; total reward 1" in observations[-1]
        # Only the board reaches the model: gym's info dict ({"prob": 1.0}) stays out.
        assert not any("prob" in o or "gym_info" in o for o in [first, *observations])
        after = env.step("act", {"action": "left"})
        assert after.done and after.reward == 0.0 and "episode is over" in after.observation


def test_frozen_lake_hole_ends_the_episode_with_reward_zero():
    from twinkle.envs import RegistryEnv

    with RegistryEnv(LAKE) as env:
        env.reset(seed=1)
        tool, observations = _play(env, ["right", "down"])  # (1, 1) is a hole
        assert tool.done and tool.episode_reward == 0.0
        assert "The episode ended; total reward 0" in observations[-1]


def test_unknown_actions_and_calls_are_explained_not_crashes():
    from twinkle.envs import RegistryEnv

    with RegistryEnv(LAKE) as env:
        env.reset(seed=0)
        jump = env.step("act", {"action": "jump"})
        assert not jump.done and jump.reward == 0.0
        assert jump.observation.startswith("'jump' is not an action; choose one of left, down")
        assert env.step("fly", {"action": "down"}).observation == (
            "Error: unknown tool 'fly'; call 'act'"
        )
        assert "non-empty string" in env.step("act", {}).observation
        _play(env, WIN)  # the invalid calls moved nothing
        assert env.episode_reward == 1.0


def test_a_single_turn_spec_is_not_an_episode():
    from twinkle.envs import RegistryEnv

    with pytest.raises(ValueError, match="single-turn"):
        RegistryEnv("reasoning_gym/leg_counting?size=2")


def test_dialogue_is_played_with_reply_and_a_dead_user_fails_the_episode():
    from twinkle.envs import RegistryEnv
    from twinkle.envs.env_tool import EnvTool
    from twinkle.errors import EnvironmentFailure
    from twinkle.testing.openai_server import OpenAIServer

    def user(request):
        said = request["messages"][-1]["content"]
        if "broken" in said:
            return 400, {"error": {"message": "the simulated user is gone"}}
        return {"content": "Great, that is all I needed. [GOAL]" if "refund" in said else "Hm?"}

    with OpenAIServer(user) as server:
        spec = f"dialogue/customer_support?user_base_url={server.base_url}"
        with RegistryEnv(spec) as env:
            assert env.reset(seed=2).observation.startswith("Hi, I was charged twice")
            assert [t["function"]["name"] for t in env.tools()] == ["reply"]
            tool = EnvTool.from_env(env)[0]
            assert tool("reply", {"message": "Let me look."}) == "Hm?"
            last = tool("reply", {"message": "The duplicate refund arrives in 3 days."})
            assert last.startswith("Great, that is all I needed.") and "[GOAL]" not in last
            assert tool.done and tool.episode_reward == 1.0  # goal_reached, no judge
        with RegistryEnv(spec) as env:
            env.reset(seed=0)
            with pytest.raises(EnvironmentFailure, match="EnvError: .*simulated user is gone"):
                EnvTool.from_env(env)[0]("reply", {"message": "broken"})


def test_runner_provisions_registry_specs_as_registry_envs(tmp_path):
    from twinkle.envs import RegistryEnv
    from twinkle.rollout.runner import RolloutConfig, RolloutRunner, openenv_rows

    envs = tmp_path / "envs.yaml"
    envs.write_text(YAML)
    runner = RolloutRunner(RolloutConfig())
    row = openenv_rows([f"@{envs}#lake"], 1, seed=3)[0]
    assert row["id"] == "episode-lake-3" and str(tmp_path) not in json.dumps(row["messages"])
    env, error, prompt = runner.provision_openenv(row)
    try:
        assert error is None and isinstance(env, RegistryEnv)
        assert [t["function"]["name"] for t in prompt["tools"]] == ["act"]
        assert prompt["messages"][-1]["content"].endswith("PFFF\nFHFH\nFFFH\nHFFG")
    finally:
        env.close()
    env, error, _ = runner.provision_openenv(openenv_rows(["gymnasium/NoSuchGame-v0"], 1)[0])
    assert env is None and error.startswith("KeyError:") and "not found in adapter" in error


YAML = """
environments:
  - adapter: reasoning_gym
    name: leg_counting
    config: {size: 2, seed: 42}
  - adapter: gymnasium
    name: FrozenLake-v1
    id: lake
    config: {is_slippery: false, episodes: 2}
  - adapter: gymnasium
    name: FrozenLake-v1
    id: pit                       # a hole two steps below the start
    config: {is_slippery: false, desc: [SFFF, FFFF, HFFF, FFFG]}
"""


def lake_policy(answers):
    """Answers leg counting from ``answers``; on the lake, one invalid move and then the
    winning path of the default map (the pit's map swallows it), until told it is over."""

    def respond(request):
        names = [t["function"]["name"] for t in request.get("tools") or []]
        if names != ["act"]:  # a task row (its tools are the sandbox's)
            return {"content": answers.get(request["messages"][-1]["content"], "no idea")}
        seen = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        if seen and "Stop calling tools" in seen[-1]:
            return {"content": "Done."}
        move = (["jump", *WIN])[len(seen)]
        return {"content": "", "tool_calls": [{"name": "act", "arguments": {"action": move}}]}

    return respond


@pytest.mark.slow
def test_flow_plays_multi_turn_entries_as_episodes_beside_task_rows(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.integrations.rollout_bridge import trajectories_for
    from twinkle.testing.openai_server import OpenAIServer

    envs = tmp_path / "envs.yaml"
    envs.write_text(YAML)
    answers = {}
    for k, row in enumerate(trajectories_for(f"@{envs}#reasoning_gym/leg_counting")):
        gold = json.loads(dict(row["user_data"])["ground_truth"])
        answers[row["messages"][-1]["content"]] = f"<answer>{gold if k else -1}</answer>"

    with OpenAIServer(lake_policy(answers)) as server:
        rollout = RolloutParams(
            conversations=[],
            tasks=[],
            envs=str(envs),
            concurrency=2,
            policy=PolicyParams(base_url=server.base_url, model="test-model"),
        )
        state = rollout_flow(
            rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
        )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 5 and summary["failed"] == 0

    scored = {
        t["id"]: t for t in map(json.loads, Path(summary["scored_path"]).read_text().splitlines())
    }
    assert set(scored) == {
        "leg_counting/leg_counting-0",
        "leg_counting/leg_counting-1",
        "episode-lake-0",
        "episode-lake-1",
        "episode-pit-0",
    }  # stable ids, without the YAML file's path
    assert [scored[f"leg_counting/leg_counting-{k}"]["rewards"]["total"] for k in (0, 1)] == [
        0.0,
        1.0,
    ]
    for k in (0, 1):
        lake = scored[f"episode-lake-{k}"]
        assert lake["rewards"] == {"episode_reward": 1.0, "total": 1.0}
        assert lake["reward_outcome"] == "solved" and lake["stop_reason"] == "stop"
        assert [t["function"]["name"] for t in lake["tools"]] == ["act"]
        assert "frozen lake" in lake["messages"][1]["content"]
        tool_turns = [m["content"] for m in lake["messages"] if m["role"] == "tool"]
        assert len(tool_turns) == 7 and tool_turns[0].startswith("'jump' is not an action")
        assert not any("prob" in t for t in tool_turns)  # gym info never shown
    pit = scored["episode-pit-0"]
    assert pit["rewards"] == {"episode_reward": 0.0, "total": 0.0}
    assert pit["reward_outcome"] == "unsolved"
    assert len([m for m in pit["messages"] if m["role"] == "tool"]) == 3  # jump, down, down

    client, exp = mlflow_client(tracking_params)
    traces = client.search_traces(locations=[exp])
    totals = sorted(float(t.info.tags["reward.total"]) for t in traces)
    assert totals == [0.0, 0.0, 1.0, 1.0, 1.0]
    episodes = [t for t in traces if len(t.search_spans(span_type="TOOL")) >= 3]
    assert len(episodes) == 3
    assert (
        sorted(tuple(sorted((a.name, a.value) for a in t.info.assessments)) for t in episodes)
        == [(("episode_reward", 0.0), ("total", 0.0))]
        + [(("episode_reward", 1.0), ("total", 1.0))] * 2
    )


@pytest.mark.slow
def test_multi_turn_entries_with_the_replay_policy_are_skipped_with_a_note(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import RolloutParams, RunParams
    from flows.rollout import rollout_flow

    envs = tmp_path / "envs.yaml"
    envs.write_text(YAML)
    rollout = RolloutParams(conversations=[], tasks=[], envs=str(envs))
    state = rollout_flow(
        rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
    )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 0
    assert "need a policy model" in summary["skipped"]["tasks"]
