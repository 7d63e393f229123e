"""The FastAPI app of the number-guessing server (OpenEnv's ``create_app``).

Run: ``uvicorn twinkle.envs.openenv_envs.number_guess.server:app --host 127.0.0.1 --port 8000``.
``MAX_CONCURRENT_ENVS`` (default 64) caps the WebSocket sessions per worker process.
"""

from __future__ import annotations

import os
from typing import Any

from openenv.core.env_server import create_app

from twinkle.envs.openenv_envs.number_guess.models import (
    GuessAction,
    GuessObservation,
    NumberGuessState,
)
from twinkle.envs.openenv_envs.number_guess.server.number_guess_environment import (
    NumberGuessEnvironment,
)


def create_number_guess_app(max_concurrent_envs: int = 64, **env_kwargs: Any) -> Any:
    """A FastAPI app serving ``NumberGuessEnvironment(**env_kwargs)``, one per session."""

    def factory() -> NumberGuessEnvironment:
        return NumberGuessEnvironment(**env_kwargs)

    factory.__name__ = NumberGuessEnvironment.__name__
    return create_app(
        factory if env_kwargs else NumberGuessEnvironment,
        GuessAction,
        GuessObservation,
        env_name="number_guess",
        max_concurrent_envs=max_concurrent_envs,
        state_cls=NumberGuessState,
    )


app = create_number_guess_app(int(os.environ.get("MAX_CONCURRENT_ENVS", "64")))
