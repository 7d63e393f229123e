"""gem adapter over gem-llm (not in the envs extra: gem-llm 0.1.0 pins reasoning_gym 0.1.23)."""

import pytest

from twinkle.core import Action
from twinkle.core.adapters.gem import GemAdapter
from twinkle.core.registry import environment_registry
from twinkle.errors import MissingExtraError


def test_listing_holds_games_and_reasoning_gym_ids():
    names = GemAdapter().list_environments()
    assert "game:GuessTheNumber-v0" in names and "rg:leg_counting" in names


def test_guess_the_number_wrong_then_right():
    env = environment_registry.get("game:GuessTheNumber-v0", adapter="gem")
    state, _ = env.reset(seed=0)
    target = env.env.game_number
    wrong = env.step(state, Action.from_text(f"My guess: \\boxed{{{target % 20 + 1}}}"))
    assert wrong.rewards.total == 0.0 and not wrong.done
    assert wrong.extracted_action == wrong.resolved_action == str(target % 20 + 1)
    right = env.step(wrong.next_state, Action.from_text(f"\\boxed{{{target}}}"))
    assert right.rewards.total == 1.0 and right.terminated


def test_reasoning_gym_task_through_gem():
    env = environment_registry.get("rg:leg_counting", adapter="gem")
    state, _ = env.reset()
    answer = env.env.data["answer"]
    assert env.step(state, Action.from_text(f"\\boxed{{{answer}}}")).rewards.total == 1.0
    state, _ = env.reset()
    assert env.step(state, Action.from_text("\\boxed{-1}")).rewards.total == 0.0


def test_missing_gem_names_the_pip_line():
    class Absent(GemAdapter):
        requires = ("no_such_module_for_twinkle_tests",)

    with pytest.raises(MissingExtraError, match="gem-llm==0.0.3"):
        Absent().ensure_installed()


def test_games_needing_nltk_data_say_so(monkeypatch):
    import gem

    from twinkle.errors import EnvError

    def missing(*args, **kwargs):
        raise LookupError("Resource words not found")

    monkeypatch.setattr(gem, "make", missing)
    with pytest.raises(EnvError, match="nltk.downloader words"):
        environment_registry.get("game:Wordle-v0", adapter="gem")
