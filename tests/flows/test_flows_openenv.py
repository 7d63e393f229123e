"""The rollout flow playing OpenEnv episodes (twinkle's ``number_guess``) against a live policy
served by the local OpenAI-compatible server, under a real Prefect API and MLflow store."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client


def binary_search(request: dict) -> dict:
    """A policy that plays number_guess: narrows [low, high] from the hints so far, then guesses
    the middle; stops calling tools once the environment says the episode is over."""
    messages = request["messages"]
    low, high = map(int, re.search(r"between (\d+) and (\d+)", messages[1]["content"]).groups())
    guesses = {
        c["id"]: json.loads(c["function"]["arguments"])["guess"]
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    }
    for m in messages:
        if m["role"] != "tool":
            continue
        guess, hint = guesses[m["tool_call_id"]], m["content"]
        if hint.startswith("Correct") or "Out of attempts" in hint or "over" in hint:
            return {"content": f"Done: {hint}"}
        low, high = (guess + 1, high) if hint.startswith("Higher") else (low, guess - 1)
    assert [t["function"]["name"] for t in request["tools"]] == ["guess"]
    return {
        "content": "",
        "tool_calls": [{"name": "guess", "arguments": {"guess": (low + high) // 2}}],
    }


@pytest.mark.slow
def test_rollout_flow_plays_openenv_episodes_and_records_episode_rewards(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.testing.openai_server import OpenAIServer

    run = RunParams(output_dir=str(tmp_path / "out"))
    with OpenAIServer(binary_search) as server:
        rollout = RolloutParams(
            conversations=[],
            tasks=[],
            openenv=["number_guess", "no_such_env"],
            openenv_episodes=3,
            concurrency=4,
            policy=PolicyParams(base_url=server.base_url, model="test-model"),
        )
        state = rollout_flow(rollout, tracking_params, run, return_state=True)
        assert server.requests  # the policy really played
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 6 and summary["failed"] == 3
    # Every number_guess episode is solved; the missing env's episodes failed, and failures
    # are not rewards, so they stay out of the pass rate.
    assert summary["pass_rate"] == 1.0

    scored = {
        t["id"]: t for t in map(json.loads, Path(summary["scored_path"]).read_text().splitlines())
    }
    for k in range(3):
        game = scored[f"openenv-number_guess-{k}"]
        assert game["stop_reason"] == "stop" and game["reward_outcome"] == "solved"
        assert game["rewards"] == {"episode_reward": 1.0, "total": 1.0}
        assert game["messages"][-2]["content"].startswith("Correct! The number was")
        assert [t["function"]["name"] for t in game["tools"]] == ["guess"]
        assert "Guess a number between 1 and 100" in game["messages"][1]["content"]
        broken = scored[f"openenv-no_such_env-{k}"]
        assert broken["stop_reason"] == "error" and broken["error"].startswith(
            "OpenEnvError: ModuleNotFoundError"
        )
    # Each episode is reset with its own seed (its index).
    targets = {
        t["id"]: t["messages"][-2]["content"] for t in scored.values() if "number_guess" in t["id"]
    }
    assert len(set(targets.values())) >= 2  # different seeds, different numbers

    client, exp = mlflow_client(tracking_params)
    traces = client.search_traces(locations=[exp])
    assert len(traces) == 6
    solved = [t for t in traces if t.info.tags.get("reward.total") == "1.0"]
    assert len(solved) == 3
    for trace in solved:
        assert {a.name: a.value for a in trace.info.assessments} == {
            "episode_reward": 1.0,
            "total": 1.0,
        }
        assert len(trace.search_spans(span_type="TOOL")) >= 1
    assert len(client.search_traces(locations=[exp], filter_string="tag.status = 'failed'")) == 3


@pytest.mark.slow
def test_openenv_episodes_with_the_replay_policy_are_skipped_with_a_note(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import RolloutParams, RunParams
    from flows.rollout import rollout_flow

    rollout = RolloutParams(
        conversations=[], tasks=[], openenv=["number_guess"], openenv_episodes=2
    )
    state = rollout_flow(
        rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
    )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 0
    assert "replay policy has no recordings" in summary["skipped"]["openenv"]


_OPENENV_SERVER = """
import asyncio, uvicorn
from twinkle.envs.openenv_envs.number_guess.server.asgi import create_number_guess_app

