"""A YAML judge reaches the environment's rewards (against the local OpenAI-compatible server)."""

import pytest

from twinkle.core import Action
from twinkle.core.config import EnvironmentFactory
from twinkle.testing.openai_server import OpenAIServer, judge

pytestmark = pytest.mark.slow


def test_judge_from_yaml_is_scored_beside_the_verifier(tmp_path):
    with OpenAIServer(judge(score=10)) as server:
        (tmp_path / "envs.yaml").write_text(
            f"judge: {{base_url: '{server.base_url}', model: j, weight: 0.0}}\n"
            "environments:\n"
            "  - {adapter: reasoning_gym, name: leg_counting, config: {size: 2}}\n"
            "  - {adapter: tasks, name: math, config: {limit: 2}, judge: null}\n"
        )
        envs = EnvironmentFactory().from_yaml(tmp_path / "envs.yaml")
        legs = envs["reasoning_gym/leg_counting"]
        state, _ = legs.reset(options={"task_index": 0})
        result = legs.step(
            state, Action.from_text(f"<answer>{state.hidden.expected_answer}</answer>")
        )
        assert result.rewards.by_name("judge").reward == 1.0
        assert result.rewards.total == 1.0  # the judge has weight 0: logged only
        assert len(server.requests) == 1
        math = envs["tasks/math"]
        state, _ = math.reset(options={"task_index": 0})
        assert math.step(state, Action.from_text("x")).rewards.by_name("judge") is None
