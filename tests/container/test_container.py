"""ContainerEnvironment against `twinkle env serve-functional` running in a real child process."""

import subprocess
import sys
import threading

import httpx
import pytest

from twinkle.container import (
    ContainerEnvironment,
    ContainerEnvironmentError,
    EnvironmentServer,
    OpaqueHidden,
)
from twinkle.core import Action, ToolCall
from twinkle.core.environments import MathEnvironment
from twinkle.integrations import DatasetProvider, Scorer

pytestmark = pytest.mark.slow


def _serve(*args):
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle", "env", "serve-functional", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=60)
    if not line or "serving" not in line[0]:
        proc.kill()
        raise RuntimeError(
            f"server did not start: {line} {proc.stderr.read() if proc.poll() is not None else ''}"
        )
    return proc, line[0].split(" at ")[1].strip()


@pytest.fixture(scope="module")
def math_server():
    proc, url = _serve("math")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_remote_math_environment_behaves_like_the_local_one(math_server):
    with ContainerEnvironment(math_server).wait_ready() as env:
        assert env.spec.name == "math" and env.spec.pure_step and len(env) == 30
        assert env.available_tools == () and env.prompts == {} and env.reward_functions == ()
        state, info = env.reset(options={"task_index": 0})
        assert info["task_id"] == "math-001" and isinstance(state.hidden, OpaqueHidden)
        assert state.hidden.expected_answer == "18"
        with pytest.raises(AttributeError):
            state.hidden.expected_answer = "1"
        right = env.step(state, Action.from_text("\\boxed{18}"))
        assert right.rewards.total == 1.0 and right.terminated and right.extracted_action == "18"
        assert right.rewards.by_name("correctness").metadata["outcome"] == "correct"
        unparsed = env.step(state, Action.from_text("no idea"))  # pure: the same state again
        assert unparsed.extracted_action is None and unparsed.resolved_action is None
        assert unparsed.rewards.by_name("correctness").metadata["outcome"] == "unparsed"
        probe = env.compute_rewards(state, Action.from_text("#### 18"), right.next_state)
        assert probe.total == 1.0


def test_integrations_run_over_the_container(math_server):
    with ContainerEnvironment(math_server) as env:
        results = Scorer(env).score_batch(
            [0, 1, 2, 99], ["\\boxed{18}", "\\boxed{378}", "\\boxed{0}", "1"]
        )
        assert [r.total for r in results] == [1.0, 1.0, 0.0, 0.0]
        assert results[3].outcome == "error" and "IndexError" in results[3].error
        item = DatasetProvider(env)[2]
        assert item.ground_truth == "120" and "train travels" in item.prompt


def test_concurrent_clients_get_their_own_answers(math_server):
    with ContainerEnvironment(math_server) as env:
        answers = [t.ground_truth for t in DatasetProvider(env).get_items()]
        indices = list(range(30)) * 2
        responses = [
            f"\\boxed{{{answers[i]}}}" if k < 30 else "\\boxed{-999}" for k, i in enumerate(indices)
        ]
        results = Scorer(env, workers=8).score_batch(indices, responses)
    assert [r.total for r in results] == [1.0] * 30 + [0.0] * 30


def test_server_errors_become_container_errors(math_server):
    with (
        ContainerEnvironment(math_server) as env,
        pytest.raises(ContainerEnvironmentError, match="IndexError: task_index 500"),
    ):
        env.reset(options={"task_index": 500})
    bad = httpx.post(math_server + "/step", json={"state": "nonsense", "action": {}})
    assert bad.status_code == 400 and "error" in bad.json()
    assert httpx.post(math_server + "/reset", content=b"[1, 2]").status_code == 400
    with pytest.raises(ContainerEnvironmentError):
        ContainerEnvironment("http://127.0.0.1:9", timeout=2).reset()


def test_state_rebuilt_from_json_when_its_ref_is_unknown(math_server):
    from twinkle.container.serialization import decode_step_result, encode_action, encode_state

    with ContainerEnvironment(math_server) as env:
        state, _ = env.reset(options={"task_index": 1})
    raw = encode_state(state)
    raw.pop("ref")  # e.g. a state saved to disk and sent back later
    body = {"state": raw, "action": encode_action(Action.from_text("\\boxed{378}"))}
    result = decode_step_result(httpx.post(math_server + "/step", json=body).json())
    assert result.rewards.total == 1.0


def test_code_environment_served_with_config_grades_remotely():
    proc, url = _serve("code", "--config", "timeout=5", "--config", "limit=2")
    try:
        with ContainerEnvironment(url, timeout=60).wait_ready() as env:
            assert len(env) == 2
            state, _ = env.reset(options={"task_index": 0})
            good = ToolCall(
                "c1",
                "write_file",
                {"path": "solution.py", "content": "def add_numbers(a, b):\n    return a + b\n"},
            )
            tamper = ToolCall(
                "c2", "write_file", {"path": ".twinkle_grader/grade.py", "content": "print('ok')"}
            )
            assert (
                env.step(state, Action(text="done", tool_calls=(good, tamper))).rewards.total == 1.0
            )
            bad = ToolCall(
                "c1",
                "write_file",
                {"path": "solution.py", "content": "def add_numbers(a, b):\n    return 7\n"},
            )
            assert (
                env.step(state, Action(text="done", tool_calls=(bad, tamper))).rewards.total == 0.0
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_in_process_server_and_cli_errors():
    with EnvironmentServer(MathEnvironment(limit=3)) as server:
        assert httpx.get(server.url + "/health").json() == {"status": "ok", "name": "math"}
        assert len(ContainerEnvironment(server.url)) == 3
    out = subprocess.run(
        [sys.executable, "-m", "twinkle", "env", "serve-functional", "nope", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0 and "not found" in out.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "twinkle", "env", "list", "--adapter", "tasks"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = [w for w in listed.stdout.split() if "/" in w]
    assert names == ["tasks/code", "tasks/math", "tasks/multiple_choice"]
