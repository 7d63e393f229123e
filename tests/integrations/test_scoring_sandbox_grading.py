"""Code grading inside a real E2B-compatible sandbox (twinkle.sandbox) through AgentEnv."""

import pytest

from twinkle.core import Action, ToolCall
from twinkle.core.environments import AgentEnvRunner, CodeEnvironment, TestCase

GOOD = "def add_numbers(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def sandbox_url():
    from twinkle.sandbox import SandboxServer

    with SandboxServer(port=0, api_key="k", templates=None) as server:
        yield server.url


@pytest.mark.slow
def test_fresh_sandbox_grading_matches_the_subprocess_verdicts(sandbox_url):
    env = CodeEnvironment(sandbox_url=sandbox_url, sandbox_api_key="k", timeout=5, limit=1)
    assert env.runner.name == "agentenv"
    state, _ = env.reset(options={"task_index": 0})
    good = env.step(state, Action.from_text("```python\n" + GOOD + "```")).rewards.by_name("tests")
    assert good.reward == 1.0 and good.metadata["backend"] == "agentenv"
    tamper = (
        ToolCall(
            "a", "write_file", {"path": "solution.py", "content": "import sys\nsys.exit(0)\n"}
        ),
        ToolCall("b", "write_file", {"path": "reward.txt", "content": "1.0"}),
    )
    assert env.step(state, Action(text="done", tool_calls=tamper)).rewards.total == 0.0


@pytest.mark.slow
def test_workspace_left_by_a_rollout_is_graded_with_pristine_tests(sandbox_url):
    from twinkle.envs.agentenv import AgentEnv

    env = CodeEnvironment(sandbox_url=sandbox_url, sandbox_api_key="k", timeout=5, limit=1)
    agent = AgentEnv("base", api_url=sandbox_url, api_key="k")
    agent.reset()
    try:
        workdir = env.runner.workdir
        agent.step("run_command", {"command": f"mkdir -p {workdir}/.twinkle_grader"})
        agent.step(
            "write_file",
            {
                "path": f"{workdir}/solution.py",
                "content": "def add_numbers(a, b):\n    return 42\n",
            },
        )
        # the policy plants a grader that reports success, and the tests it would like
        agent.step(
            "write_file",
            {"path": f"{workdir}/.twinkle_grader/grade.py", "content": "print('pass')\n"},
        )
        agent.step("write_file", {"path": f"{workdir}/.twinkle_grader/tests.json", "content": "{}"})
        cheat = env.grade_workspace(0, agent)[0]
        assert cheat.reward == 0.0 and cheat.metadata["outcome"] == "wrong"
        agent.step("write_file", {"path": f"{workdir}/solution.py", "content": GOOD})
        assert env.grade_workspace(0, agent)[0].reward == 1.0
    finally:
        agent.close()


def test_unreachable_sandbox_is_an_error_outcome():
    out = AgentEnvRunner(api_url="http://127.0.0.1:9", api_key="k", timeout=3).run(
        {"solution.py": GOOD}, [TestCase("add_numbers(1, 2)", "3")]
    )
    assert out.status == "error" and out.failures[0].startswith("sandbox failure")
