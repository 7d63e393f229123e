"""JudgeReward against a real OpenAI-compatible server on 127.0.0.1 (official openai SDK)."""

import asyncio

import pytest

from tests.net import free_port
from twinkle.core import Action, Observation, RewardFunction, RewardType, State, StateMetadata
from twinkle.core.backend import APIBackend, ChatMessage, GenerationResult
from twinkle.core.judge import (
    JUDGE_TEMPLATES,
    JudgePromptTemplate,
    JudgeReward,
    extract_judge_score,
)
from twinkle.core.ratelimit import AdaptiveLimiter
from twinkle.protocol.openai import OpenAI
from twinkle.testing.openai_server import OpenAIServer, failing_first, garbage, judge, scripted


def _backend(server, **kwargs):
    api = OpenAI(
        "judge-model",
        api_key="x",
        base_url=server.base_url,
        max_retries=0,
        client_kwargs={"timeout": 10},
    )
    kwargs.setdefault("backoff_s", 0.001)
    return APIBackend(
        api, kwargs.pop("limiter", None) or AdaptiveLimiter(8, cooldown_s=0), **kwargs
    )


def _transition(prompt="What is 2+2?", hidden=None, text="4"):
    s = State(
        Observation(prompt),
        hidden if hidden is not None else {"answer": "4"},
        StateMetadata(0, "ep"),
    )
    return s, Action.from_text(text), s.with_metadata(step=1, is_terminal=True)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("[[8]]", 8.0),
        ("[[ 7.5 ]]", 7.5),
        ("Score: 6", 6.0),
        ("rating : 3 then Rating:4", 4.0),
        ("[[2]] ... Score: 9", 2.0),
        ("Score: 9 ... [[2]] and [[3]]", 3.0),
        ("no score", None),
        ("", None),
        ("[[-3]]", None),
        ("Score: 8/10", 8.0),
    ],
)
def test_extract_judge_score(text, expected):
    assert extract_judge_score(text) == expected


def test_templates_and_validation():
    assert set(JUDGE_TEMPLATES) == {"correctness", "helpfulness", "safety", "iterative_feedback"}
    for t in JUDGE_TEMPLATES.values():
        assert t.system_prompt and t.score_range == (1.0, 10.0)
        assert set(t.placeholders()) <= {"question", "response", "ground_truth"}
    assert "ground_truth" in JUDGE_TEMPLATES["correctness"].placeholders()
    assert "ground_truth" in JUDGE_TEMPLATES["iterative_feedback"].placeholders()
    with pytest.raises(ValueError, match="unknown placeholders"):
        JudgePromptTemplate("Rate {answer}")
    with pytest.raises(ValueError):
        JudgePromptTemplate("Rate {}")
    with pytest.raises(ValueError):
        JudgePromptTemplate("Rate {response!r}")
    with pytest.raises(ValueError, match="malformed"):
        JudgePromptTemplate("Rate {response")
    assert (
        JudgePromptTemplate("{{literal}} {response}").render(
            question="", response="r", ground_truth=""
        )
        == "{literal} r"
    )
    with pytest.raises(KeyError, match="unknown judge template"):
        JudgeReward(object(), "nope")
    with pytest.raises(TypeError):
        JudgeReward(object(), "correctness")


def test_normalisation():
    class Fixed:
        def generate_chat(self, messages, params=None):
            return GenerationResult("[[5]]")

    j = JudgeReward(Fixed(), "correctness")
    assert j.normalise(7) == pytest.approx(6 / 9) and j.normalise(1) == 0.0
    assert j.normalise(10) == 1.0 and j.normalise(15) == 1.0 and j.normalise(-3) == 0.0
    assert JudgeReward(Fixed(), "correctness", normalize=False).normalise(7) == 7
    flat = JudgeReward(Fixed(), JudgePromptTemplate("{response}", score_range=(3, 3)))
    assert flat.normalise(3) == 0.0
    assert (
        isinstance(j, RewardFunction) and j.name == "judge" and j.reward_type is RewardType.OUTCOME
    )


