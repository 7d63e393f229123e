"""The rollout flow grades model-written code in the run's sandbox server, not on the host."""

import json
import os
import secrets

import pytest

from twinkle.integrations.rollout_bridge import trajectories_for
from twinkle.rollout.runner import score as _score
from twinkle.rollout.runner import task_environments as _task_environments
from twinkle.sandbox import SandboxServer


def _answered(code: str) -> dict:
    traj = trajectories_for("code", [0])[0]  # code-001: add_numbers(a, b)
    reply = {"role": "assistant", "content": f"```python\n{code}\n```"}
    return {**traj, "messages": [*traj["messages"], reply], "stop_reason": "stop"}


@pytest.mark.slow
def test_code_tasks_are_graded_through_the_sandbox_server():
    with SandboxServer(port=0, api_key=secrets.token_urlsafe(16)) as server:
        envs = _task_environments({"api_url": server.url, "api_key": server.api_key})
        assert envs["tasks/code"].runner.name == "agentenv"
        good = _score({}, _answered("def add_numbers(a, b):\n    return a + b"), False, envs)
        bad = _score({}, _answered("def add_numbers(a, b):\n    return a - b"), False, envs)
        # the host must not see what the graded code writes: it ran in a sandbox
        marker = f"/tmp/twinkle-host-marker-{secrets.token_hex(4)}"
        escape = _score(
            {},
            _answered(
                f"open({marker!r}, 'w').write('x')\ndef add_numbers(a, b):\n    return a + b"
            ),
            False,
            envs,
        )
    assert good["reward_outcome"] == "correct" and good["rewards"]["total"] == 1.0
    assert bad["reward_outcome"] == "wrong" and bad["rewards"]["total"] < 1.0
    assert escape["reward_outcome"] == "correct"
    assert not os.path.exists(marker), json.dumps(escape["rewards"])


def test_without_a_sandbox_endpoint_the_defaults_apply():
    assert _task_environments(None) == {}
