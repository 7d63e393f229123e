"""reasoning_gym adapter over the real reasoning-gym package: generators, seeds, verifier."""

import pytest

from twinkle.core import Action
from twinkle.core.adapters.reasoning_gym import ReasoningGymAdapter
from twinkle.core.registry import environment_registry
from twinkle.errors import MissingExtraError


def test_listing_matches_the_package_registry_without_importing_it():
    import reasoning_gym

    assert ReasoningGymAdapter().list_environments() == sorted(reasoning_gym.factory.DATASETS)


def test_seed_call_scores_correct_one_and_wrong_zero():
    env = environment_registry.get(name="leg_counting", adapter="reasoning_gym", size=100, seed=42)
    assert len(env) == 100 and env.spec.adapter == "reasoning_gym"
    state, info = env.reset(options={"task_index": 5})
    assert info["task_index"] == 5 and "legs" in state.observation.prompt
    assert state.observation.messages[0]["role"] == "system"
    answer = state.hidden.expected_answer
    right = env.step(state, Action.from_text(f"<think>count</think><answer>{answer}</answer>"))
    assert right.rewards.total == 1.0 and right.done
    assert right.extracted_action == right.resolved_action == answer
    assert right.rewards.by_name("correctness").metadata["outcome"] == "correct"
    wrong = env.step(state, Action.from_text(f"<answer>{int(answer) + 1}</answer>"))
    assert wrong.rewards.total == 0.0
    assert wrong.rewards.by_name("correctness").metadata["outcome"] == "wrong"
    missing = env.step(state, Action.from_text("I think it is many legs"))
    assert missing.extracted_action is None and missing.resolved_action is None
    assert missing.rewards.by_name("correctness").metadata["outcome"] == "unparsed"


def test_same_seed_same_tasks_and_config_reaches_the_generator():
    a = environment_registry.get("basic_arithmetic", "reasoning_gym", size=5, seed=1)
    b = environment_registry.get("basic_arithmetic", "reasoning_gym", size=5, seed=1)
    c = environment_registry.get("basic_arithmetic", "reasoning_gym", size=5, seed=2)
    prompts = [e.task(0)["prompt"] for e in (a, b, c)]
    assert prompts[0] == prompts[1] != prompts[2]
    small = environment_registry.get(
        "basic_arithmetic", "reasoning_gym", size=3, seed=0, min_terms=2, max_terms=2
    )
    assert small.dataset.config.max_terms == 2


def test_score_agrees_with_the_generator_verifier_on_several_generators():
    for name in ("basic_arithmetic", "spell_backward", "word_sorting", "chain_sum"):
        env = environment_registry.get(name, "reasoning_gym", size=3, seed=7)
        for i in range(3):
            state, _ = env.reset(options={"task_index": i})
            entry = env.task(i)["entry"]
            for reply in (entry["answer"], "definitely not it"):
                got = env.step(state, Action.from_text(f"<answer>{reply}</answer>"))
                assert got.rewards.total == env.dataset.score_answer(reply, entry)


def test_missing_package_raises_missing_extra_error():
    class Absent(ReasoningGymAdapter):
        requires = ("no_such_module_for_twinkle_tests",)

    with pytest.raises(MissingExtraError, match=r"twinkle\[envs\]"):
        Absent().get_environment("leg_counting")
    assert Absent().installed() is False
