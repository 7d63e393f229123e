"""Spec strings and environment files through the rollout bridge (what `--tasks`/`--envs` use)."""

import pytest

from twinkle.data_format import user_data_get
from twinkle.integrations.rollout_bridge import (
    is_episode_spec,
    score_trajectories,
    trajectories_for,
)

YAML = """
environments:
  - adapter: reasoning_gym
    name: leg_counting
    config: {size: 3, seed: 42}
  - adapter: huggingface
    name: gsm8k
    id: word_problems
    config: {path: gsm8k.jsonl}
  - adapter: tasks
    name: math
    config: {limit: 2}
    cleaners: {post: [strip_trailing_punctuation, strip_latex_dollars]}
"""


def _answer(rows, wrong_every=2):
    """Append a scripted policy's reply: the right answer, except every second row."""
    for k, row in enumerate(rows):
        gold = user_data_get(row["user_data"], "ground_truth")
        env = user_data_get(row["user_data"], "env")
        reply = gold if k % wrong_every else "-1"
        text = f"<answer>{reply}</answer>" if "leg_counting" in env else f"\\boxed{{{reply}}}"
        row["messages"].append({"role": "assistant", "content": text})
    return rows


def test_spec_string_rows_record_the_spec_and_score_with_the_same_tasks():
    rows = trajectories_for("reasoning_gym/leg_counting?size=4&seed=7")
    assert len(rows) == 4
    assert user_data_get(rows[0]["user_data"], "env") == "reasoning_gym/leg_counting?size=4&seed=7"
    assert rows[0]["id"] == "leg_counting/leg_counting-0"
    scores = score_trajectories(_answer(rows))
    assert [s["rewards"]["total"] for s in scores] == [0.0, 1.0, 0.0, 1.0]
    assert {s["outcome"] for s in scores} == {"correct", "wrong"}


def test_environment_file_with_three_adapters_rolls_out_and_scores(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "..")  # relative paths resolve next to the YAML file
    (tmp_path / "gsm8k.jsonl").write_text(
        '{"question": "2 + 2?", "answer": "#### 4"}\n{"question": "3 + 3?", "answer": "#### 6"}\n'
    )
    envs = tmp_path / "envs.yaml"
    envs.write_text(YAML)
    rows = trajectories_for(f"@{envs}")
    names = [user_data_get(r["user_data"], "env") for r in rows]
    assert (
        names
        == [f"@{envs}#reasoning_gym/leg_counting"] * 3
        + [f"@{envs}#word_problems"] * 2
        + [f"@{envs}#tasks/math"] * 2
    )
    scores = score_trajectories(_answer(rows))
    assert [s["rewards"]["total"] for s in scores] == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert all(s["error"] is None for s in scores)


def test_multi_turn_environments_have_no_task_rows_and_are_told_apart_as_episodes():
    spec = "gymnasium/FrozenLake-v1?is_slippery=false"
    with pytest.raises(ValueError, match="multi-turn: it has no task rows; play it as episodes"):
        trajectories_for(spec)
    assert is_episode_spec(spec) and not is_episode_spec("reasoning_gym/leg_counting?size=2")
