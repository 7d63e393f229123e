"""Wire types of the number-guessing environment (pydantic models, as OpenEnv requires)."""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    """Guess the hidden number."""

    guess: int = Field(description="The integer you guess.")


class GuessObservation(Observation):
    message: str = Field(default="", description="The hint for the last guess.")
    attempts: int = Field(default=0, description="Guesses made so far.")
    attempts_left: int = Field(default=0, description="Guesses left.")


class NumberGuessState(State):
    low: int = 1
    high: int = 100
    target: int | None = None
    attempts: int = 0
    solved: bool = False