@pytest.mark.slow
def test_judge_against_real_server():
    with OpenAIServer(lambda req: {"content": "The response is right. [[7]]"}) as server:
        j = JudgeReward(
            _backend(server),
            "correctness",
            name="judge_correct",
            weight=2.0,
            reward_type=RewardType.PROCESS,
        )
        sig = j.compute(*_transition())
        assert sig.name == "judge_correct" and sig.reward_type is RewardType.PROCESS
        assert sig.reward == pytest.approx(6 / 9) and sig.weight == 2.0
        assert sig.feedback == "The response is right. [[7]]"
        assert sig.metadata["raw_score"] == 7.0 and sig.metadata["prompt_tokens"] > 0
        request = server.requests[-1]
        assert request["model"] == "judge-model" and request["temperature"] == 0.0
        assert request["max_tokens"] == 512
        system, user = request["messages"]
        assert (
            system["role"] == "system"
            and system["content"] == JUDGE_TEMPLATES["correctness"].system_prompt
        )
        assert "What is 2+2?" in user["content"] and "Reference answer:\n4" in user["content"]


@pytest.mark.slow
def test_judge_with_h3_judge_policy_and_object_hidden():
    from envs_for_core_tests import CounterHidden

    with OpenAIServer(judge(score=8)) as server:
        j = JudgeReward(_backend(server), "helpfulness", normalize=False)
        sig = j.compute(*_transition(hidden=CounterHidden(total=1, expected_answer="12")))
        assert sig.reward == 8.0
        j2 = JudgeReward(_backend(server), "correctness")
        j2.compute(*_transition(hidden=CounterHidden(total=1, expected_answer="12")))
        assert "Reference answer:\n12" in server.requests[-1]["messages"][1]["content"]


@pytest.mark.slow
def test_reply_without_score_gives_default_with_reason():
    with OpenAIServer(lambda req: {"content": "I cannot decide."}) as server:
        sig = JudgeReward(_backend(server), "safety", default_score=0.25).compute(*_transition())
        assert sig.reward == 0.25 and sig.feedback == "I cannot decide."
        assert sig.metadata["reason"] == "no_score" and "Could not extract" in sig.metadata["error"]
        assert sig.metadata["judge_response"] == "I cannot decide."


