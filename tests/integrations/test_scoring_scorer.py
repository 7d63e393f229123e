"""Scorer: single and batch scoring, bad input as data, and an LLM judge over real HTTP."""

import pytest

from twinkle.core import Action, EnvironmentSpec
from twinkle.core.environments import MathEnvironment, MultipleChoiceEnvironment
from twinkle.core.judge import JudgeReward
from twinkle.integrations import Scorer, ScoringResult
from twinkle.testing.openai_server import OpenAIServer, garbage, judge


@pytest.fixture(scope="module")
def math_scorer():
    return Scorer(MathEnvironment())


def test_score_reports_total_signals_extraction_and_metadata(math_scorer):
    r = math_scorer.score(0, "24 * 7 = 168; 168 - 150 = 18, so \\boxed{18}")
    assert isinstance(r, ScoringResult)
    assert r.total == 1.0 and r.signals == {"correctness": 1.0, "format": 1.0}
    assert r.extracted_answer == "18" and r.outcome == "correct" and r.error is None
    assert r.metadata["correctness"]["expected"] == "18"
    unparsed = math_scorer.score(0, "no idea")
    assert unparsed.extracted_answer is None and unparsed.outcome == "unparsed"


def test_score_batch_matches_single_scores(math_scorer):
    responses = ["\\boxed{18}", "\\boxed{378}", "wrong: 5", ""]
    batch = math_scorer.score_batch([0, 1, 2, 3], responses)
    single = [math_scorer.score(i, r) for i, r in enumerate(responses)]
    assert [b.total for b in batch] == [s.total for s in single] == [1.0, 1.0, 0.0, 0.0]
    assert [b.outcome for b in batch] == ["correct", "correct", "wrong", "unparsed"]
    with pytest.raises(ValueError, match="same length"):
        math_scorer.score_batch([0, 1], ["x"])


def test_bad_items_never_sink_a_batch(math_scorer):
    huge = "lorem ipsum " * 200_000 + "\\boxed{18}"  # 2.4 MB; the answer is at the end
    items = [
        (0, "\\boxed{18}"),
        (999, "18"),
        (0, None),
        (0, 42),
        ("zero", "18"),
        (0, ""),
        (0, huge),
        (0, "\x00\ud800 broken unicode \\boxed{"),
        (-1, "\\boxed{36}"),
    ]
    results = math_scorer.score_batch([i for i, _ in items], [r for _, r in items])
    assert len(results) == len(items)
    assert results[0].total == 1.0
    for bad in results[1:5]:
        assert bad.total == 0.0 and bad.outcome == "error" and bad.error
        assert bad.bundle.by_name("score_error").metadata["error"] == bad.error
    assert results[5].outcome == "unparsed"
    assert results[6].total == 1.0
    assert results[7].outcome in ("unparsed", "wrong")
    assert results[8].outcome == "error" and "out of range" in results[8].error
    with pytest.raises(TypeError):
        math_scorer.score(0, None)  # the direct API does raise


def test_scorer_default_and_threaded_batches_agree():
    env = MultipleChoiceEnvironment()
    threaded = Scorer(env, default=-1.0, workers=4)
    out = threaded.score_batch([0, 1, 2, 50], ["Answer: B", "Answer: C", "Answer: A", "Answer: A"])
    assert [r.total for r in out] == [1.0, 1.0, 0.0, -1.0]
    with pytest.raises(ValueError):
        Scorer(env, workers=0)


class _MultiTurn:
    spec = EnvironmentSpec(name="dialogue", is_multi_turn=True)


class _NoIndex:
    spec = EnvironmentSpec(name="stream", supports_task_index=False)


def test_scorer_rejects_multi_turn_and_unindexed_environments():
    with pytest.raises(TypeError, match="multi-turn"):
        Scorer(_MultiTurn())
    with pytest.raises(TypeError, match="supports_task_index"):
        Scorer(_NoIndex())


def test_score_action_with_tool_calls_and_from_registry():
    scorer = Scorer.from_registry("math", limit=3)
    assert scorer.score_action(0, Action(text="\\boxed{18}")).total == 1.0


@pytest.mark.slow
def test_judge_reward_through_a_real_openai_server():
    with OpenAIServer(judge(score=8)) as server:
        reward = JudgeReward.from_endpoint(server.base_url, "judge", "correctness", weight=0.5)
        scorer = Scorer(MathEnvironment(limit=5, extra_rewards=[reward]))
        results = scorer.score_batch(list(range(5)), ["\\boxed{18}"] * 5)
        assert len(server.requests) == 5
        prompts = [r["messages"][-1]["content"] for r in server.requests]  # concurrent: any order
        assert any("A baker makes 24 muffins" in p and "\\boxed{18}" in p for p in prompts)
    first = results[0]
    assert first.signals["judge"] == pytest.approx(7 / 9)  # 8 on a 1-10 scale
    assert first.total == pytest.approx(1.0 + 0.5 * 7 / 9)
    assert [r.signals["correctness"] for r in results] == [1.0, 0.0, 0.0, 0.0, 0.0]
    single = scorer.score(0, "\\boxed{18}")  # the server is gone: default score and a reason
    assert single.signals["judge"] == 0.0 and single.metadata["judge"]["error"]


@pytest.mark.slow
def test_judge_reply_without_a_score_gives_default_with_reason():
    with OpenAIServer(lambda request: {"content": "A fine answer, I would say."}) as server:
        reward = JudgeReward.from_endpoint(
            server.base_url, "judge", "helpfulness", default_score=0.5
        )
        result = Scorer(MathEnvironment(limit=1, extra_rewards=[reward])).score_batch(
            [0], ["\\boxed{18}"]
        )[0]
    assert result.signals["judge"] == 0.5 and result.signals["correctness"] == 1.0
    assert "Could not extract" in result.metadata["judge"]["error"]
    assert result.bundle.by_name("judge").feedback == "A fine answer, I would say."


@pytest.mark.slow
def test_judge_endpoint_down_or_garbled_gives_default_with_reason():
    with OpenAIServer(garbage()) as server:
        url = server.base_url
        reward = JudgeReward.from_endpoint(url, "judge", "correctness", default_score=0.25)
        reward.backend.max_attempts = 1
        no_score = Scorer(MathEnvironment(limit=2, extra_rewards=[reward])).score_batch(
            [0, 1], ["\\boxed{18}", "x"]
        )
    for r in no_score:
        assert r.signals["judge"] == 0.25 and r.metadata["judge"]["error"]
    down = JudgeReward.from_endpoint(url, "judge", "correctness", default_score=0.25, timeout_s=2)
    down.backend.max_attempts = 1
    results = Scorer(MathEnvironment(limit=2, extra_rewards=[down])).score_batch(
        [0, 1], ["\\boxed{18}", "x"]
    )
    assert [r.signals["judge"] for r in results] == [0.25, 0.25]
    assert all(r.metadata["judge"]["error"] for r in results)
    assert results[0].signals["correctness"] == 1.0
