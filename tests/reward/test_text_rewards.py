"""F1Reward, ToolExploreReward and CoTReward: filler words, missing golds, tool errors."""

import pytest

from twinkle.core import Action
from twinkle.core.environments import MathEnvironment
from twinkle.data_format import pack_value
from twinkle.reward import CoTReward, F1Reward, ToolExploreReward, f1_score
from twinkle.reward.text_rewards import FILLER_WORDS, last_boxed


def _traj(answer, *golds, extra=()):
    return {
        "messages": [*extra, {"role": "assistant", "content": answer}],
        "user_data": [("ground_truth", g) for g in golds],
    }


def test_exact_partial_and_max_over_golds():
    f1 = F1Reward()
    assert f1.score(_traj("\\boxed{Paris}", "Paris")) == 1.0
    assert f1.score(_traj("\\boxed{Lyon}", "Paris")) == 0.0
    half = f1.score(_traj("\\boxed{red green}", "red blue"))
    assert half == pytest.approx(0.5)
    assert f1.score(_traj("\\boxed{red green}", "blue", "red green")) == 1.0
    assert f1([_traj("\\boxed{a cat}", "cats"), _traj("\\boxed{dog}", "cat")]) == [1.0, 0.0]


@pytest.mark.parametrize("word", FILLER_WORDS)
def test_every_filler_word_is_lenient_after_stemming(word):
    # fix 29: heavy, large, approximately, above, roughly, nearly, exactly failed before
    assert f1_score(f"{word} 5 meters", "5 meters") == 1.0
    assert f1_score("5 meters", f"5 meters {word}") == 1.0


def test_no_ground_truth_is_zero_and_golds_are_decoded():
    assert (
        F1Reward().score(
            _traj(
                "",
            )
        )
        == 0.0
    )  # fix 29: was 1.0 for an empty prediction
    assert F1Reward().score(_traj("\\boxed{x}")) == 0.0
    packed = pack_value("New York")  # '"New York"': decoded like every other reader does
    assert F1Reward().score(_traj("\\boxed{new york}", packed)) == 1.0


def test_prediction_reading():
    assert last_boxed("\\boxed{a} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{a} then \\boxed{unclosed") == "a"
    f1 = F1Reward(answer_pattern=r"Answer: (\w+)")
    assert (
        f1.prediction([{"role": "assistant", "content": "Answer: Rome. Answer: Paris"}]) == "Paris"
    )
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "\\boxed{Oslo}"}]}]
    assert F1Reward().prediction(parts) == "Oslo"


def _tool_turn(result):
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c", "content": result},
    ]


def test_tool_explore_counts_successful_turns_and_errors_in_any_case():
    good = _tool_turn("found it")
    reward = ToolExploreReward()
    assert reward.score(_traj("\\boxed{42}", "42", extra=good)) == 1.0
    assert reward.score(_traj("\\boxed{42}", "42", extra=good * 4)) == 0.5
    assert reward.score(_traj("\\boxed{41}", "42", extra=good)) == 0.0  # F1 below threshold
    for failure in ("Error: no such tool", "ERROR timeout", "error", "   "):
        assert reward.score(_traj("\\boxed{42}", "42", extra=_tool_turn(failure))) == 0.0
    mixed = [good[0], {"role": "tool", "content": "Error: x"}, {"role": "tool", "content": "ok"}]
    assert reward.score(_traj("\\boxed{42}", "42", extra=mixed)) == 1.0


def test_cot_reward():
    steps = "\n".join(f"Step {i}: work" for i in range(1, 8))
    assert CoTReward().score(_traj(f"{steps}\n\\boxed{{1}}")) == 0.1
    assert CoTReward().score(_traj("Step 1: a\nStep 2: b\nStep 3: c")) == 0.0


def test_rewards_work_as_extra_rewards_of_an_environment():
    env = MathEnvironment(
        tasks=[{"id": "t", "question": "Capital?", "answer": "12"}],
        extra_rewards=[F1Reward(weight=0.0)],
    )
    state, _ = env.reset(options={"task_index": 0})
    result = env.step(state, Action.from_text("\\boxed{12}"))
    assert result.rewards.by_name("f1").reward == 1.0
    assert result.rewards.total == 1.0
