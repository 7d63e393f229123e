"""``NumberGuessEnv``: the typed OpenEnv client of the number-guessing server."""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from twinkle.envs.openenv_envs.number_guess.models import (
    GuessAction,
    GuessObservation,
    NumberGuessState,
)


class NumberGuessEnv(EnvClient[GuessAction, GuessObservation, NumberGuessState]):
    """One WebSocket session with a number-guessing server.

    Example:
        >>> with NumberGuessEnv(base_url='http://127.0.0.1:8000').sync() as c:  # doctest: +SKIP
        ...     c.reset(target=3)
        ...     c.step(GuessAction(guess=3)).reward
        1.0
    """

    def _step_payload(self, action: GuessAction) -> dict[str, Any]:
        return {"guess": action.guess}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[GuessObservation]:
        obs = payload.get("observation", {})
        observation = GuessObservation(
            message=obs.get("message", ""),
            attempts=obs.get("attempts", 0),
            attempts_left=obs.get("attempts_left", 0),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        # Only the three fields every openenv version's StepResult has, so any version parses it.
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict[str, Any]) -> NumberGuessState:
        return NumberGuessState(**payload)
