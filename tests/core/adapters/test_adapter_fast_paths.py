"""The adapters' fast paths give exactly what the general code gives: answer-only extraction,
batch scoring, cached boards, reward bundles and action resolutions."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinkle.core import Action
from twinkle.core.adapters import ActionMapper
from twinkle.core.adapters._common import FastTagExtractor, answer_function
from twinkle.core.extraction import (
    BoxedExtractor,
    CleanedExtractor,
    CompositeExtractor,
    LastLineExtractor,
    TagBasedExtractor,
)
from twinkle.core.registry import environment_registry

PIECES = st.lists(
    st.sampled_from(
        ["<answer>", "</answer>", "<ANSWER>", "</Answer>", "<action>", "</action>", "<think>"]
        + ["</think>", "<", "x<y", " 42 ", "left", "\n", "\\boxed{7}", "<|im_end|>", "."]
    ),
    max_size=10,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(PIECES)
def test_fast_tag_answer_equals_the_tag_extractor(text):
    fast = FastTagExtractor("answer")
    assert fast.answer(text) == fast.extract(text)[0] == TagBasedExtractor().extract(text)[0]


@settings(max_examples=500, deadline=None)
@given(PIECES)
def test_answer_function_equals_extract_for_composed_extractors(text):
    gym_like = CleanedExtractor(
        CompositeExtractor(
            [FastTagExtractor("action"), FastTagExtractor("answer"), LastLineExtractor()]
        ),
        pre_cleaners=["strip_special_tokens", "strip_thinking_tokens"],
        post_cleaners=["strip_trailing_punctuation"],
    )
    other = CleanedExtractor(BoxedExtractor(), pre_cleaners=["strip_thinking_tokens"])
    for extractor in (gym_like, other, LastLineExtractor(), TagBasedExtractor()):
        assert answer_function(extractor)(text) == extractor.extract(text)[0]


def test_answer_function_of_a_non_string_is_none():
    ex = CleanedExtractor(FastTagExtractor(), pre_cleaners=["strip_special_tokens"])
    assert answer_function(ex)(None) is None and ex.extract(None)[0] is None


def test_replacing_the_extractor_changes_what_step_reads():
    env = environment_registry.get("leg_counting", "reasoning_gym", size=3, seed=1)
    state, _ = env.reset(options={"task_index": 0})
    answer = state.hidden.expected_answer
    assert env.step(state, Action.from_text(f"<answer>{answer}</answer>")).rewards.total == 1.0
    env.extractor = CleanedExtractor(BoxedExtractor())
    boxed = env.step(state, Action.from_text(f"\\boxed{{{answer}}}"))
    assert boxed.extracted_action == answer and boxed.rewards.total == 1.0
    assert env.extract_answers([f"<answer>{answer}</answer>"]) == [None]


def test_batch_scoring_equals_reset_and_step():
    env = environment_registry.get("spell_backward", "reasoning_gym", size=6, seed=3)
    indices = [0, 5, 2, 2, 4, 1]
    responses = [
        f"<think>hm</think><answer>{env.task(i)['answer']}</answer>" if k % 2 else "<answer>no"
        for k, i in enumerate(indices)
    ]
    stepped = []
    for i, text in zip(indices, responses):
        state, _ = env.reset(options={"task_index": i})
        stepped.append(env.step(state, Action.from_text(text)).rewards.total)
    assert env.score_responses(indices, responses) == stepped
    assert stepped.count(1.0) == 3
    extracted = env.extract_answers(responses)
    assert env.score_answers(indices, extracted) == stepped
    with pytest.raises(IndexError):
        env.score_answers([0, 6], ["a", "b"])
    with pytest.raises(IndexError):
        env.score_responses([-1], ["<answer>a</answer>"])
    with pytest.raises(ValueError, match="same length"):
        env.score_answers([0], [])


def test_a_crashing_verifier_scores_zero_and_the_others_are_kept():
    env = environment_registry.get("leg_counting", "reasoning_gym", size=3, seed=1)
    good = env.task(1)["answer"]
    real = env._verify

    def verify(answer, entry):
        if answer == "boom":
            raise RuntimeError("verifier bug")
        return real(answer, entry)

    env._verify = verify
    assert env.score_answers([0, 1, 2], ["boom", good, None]) == [0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "name, kwargs", [("Taxi-v4", {}), ("FrozenLake-v1", {"is_slippery": True})]
)
def test_cached_boards_and_rewards_are_what_rendering_gives(name, kwargs):
    env = environment_registry.get(name, adapter="gymnasium", **kwargs)
    state, _ = env.reset(seed=1)
    assert state.observation.state.text == env.render_text(state.hidden.obs)
    for k in range(30):
        result = env.step(state, Action.from_text(f"<action>{env.mapper.names[k % 4]}</action>"))
        state = result.next_state
        assert state.observation.state.text == env.render_text(state.hidden.obs)
        data = state.observation.state.data
        assert result.rewards.by_name("gym_reward").reward == data["gym_reward"]
        assert result.rewards.total == data["gym_reward"]
        if result.done:
            state, _ = env.reset(seed=k)
    assert len(env._boards) > 1 and env._bundles


def test_episode_ids_are_unique_and_hidden_state_is_immutable():
    a = environment_registry.get("Blackjack-v1", adapter="gymnasium")
    b = environment_registry.get("Blackjack-v1", adapter="gymnasium")
    ids = {env.reset(seed=0)[0].metadata.episode_id for env in (a, b) for _ in range(50)}
    assert len(ids) == 100
    state, _ = a.reset(seed=0)
    assert isinstance(state.hidden.obs, list)  # JSON-friendly, not the gym tuple
    with pytest.raises(AttributeError):
        state.hidden.total_reward = 5.0


def test_mapper_cache_follows_the_index_rule():
    m = ActionMapper(["left", "right"])
    assert m.parse("1") == 1 and m.parse(" LEFT. ") == 0 and m.parse("jump") is None
    m.allow_index = False
    assert m.parse("1") is None and m.parse(" LEFT. ") == 0
    m.allow_index = True
    assert m.parse("1") == 1


def test_reset_observations_are_shared_but_the_returned_info_is_the_callers():
    env = environment_registry.get("Taxi-v4", adapter="gymnasium")
    first, info = env.reset(seed=4)
    info["gym_info"]["action_mask"].append(99)  # the caller's copy
    again, _ = env.reset(seed=4)
    assert again.observation is first.observation
    assert 99 not in again.observation.state.data["gym_info"]["action_mask"]
    assert again.metadata.episode_id != first.metadata.episode_id
    other, _ = env.reset(seed=5)
    assert other.observation.state.text == env.render_text(other.hidden.obs)
    assert other.observation.prompt.endswith(other.observation.state.text)
    assert other.observation.state.data["episode_step"] == 0
