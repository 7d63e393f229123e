"""textarena adapter over the real TextArena package: single-player games, rewards."""

from twinkle.core import Action
from twinkle.core.adapters.textarena import TextArenaAdapter
from twinkle.core.registry import environment_registry


def test_listing_keeps_single_player_games_only():
    names = TextArenaAdapter().list_environments()
    assert {"GuessTheNumber-v0", "Sudoku-v0", "TowerOfHanoi-v0"} <= set(names)
    assert "Chess-v0" not in names and "TicTacToe-v0" not in names  # two-player


def _number(env):
    return env.env.state.game_state["game_number"]


def test_right_guess_scores_one_and_the_move_is_extracted():
    env = environment_registry.get("GuessTheNumber-v0", adapter="textarena")
    state, _ = env.reset(seed=1)
    target = _number(env)
    wrong = env.step(state, Action.from_text(f"I try [{target % 20 + 1}]"))
    assert not wrong.done and wrong.extracted_action == wrong.resolved_action == str(
        target % 20 + 1
    )
    assert "[GAME]" in wrong.next_state.observation.prompt
    assert "You are playing" not in wrong.next_state.observation.prompt  # only what is new
    right = env.step(wrong.next_state, Action.from_text(f"Then [{target}]"))
    assert right.terminated and right.rewards.total == 1.0
    assert "Congratulations" in right.next_state.observation.state.data["reason"]


def test_a_lost_game_scores_below_one():
    env = environment_registry.get("GuessTheNumber-v0", adapter="textarena")
    state, _ = env.reset(seed=2)
    if _number(env) == 1:
        state, _ = env.reset(seed=3)
    for _ in range(5):  # the same guess again and again: invalid moves end the game
        result = env.step(state, Action.from_text("[1]"))
        state = result.next_state
        if result.done:
            break
    assert result.done and result.rewards.total < 1.0