def test_endpoint_down_gives_default_with_reason():
    api = OpenAI("m", api_key="x", base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    j = JudgeReward(
        APIBackend(api, max_attempts=2, backoff_s=0.001), "correctness", default_score=-1.0
    )
    sig = j.compute(*_transition())
    assert sig.reward == -1.0 and sig.feedback is None
    assert sig.metadata["reason"] == "judge_error" and "connection" in sig.metadata["error"]
    batch = j.score_batch([("q", "r", "g")] * 3)
    assert [s.reward for s in batch] == [-1.0] * 3


@pytest.mark.slow
def test_garbage_and_server_errors_give_default():
    with OpenAIServer(garbage()) as server:
        sig = JudgeReward(_backend(server, max_attempts=1), "correctness").compute(*_transition())
        assert sig.reward == 0.0 and sig.metadata["reason"] == "judge_error"
    with OpenAIServer(scripted([], then=(500, {"error": {"message": "down"}}))) as server:
        sig = JudgeReward(_backend(server, max_attempts=3), "correctness").compute(*_transition())
        assert sig.metadata["reason"] == "judge_error" and len(server.requests) == 3
    with OpenAIServer(scripted([(400, {"error": {"message": "bad"}})])) as server:
        sig = JudgeReward(_backend(server, max_attempts=3), "correctness").compute(*_transition())
        assert sig.metadata["reason"] == "judge_error" and len(server.requests) == 1  # not retried


@pytest.mark.slow
def test_429s_shrink_the_limit_and_are_retried():
    with OpenAIServer(failing_first(3, status=429, then=judge(score=10))) as server:
        backend = _backend(server, max_attempts=5, limiter=AdaptiveLimiter(8, cooldown_s=0))
        sig = JudgeReward(backend, "correctness").compute(*_transition())
        assert sig.reward == 1.0
        assert backend.limiter.rate_limited == 3 and backend.limiter.limit < 8
        assert len(server.requests) == 4


@pytest.mark.slow
def test_batch_is_concurrent_bounded_and_ordered():
    state = {"active": 0, "peak": 0}

    async def respond(req):
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        await asyncio.sleep(0.02)
        state["active"] -= 1
        text = req["messages"][-1]["content"]
        score = text.split("Assistant reply:\n")[1].split("\n")[0]
        return {"content": f"[[{score}]]"}

    with OpenAIServer(respond) as server:
        backend = _backend(server, limiter=AdaptiveLimiter(4))
        j = JudgeReward(backend, "helpfulness", normalize=False)
        items = [("q", str(1 + i % 10), "") for i in range(24)]
        signals = j.score_batch(items)
        assert [s.reward for s in signals] == [float(1 + i % 10) for i in range(24)]
        assert state["peak"] <= 4 and backend.limiter.peak_in_flight == 4
        transitions = [_transition(text=str(k)) for k in (3, 9)]
        assert [s.reward for s in j.compute_batch(transitions)] == [3.0, 9.0]


@pytest.mark.slow
async def test_async_api_and_blocking_batch_inside_a_loop():
    with OpenAIServer(lambda req: {"content": "[[10]]"}) as server:
        j = JudgeReward(_backend(server), "correctness")
        sig = await j.acompute(*_transition())
        assert sig.reward == 1.0
        assert [s.reward for s in await j.ascore_batch([("q", "r", "g")] * 5)] == [1.0] * 5
        # The blocking batch works even though this coroutine's loop is running.
        assert j.score_batch([("q", "r", "g")])[0].reward == 1.0


@pytest.mark.slow
def test_sync_only_backend_and_api_client_backend():
    class SyncOnly:
        def __init__(self):
            self.seen = []

        def generate_chat(self, messages, params=None):
            self.seen.append(messages)
            return GenerationResult("rating: 4", prompt_tokens=3, completion_tokens=2)

    backend = SyncOnly()
    j = JudgeReward(backend, JudgePromptTemplate("Q {question} R {response}", score_range=(0, 4)))
    assert [s.reward for s in j.score_batch([("a", "b", "")] * 3)] == [1.0] * 3
    assert backend.seen[0] == [ChatMessage("user", "Q a R b")]

    class Raising:
        def generate_chat(self, messages, params=None):
            raise RuntimeError("backend exploded")

    sig = JudgeReward(Raising(), "correctness", default_score=0.5).compute(*_transition())
    assert sig.reward == 0.5 and "backend exploded" in sig.metadata["error"]

    with OpenAIServer(lambda req: {"content": "[[1]]"}) as server:
        api = OpenAI("m", api_key="x", base_url=server.base_url, max_retries=0)
        j = JudgeReward(api, "correctness")  # an API client is wrapped in an APIBackend
        assert isinstance(j.backend, APIBackend) and j.compute(*_transition()).reward == 0.0
        j = JudgeReward.from_endpoint(server.base_url, "m", "safety")
        assert j.compute(*_transition()).reward == 0.0


@pytest.mark.slow
def test_score_extractor_failure_and_huge_reply():
    with OpenAIServer(lambda req: {"content": "x" * 200_000 + " [[9]]"}) as server:

        def broken(text):
            raise ValueError("bad extractor")

        sig = JudgeReward(_backend(server), "correctness", score_extractor=broken).compute(
            *_transition()
        )
        assert sig.metadata["reason"] == "no_score" and "bad extractor" in sig.metadata["error"]
        sig = JudgeReward(_backend(server), "correctness").compute(*_transition(text="y" * 100_000))
        assert sig.reward == pytest.approx(8 / 9)
