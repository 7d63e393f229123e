"""EnvironmentFactory and YAML configuration: several adapters in one file, cleaners applied."""

from pathlib import Path

import pytest

from twinkle.core import Action
from twinkle.core.config import EnvironmentConfig, EnvironmentFactory, load_environments

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "envs"

YAML = """
environments:
  - adapter: reasoning_gym
    name: leg_counting
    config: {size: 10, seed: 42}
    cleaners: {post: [strip_trailing_punctuation]}
  - adapter: gymnasium
    name: FrozenLake-v1
    id: lake
    config: {is_slippery: false}
  - adapter: huggingface
    name: qa
    config: {path: qa.jsonl}
    cleaners: {pre: [strip_special_tokens], post: [strip_surrounding_quotes]}
"""


def test_yaml_with_three_adapters_builds_each_with_its_cleaners(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qa.jsonl").write_text('{"question": "Capital of France?", "answer": "Paris"}\n')
    (tmp_path / "envs.yaml").write_text(YAML)
    envs = EnvironmentFactory().from_yaml(tmp_path / "envs.yaml")
    assert list(envs) == ["reasoning_gym/leg_counting", "lake", "huggingface/qa"]

    legs = envs["reasoning_gym/leg_counting"]
    state, _ = legs.reset(options={"task_index": 0})
    answer = state.hidden.expected_answer
    # the configured post-cleaner drops the trailing point the default would keep
    assert legs.step(state, Action.from_text(f"<answer>{answer}.</answer>")).rewards.total == 1.0

    lake = envs["lake"]
    state, _ = lake.reset(seed=0)
    assert lake.step(state, Action.from_text("down")).resolved_action == "down"

    qa = envs["huggingface/qa"]
    state, _ = qa.reset(options={"task_index": 0})
    quoted = qa.step(state, Action.from_text('<answer>"Paris"</answer><|im_end|>'))
    assert quoted.extracted_action == "Paris" and quoted.rewards.total == 1.0


def test_spec_strings_parse_to_configs_and_build():
    cfg = EnvironmentConfig.parse("reasoning_gym/leg_counting?size=3&seed=5&name_hint=x")
    assert cfg.config == {"size": 3, "seed": 5, "name_hint": "x"}
    assert EnvironmentConfig.parse("math").adapter == "tasks"
    env = EnvironmentFactory().build("reasoning_gym/leg_counting?size=3&seed=5")
    assert len(env) == 3 and env.spec.metadata["seed"] == 5
    with pytest.raises(ValueError):
        EnvironmentConfig.parse("/x")


def test_the_rollouts_episodes_key_never_reaches_the_constructor():
    """``episodes`` says how many episodes the flow plays; a file written for the flow must
    build through the factory too (FrozenLake's constructor would refuse the keyword)."""
    env = EnvironmentFactory().build("gymnasium/FrozenLake-v1?is_slippery=false&episodes=4")
    state, _ = env.reset(seed=0)
    assert env.step(state, Action.from_text("right")).resolved_action == "right"


def test_bad_entries_are_rejected_with_the_reason(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("environments:\n  - {adapter: tasks, name: math, colour: red}\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_environments(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text(
        "environments:\n  - {adapter: tasks, name: math}\n  - {adapter: tasks, name: math}\n"
    )
    with pytest.raises(ValueError, match="share the key"):
        EnvironmentFactory().from_yaml(dup)
    with pytest.raises(ValueError, match="no answer extractor"):
        EnvironmentFactory().build(
            EnvironmentConfig("openenv", "number_guess", pre_cleaners=["strip_special_tokens"])
        )


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_file_loads(path):
    configs = load_environments(path)
    assert configs and all(c.adapter and c.name for c in configs)


def test_buildable_examples_build():
    factory = EnvironmentFactory()
    for name in ("reasoning_gym.yaml", "gymnasium.yaml", "openenv.yaml", "textarena.yaml"):
        envs = factory.from_yaml(EXAMPLES / name)
        assert envs and all(env.spec.name for env in envs.values())
