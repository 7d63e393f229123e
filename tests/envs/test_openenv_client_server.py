"""``OpenEnvClient`` (and server-mode ``OpenEnv``) against a real uvicorn OpenEnv server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn

from tests.net import free_port
from twinkle.envs import EnvTool, OpenEnv, OpenEnvClient
from twinkle.envs.openenv_envs.number_guess.server.asgi import create_number_guess_app
from twinkle.tools import ToolManager

pytestmark = pytest.mark.slow

MAX_SESSIONS = 2


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    app = create_number_guess_app(max_concurrent_envs=MAX_SESSIONS, high=50)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def client(base_url: str) -> Iterator[OpenEnvClient]:
    env = OpenEnvClient(env_name="number_guess", base_url=base_url, message_timeout_s=20)
    yield env
    env.close()


def test_server_is_up(base_url):
    assert httpx.get(f"{base_url}/health").status_code == 200


def test_reset_step_and_cumulative_reward(client):
    first = client.reset(target=17)
    assert first.observation == "Guess a number between 1 and 50. You have 7 attempts."
    assert first.info == {"episode_reward": 0.0}
    low = client.step("guess", {"guess": 10})
    assert (low.observation, low.reward, low.done) == ("Higher.", 0.0, False)  # None on the wire
    hit = client.step("guess", {"guess": 17})
    assert (hit.reward, hit.done, hit.info["episode_reward"]) == (1.0, True, 1.0)
    assert client.episode_reward == 1.0 and client.last_result.reward == 1.0
    assert client.reset(target=3).info["episode_reward"] == 0.0 and client.episode_reward == 0.0


def test_tools_and_local_handlers(client):
    assert [t["function"]["name"] for t in client.tools()] == ["guess"]
    submitted = []
    submit = {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    assert client.register_tool(submit, lambda env, args: submitted.append(args) or "ok") is client
    shadow = {"type": "function", "function": {"name": "guess", "parameters": {}}}
    client.register_tool(shadow, lambda env, args: f"local {args['guess']}")
    assert [t["function"]["name"] for t in client.tools()] == ["submit", "guess"]
    client.reset(target=5)
    assert client.step("guess", {"guess": 5}).observation == "local 5"  # never reached the server
    assert client.step("submit", {"x": 1}).observation == "ok" and submitted == [{"x": 1}]
    boom = client.register_tool(submit, lambda env, args: 1 / 0).step("submit", {})
    assert boom.observation == "Error: ZeroDivisionError: division by zero" and not boom.done


def test_execute_returns_raw_results_outside_the_episode_reward(client):
    client.reset(target=8)
    raw = client.execute({"guess": 8})
    assert raw.reward == 1.0 and raw.observation.message == "Correct! The number was 8."
    assert client.episode_reward == 0.0


def test_typed_client_given_as_class_path(base_url):
    env = OpenEnvClient(
        env_cls="twinkle.envs.openenv_envs.number_guess:NumberGuessEnv", base_url=base_url
    )
    try:
        assert env.action_cls.__name__ == "GuessAction"
        env.reset(target=4)
        assert env.step("guess", {"guess": 4}).reward == 1.0
    finally:
        env.close()


def test_generic_client_reads_tools_from_server_schema(base_url):
    env = OpenEnvClient(base_url=base_url)
    try:
        assert env.is_generic and [t["function"]["name"] for t in env.tools()] == ["guess"]
        env.reset(target=30)
        assert env.step("guess", {"guess": 40}).observation == "Lower."
        # The server rejects the action; the session stays usable.
        bad = env.step("guess", {"guess": "forty"})
        assert bad.observation.startswith("Error: ") and "VALIDATION_ERROR" in bad.observation
        assert not bad.done
        assert env.step("guess", {"guess": 30}).reward == 1.0
    finally:
        env.close()


def test_sessions_are_isolated_and_capacity_is_enforced(base_url):
    clients = [
        OpenEnvClient(env_name="number_guess", base_url=base_url) for _ in range(MAX_SESSIONS + 1)
    ]
    try:
        with ThreadPoolExecutor(MAX_SESSIONS) as pool:
            list(
                pool.map(
                    lambda pair: pair[1].reset(target=pair[0] + 1),
                    enumerate(clients[:MAX_SESSIONS]),
                )
            )
            hits = list(
                pool.map(
                    lambda pair: pair[1].step("guess", {"guess": pair[0] + 1}).reward,
                    enumerate(clients[:MAX_SESSIONS]),
                )
            )
        assert hits == [1.0] * MAX_SESSIONS
        with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            clients[-1].reset(target=1)
        clients[0].close()  # frees a slot
        assert clients[-1].reset(target=1).observation.startswith("Guess a number")
    finally:
        for env in clients:
            env.close()


def test_dead_server_ends_the_episode():
    port = free_port()  # closed again: nothing listens
    env = OpenEnvClient(
        env_name="number_guess", base_url=f"http://127.0.0.1:{port}", connect_timeout_s=2
    )
    with pytest.raises(ConnectionError):
        env.reset()
    result = env.step("guess", {"guess": 1})
    assert result.done and result.info["error"].startswith("ConnectionError")
    env.close()


def test_base_url_is_required_and_read_from_environment(monkeypatch, base_url):
    monkeypatch.delenv("OPENENV_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="base_url"):
        OpenEnvClient(env_name="number_guess")
    monkeypatch.setenv("OPENENV_BASE_URL", base_url)
    assert OpenEnvClient(env_name="number_guess").base_url == base_url


def test_server_mode_openenv_honours_base_url_and_tool_schema(base_url):
    schema = [
        {
            "type": "function",
            "function": {
                "name": "play",
                "description": "Guess.",
                "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
        }
    ]
    env = OpenEnv(
        base_url=base_url,
        env_kwargs={"message_timeout_s": 30},
        tool_schema=schema,
        action_mapper=lambda tool, args: {"guess": args["n"]},
    )
    try:
        tools = EnvTool.from_env(env)
        manager = ToolManager(tools)
        assert manager.names() == ["play"]
        env.reset(target=12)
        call = {"function": {"name": "play", "arguments": '{"n": 12}'}}
        assert manager(call) == "Correct! The number was 12."
        assert tools[0].episode_reward == 1.0 and env.episode_reward == 1.0
    finally:
        env.close()
