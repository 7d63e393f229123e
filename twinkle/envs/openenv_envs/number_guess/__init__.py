"""Number guessing: find a hidden integer in ``[low, high]`` with higher/lower hints.

Deterministic for a given ``seed`` (or an explicit ``target``) passed to ``reset``. Rewards:
1.0 for the right guess, None (no signal) for a wrong one, 0.0 when the attempts run out.

Example:
    >>> from twinkle.envs.openenv_envs.number_guess import GuessAction
    >>> from twinkle.envs.openenv_envs.number_guess.server import NumberGuessEnvironment
    >>> env = NumberGuessEnvironment()
    >>> env.reset(target=42).message
    'Guess a number between 1 and 100. You have 7 attempts.'
    >>> env.step(GuessAction(guess=50)).message, env.step(GuessAction(guess=42)).reward
    ('Lower.', 1.0)
"""

from twinkle.envs.openenv_envs.number_guess.client import NumberGuessEnv
from twinkle.envs.openenv_envs.number_guess.models import (
    GuessAction,
    GuessObservation,
    NumberGuessState,
)

__all__ = ["GuessAction", "GuessObservation", "NumberGuessEnv", "NumberGuessState"]