async def main():
    server = uvicorn.Server(uvicorn.Config(create_number_guess_app(max_concurrent_envs=8, high=50),
                                           host="127.0.0.1", port=0, log_level="error"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    print(server.servers[0].sockets[0].getsockname()[1], flush=True)
    await task

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def openenv_server():
    """A real OpenEnv number_guess server (high=50) in a child process, so its uvicorn does not
    touch the flow's logging; yields its base URL."""
    import select
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _OPENENV_SERVER], stdout=subprocess.PIPE, text=True
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the OpenEnv server did not start"
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.mark.slow
def test_rollout_flow_plays_episodes_on_an_openenv_server(
    prefect_api, tmp_path, tracking_params, openenv_server
):
    """Server mode: one OpenEnvClient session per episode on a real OpenEnv server."""
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.testing.openai_server import OpenAIServer

    with OpenAIServer(binary_search) as server:
        rollout = RolloutParams(
            conversations=[],
            tasks=[],
            openenv=["number_guess"],
            openenv_episodes=2,
            openenv_base_url=openenv_server,
            policy=PolicyParams(base_url=server.base_url, model="test-model"),
        )
        state = rollout_flow(
            rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
        )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 2 and summary["failed"] == 0 and summary["reward_mean"] == 1.0
    scored = [json.loads(line) for line in Path(summary["scored_path"]).read_text().splitlines()]
    assert all(
        "between 1 and 50" in t["messages"][1]["content"] for t in scored
    )  # the server's settings
    assert all(t["rewards"] == {"episode_reward": 1.0, "total": 1.0} for t in scored)


def _scored(summary: dict) -> dict[str, dict]:
    return {
        t["id"]: t for t in map(json.loads, Path(summary["scored_path"]).read_text().splitlines())
    }


@pytest.mark.slow
def test_openenv_seed_and_constructor_kwargs_reach_the_embedded_episodes(
    prefect_api, tmp_path, tracking_params
):
    """Two runs into the same output directory with different ``openenv_seed``: each plays the
    episodes reset with its seeds (not the first run's cached trajectories), on environments
    built with ``openenv_env_kwargs`` (a 1..1000 range, 10 attempts)."""
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.data_format import user_data_get
    from twinkle.envs.openenv_envs.number_guess.server import NumberGuessEnvironment
    from twinkle.testing.openai_server import OpenAIServer

    def secret(seed: int) -> int:  # what the bundled env hides for this seed and range
        env = NumberGuessEnvironment(low=1, high=1000, max_attempts=10)
        env.reset(seed=seed)
        return env.state.target

    run = RunParams(output_dir=str(tmp_path / "out"))
    kwargs = {"number_guess": {"low": 1, "high": 1000, "max_attempts": 10}}
    played = {}
    with OpenAIServer(binary_search) as server:
        for seed in (0, 5):
            rollout = RolloutParams(
                conversations=[],
                tasks=[],
                openenv=["number_guess"],
                openenv_episodes=2,
                openenv_seed=seed,
                openenv_env_kwargs=kwargs,
                max_turns=16,
                policy=PolicyParams(base_url=server.base_url, model="test-model"),
            )
            state = rollout_flow(rollout, tracking_params, run, return_state=True)
            assert flow_state(state) == "COMPLETED"
            played[seed] = _scored(state.result())
    for seed, ids in ((0, [0, 1]), (5, [5, 6])):
        scored = played[seed]
        assert sorted(scored) == [f"openenv-number_guess-{k}" for k in ids]
        for k in ids:
            game = scored[f"openenv-number_guess-{k}"]
            assert user_data_get(game["user_data"], "seed") == k
            # The constructor arguments: the range and attempts of the first observation.
            assert (
                "Guess a number between 1 and 1000. You have 10 attempts."
                in game["messages"][1]["content"]
            )
            # The reset seed: the secret number the env hides for it.
            assert game["messages"][-2]["content"] == f"Correct! The number was {secret(k)}."
            assert game["rewards"] == {"episode_reward": 1.0, "total": 1.0}
    assert {secret(k) for k in (0, 1)} != {
        secret(k) for k in (5, 6)
    }  # the seeds tell the runs apart


def test_constructor_kwargs_the_env_does_not_take_fail_the_episode_with_the_reason():
    from twinkle.rollout.runner import RolloutConfig, RolloutRunner, openenv_rows

    runner = RolloutRunner(
        RolloutConfig(concurrency=1, openenv_env_kwargs={"number_guess": {"colour": "red"}})
    )
    [(env, error, _)] = runner.provision_openenvs(openenv_rows(["number_guess"], 1, seed=3))
    assert env is None and error.startswith("TypeError") and "colour" in error


@pytest.mark.slow
def test_constructor_kwargs_against_an_openenv_server_fail_those_episodes_with_the_reason(
    prefect_api, tmp_path, tracking_params, openenv_server
):
    """The server builds its own environments (openenv's session protocol has no constructor
    arguments): the episodes given arguments fail with the reason, the others play, the flow
    completes."""
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.testing.openai_server import OpenAIServer

    with OpenAIServer(binary_search) as server:
        rollout = RolloutParams(
            conversations=[],
            tasks=[],
            openenv=["number_guess"],
            openenv_episodes=2,
            openenv_seed=3,
            openenv_base_url=openenv_server,
            openenv_env_kwargs={"number_guess": {"high": 1000}},
            policy=PolicyParams(base_url=server.base_url, model="test-model"),
            max_failure_rate=1.0,  # every episode fails here, on purpose
        )
        state = rollout_flow(
            rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
        )
        assert not server.requests  # no episode was played with settings other than those asked for
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 2 and summary["failed"] == 2
    scored = _scored(summary)
    assert sorted(scored) == ["openenv-number_guess-3", "openenv-number_guess-4"]
    for game in scored.values():
        assert game["stop_reason"] == "error" and game["reward_outcome"] == "failed"
        assert game["rewards"] == {}  # errors are never rewards
        assert game["error"].startswith(
            "OpenEnvError: openenv_env_kwargs for 'number_guess' (high) cannot be "
            f"applied on the OpenEnv server {openenv_server}"
        )


def test_rollout_params_reject_constructor_kwargs_for_an_env_not_played():
    from pydantic import ValidationError

    from flows.params import RolloutParams

    ok = RolloutParams(openenv=["number_guess"], openenv_env_kwargs={"number_guess": {"high": 10}})
    assert ok.openenv_env_kwargs == {"number_guess": {"high": 10}} and ok.openenv_seed == 0
    with pytest.raises(
        ValidationError,
        match="openenv_env_kwargs names environments not in openenv: "
        r"numbr_guess \(openenv: number_guess\)",
    ):
        RolloutParams(openenv=["number_guess"], openenv_env_kwargs={"numbr_guess": {"high": 10}})
    with pytest.raises(ValidationError, match="not in openenv: number_guess \\(openenv: none\\)"):
        RolloutParams(openenv_env_kwargs={"number_guess": {}})
    with pytest.raises(ValidationError) as exc:
        RolloutParams(openenv=["number_guess"], openenv_seed=-1)
    assert exc.value.errors()[0]["loc"] == ("openenv_seed",)
