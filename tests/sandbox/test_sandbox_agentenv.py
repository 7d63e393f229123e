"""AgentEnv against the local server, through the real e2b SDK."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from e2b import Sandbox

from twinkle.envs import AgentEnv, StepResult
from twinkle.envs.base import MAX_OBSERVATION_CHARS

from .conftest import API_KEY

pytestmark = pytest.mark.slow


def schema(name: str, *required: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {
                "type": "object",
                "properties": {r: {"type": "string"} for r in required},
                "required": list(required),
            },
        },
    }


@pytest.fixture()
def env(server):
    agent = AgentEnv(
        template="base", api_url=server.url, api_key=API_KEY, sandbox_timeout=60, command_timeout=20
    )
    agent.reset()
    yield agent
    agent.close()


def live_ids(server) -> set[str]:
    return set(server.manager.sandboxes)


def test_seed_example(server):
    env = AgentEnv(template="base", api_url=server.url, api_key=API_KEY, sandbox_timeout=600)
    reset = env.reset()
    assert reset.info == {"sandbox_id": env.sandbox_id} and env.sandbox_id in live_ids(server)
    result = env.step("run_command", {"command": 'python -c "print(1 + 1)"'})
    assert result == StepResult(observation="2", reward=0.0, done=False, info={})
    sandbox_id = env.sandbox_id
    env.close()
    assert sandbox_id not in live_ids(server) and env.sandbox is None and env.sandbox_id is None
    env.close()  # idempotent


def test_nonzero_exit_is_reported_not_raised(env):
    obs = env.step("run_command", {"command": "echo out; echo err >&2; exit 3"}).observation
    assert obs == "out\n[stderr]\nerr\n[exit code: 3]"
    assert env.step("run_command", {"command": "true"}).observation == "(no output)"
    assert env.run_command({"command": "exit 2"}) == "[exit code: 2]"


def test_command_timeout_reports_124(server):
    env = AgentEnv(template="base", api_url=server.url, api_key=API_KEY, command_timeout=1)
    env.reset()
    try:
        obs = env.step("run_command", {"command": "sleep 30"}).observation
        assert obs.endswith("[exit code: 124]") and "timed out" in obs
        assert (
            env.step("run_command", {"command": "echo still-usable"}).observation == "still-usable"
        )
    finally:
        env.close()


def test_files_tools_and_truncation(env):
    assert (
        env.step("write_file", {"path": "/home/user/a.py", "content": "print('hi')"}).observation
        == "File written: /home/user/a.py"
    )
    assert env.step("read_file", {"path": "/home/user/a.py"}).observation == "print('hi')"
    assert env.step("run_command", {"command": "python a.py"}).observation == "hi"
    big = env.step("run_command", {"command": "python -c \"print('x' * 100000)\""}).observation
    assert (
        len(big) < MAX_OBSERVATION_CHARS + 100 and big.startswith("x" * 1000) and "truncated" in big
    )
    assert env.step("read_file", {"path": "/home/user/missing"}).observation.startswith("Error: ")


def test_output_flood_is_cut_and_killed(env):
    obs = env.step("run_command", {"command": "yes"}).observation  # would print forever
    assert len(obs) <= MAX_OBSERVATION_CHARS and obs.startswith("y\ny\n")
    assert "[output limit exceeded: command killed" in obs and obs.endswith("[exit code: 137]")
    assert env.step("run_command", {"command": "echo next"}).observation == "next"


def test_step_never_raises(env):
    def boom(env, arguments):
        raise RuntimeError("handler exploded")

    env.register_tool(schema("boom"), boom)
    for name, args in [
        ("boom", {}),
        ("run_command", {}),
        ("read_file", {"path": 5}),
        ("nope", {}),
        ("run_command", "not json"),
        ("run_command", "[1, 2]"),
        ("write_file", {"path": "x"}),
    ]:
        result = env.step(name, args)
        assert result.observation.startswith("Error:") and result.done is False, (name, result)
    assert "Available tools" in env.step("nope", {}).observation


def test_command_tool_quotes_arguments(env):
    env.register_command_tool(schema("show", "name"), "cat {name}")
    env.step("write_file", {"path": "/home/user/a b;touch pwned", "content": "quoted ok"})
    assert env.step("show", {"name": "a b;touch pwned"}).observation == "quoted ok"
    assert env.step("run_command", {"command": "ls -1"}).observation.splitlines() == [
        "a b;touch pwned"
    ]
    assert (
        env.step("show", {}).observation == "Error: missing required argument 'name' for this tool."
    )


def test_register_tool_chains_and_overrides(env):
    seen = {}

    def submit(agent, arguments):
        seen["env"], agent.submitted_code = agent, arguments.get("code", "")
        return "Solution submitted."

    def fake_run(agent, arguments):
        return "overridden: " + arguments["command"]

    assert env.register_tool(schema("submit", "code"), submit) is env
    assert env.register_command_tool(schema("ls_home"), "ls /home") is env
    assert env.step("submit", {"code": "x = 1"}).observation == "Solution submitted."
    assert seen["env"] is env and env.submitted_code == "x = 1"
    env.register_tool(schema("run_command", "command"), fake_run)
    assert env.step("run_command", {"command": "echo"}).observation == "overridden: echo"
    names = [t["function"]["name"] for t in env.tools()]
    assert names == ["submit", "ls_home", "run_command", "read_file", "write_file"]
    with pytest.raises(ValueError):
        env.register_tool({"type": "function", "function": {}}, submit)


def test_include_default_tools_false_hides_builtins(server):
    env = AgentEnv(
        template="base", api_url=server.url, api_key=API_KEY, include_default_tools=False
    )
    env.register_command_tool(schema("run_tests"), "echo tests passed")
    env.reset()
    try:
        assert [t["function"]["name"] for t in env.tools()] == ["run_tests"]
        assert env.step("run_tests", {}).observation == "tests passed"
        obs = env.step("run_command", {"command": "echo hi"}).observation
        assert obs == "Error: unknown tool 'run_command'. Available tools: ['run_tests']"
    finally:
        env.close()


def test_reset_replaces_the_sandbox_and_runs_setup(server):
    env = AgentEnv(
        template="base",
        api_url=server.url,
        api_key=API_KEY,
        setup_commands=["echo one", "echo two > f.txt && cat f.txt"],
        sandbox_envs={"TASK": "t1"},
        metadata={"episode": "7"},
    )
    try:
        assert env.reset().observation == "one\ntwo"
        first = env.sandbox_id
        assert env.step("run_command", {"command": "echo $TASK"}).observation == "t1"
        assert env.sandbox.get_info().metadata == {"episode": "7"}
        env.reset()
        assert env.sandbox_id != first and first not in live_ids(server)
    finally:
        env.close()


def test_step_before_reset_and_evaluate(server):
    env = AgentEnv(template="base", api_url=server.url, api_key=API_KEY)
    result = env.step("run_command", {"command": "true"})
    assert result.observation.startswith("Error: sandbox not initialized") and result.done is True
    assert env.evaluate([{}, {}, {}]) == [0.0, 0.0, 0.0]


def test_resets_from_a_thread_pool(server):
    envs = [AgentEnv(template="base", api_url=server.url, api_key=API_KEY) for _ in range(8)]

    def episode(i: int) -> str:
        envs[i].reset()
        envs[i].step("write_file", {"path": "/home/user/me.txt", "content": str(i)})
        return envs[i].step("run_command", {"command": "cat me.txt; ls | wc -l"}).observation

    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(episode, range(8)))
    try:
        assert outputs == [f"{i}1" for i in range(8)]  # each sandbox saw only its own file
        assert len({e.sandbox_id for e in envs}) == 8
    finally:
        for e in envs:
            e.close()


def test_connection_settings(monkeypatch, server):
    env = AgentEnv(template="t", api_url="http://10.0.0.5:8000")
    assert (env.api_url, env.sandbox_url, env.api_key) == (
        "http://10.0.0.5:8000",
        "http://10.0.0.5:8000",
        "local",
    )
    monkeypatch.setenv("E2B_API_URL", server.url)
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    from_env = AgentEnv(template="base")
    assert (from_env.api_url, from_env.sandbox_url, from_env.api_key) == (
        server.url,
        server.url,
        API_KEY,
    )
    from_env.reset()  # works with nothing but the environment, and never leaves loopback
    assert from_env.step("run_command", {"command": "echo env"}).observation == "env"
    from_env.close()
    monkeypatch.setenv("E2B_SANDBOX_URL", "http://127.0.0.1:1")
    assert AgentEnv(template="base").sandbox_url == "http://127.0.0.1:1"
    with pytest.raises(ValueError):
        AgentEnv(template="")
    with pytest.raises(ValueError):
        AgentEnv(template="base", sandbox_timeout=0)


def test_unknown_template_fails_reset_clearly(server):
    env = AgentEnv(template="my-env", api_url=server.url, api_key=API_KEY)
    with pytest.raises(Exception, match="template 'my-env' not found"):
        env.reset()


def test_bridges_to_tool_manager(env):
    from twinkle.envs import EnvTool
    from twinkle.tools import ToolManager

    manager = ToolManager(EnvTool.from_env(env))
    assert set(manager.names()) == {"run_command", "read_file", "write_file"}
    call = {"function": {"name": "run_command", "arguments": '{"command": "echo via-manager"}'}}
    assert manager(call) == "via-manager"


@pytest.mark.parametrize("renewal_due", [False, True], ids=["by-the-command", "by-renewal"])
def test_killed_sandbox_is_an_environment_failure(env, server, renewal_due):
    """A sandbox gone is no mistake of the model's: the step ends the episode, with the cause
    in ``info[ENV_FAILED]``, which ``EnvTool`` raises as ``EnvironmentFailure``; found by the
    command's own request, or by the lifetime renewal when one is due."""
    from twinkle.envs import EnvTool
    from twinkle.envs.base import ENV_FAILED
    from twinkle.errors import EnvironmentFailure
    from twinkle.tools import ToolManager

    if renewal_due:
        env._renewed_at -= env.sandbox_timeout
    Sandbox.kill(env.sandbox_id, api_url=server.url, sandbox_url=server.url, api_key=API_KEY)
    result = env.step("run_command", {"command": "echo hi"})
    assert result.observation.startswith("Error:") and result.done is True
    cause = result.info[ENV_FAILED]
    if renewal_due:
        assert cause.startswith(f"SandboxError: sandbox {env.sandbox_id} is no longer running")
    else:
        assert cause.startswith("SandboxError: SandboxNotRunningException: ")
    call = {"function": {"name": "run_command", "arguments": '{"command": "echo hi"}'}}
    with pytest.raises(EnvironmentFailure, match="^SandboxError: "):
        ToolManager(EnvTool.from_env(env))(call)


def test_steps_renew_the_lifetime_once_a_tenth_has_passed(env, server):
    """A step renews the sandbox's lifetime only once a tenth of it has passed since the
    last renewal (not a control-plane request per tool call), and then it does."""
    import time

    def end_at():
        conn = {"api_url": server.url, "sandbox_url": server.url, "api_key": API_KEY}
        return Sandbox.get_info(env.sandbox_id, **conn).end_at

    created = end_at()
    time.sleep(1.1)
    assert env.step("run_command", {"command": "echo a"}).observation == "a"
    assert end_at() == created  # not due: 1 s of a 60 s lifetime
    env._renewed_at -= env.sandbox_timeout * 0.1
    assert env.step("run_command", {"command": "echo b"}).observation == "b"
    assert (end_at() - created).total_seconds() >= 1.0  # renewed: 60 s from now
