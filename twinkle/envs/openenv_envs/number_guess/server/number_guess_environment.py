"""``NumberGuessEnvironment``: the server-side OpenEnv ``Environment``."""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment

from twinkle.envs.openenv_envs.number_guess.models import (
    GuessAction,
    GuessObservation,
    NumberGuessState,
)


class NumberGuessEnvironment(Environment[GuessAction, GuessObservation, NumberGuessState]):
    """Hide an integer in ``[low, high]``; each guess gets a Higher/Lower hint.

    Args:
        low: smallest possible number.
        high: largest possible number.
        max_attempts: guesses before the episode ends unsolved.

    Example:
        >>> env = NumberGuessEnvironment(low=1, high=10, max_attempts=3)
        >>> _ = env.reset(seed=0)
        >>> env.step(GuessAction(guess=env.state.target)).done
        True
    """

    # Every instance keeps its own state, so one server may hold many sessions.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, low: int = 1, high: int = 100, max_attempts: int = 7) -> None:
        super().__init__()
        if low > high:
            raise ValueError(f"low must not exceed high, got low={low}, high={high}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.low, self.high, self.max_attempts = low, high, max_attempts
        self._state = NumberGuessState(low=low, high=high)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        target: int | None = None,
        **kwargs: Any,
    ) -> GuessObservation:
        if target is None:
            target = random.Random(seed).randint(self.low, self.high)
        elif not self.low <= target <= self.high:
            raise ValueError(f"target must be within [{self.low}, {self.high}], got {target}")
        self._state = NumberGuessState(
            episode_id=episode_id or str(uuid4()), low=self.low, high=self.high, target=target
        )
        return GuessObservation(
            message=f"Guess a number between {self.low} and {self.high}. "
            f"You have {self.max_attempts} attempts.",
            attempts_left=self.max_attempts,
        )

    def step(
        self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GuessObservation:
        state = self._state
        if state.target is None or state.solved or state.attempts >= self.max_attempts:
            return GuessObservation(
                message="The episode is over; call reset.", done=True, attempts=state.attempts
            )
        state.attempts += 1
        state.step_count += 1
        left = self.max_attempts - state.attempts
        if action.guess == state.target:
            state.solved = True
            return GuessObservation(
                message=f"Correct! The number was {state.target}.",
                attempts=state.attempts,
                attempts_left=left,
                done=True,
                reward=1.0,
            )
        hint = "Higher." if action.guess < state.target else "Lower."
        if left == 0:
            return GuessObservation(
                message=f"{hint} Out of attempts; it was {state.target}.",
                attempts=state.attempts,
                done=True,
                reward=0.0,
            )
        # No reward signal on a wrong guess (None, as OpenEnv allows).
        return GuessObservation(message=hint, attempts=state.attempts, attempts_left=left)

    @property
    def state(self) -> NumberGuessState:
        return self._state
