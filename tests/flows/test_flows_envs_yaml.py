"""An environments file with three adapters rolled out by the flow with a scripted policy,
named by the flow's `envs` parameter (the Prefect form's field; `twinkle run --envs` gives the
same tasks); the rewards reach MLflow."""

from __future__ import annotations

import json

import pytest

from tests.flows.tests_flows_helpers import flow_state, mlflow_client

pytestmark = pytest.mark.slow

YAML = """
environments:
  - adapter: reasoning_gym
    name: leg_counting
    config: {size: 2, seed: 42}
  - adapter: huggingface
    name: gsm8k
    id: word_problems
    config: {path: gsm8k.jsonl}
  - adapter: tasks
    name: math
    config: {limit: 2}
"""


def test_environment_file_rolls_out_through_the_flow_and_rewards_reach_mlflow(
    prefect_api, tmp_path, tracking_params
):
    from flows.params import PolicyParams, RolloutParams, RunParams
    from flows.rollout import rollout_flow
    from twinkle.integrations.rollout_bridge import trajectories_for
    from twinkle.testing.openai_server import OpenAIServer

    (tmp_path / "gsm8k.jsonl").write_text(
        '{"question": "2 + 2?", "answer": "#### 4"}\n{"question": "3 + 3?", "answer": "#### 6"}\n'
    )
    envs = tmp_path / "envs.yaml"
    envs.write_text(YAML)
    answers = {}
    for k, row in enumerate(trajectories_for(f"@{envs}")):
        gold = json.loads(dict(row["user_data"])["ground_truth"])
        reply = gold if k != 0 else "-1"  # one wrong answer
        legs = "leg_counting" in dict(row["user_data"])["env"]
        answers[row["messages"][-1]["content"]] = (
            f"<answer>{reply}</answer>" if legs else f"So \\boxed{{{reply}}}."
        )

    def respond(request):
        return {"content": answers.get(request["messages"][-1]["content"], "no idea")}

    with OpenAIServer(respond) as server:
        rollout = RolloutParams(
            conversations=[],
            tasks=[],
            envs=str(envs),
            policy=PolicyParams(base_url=server.base_url, model="test-model"),
        )
        state = rollout_flow(
            rollout, tracking_params, RunParams(output_dir=str(tmp_path / "out")), return_state=True
        )
    assert flow_state(state) == "COMPLETED"
    summary = state.result()
    assert summary["trajectories"] == 6 and summary["pass_rate"] == pytest.approx(5 / 6)
    client, exp = mlflow_client(tracking_params)
    totals = sorted(
        float(t.info.tags["reward.total"]) for t in client.search_traces(locations=[exp])
    )
    assert totals == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
