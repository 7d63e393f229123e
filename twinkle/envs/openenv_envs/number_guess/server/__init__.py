"""Server side of the number-guessing environment.

``app`` is built on first access (``uvicorn ...number_guess.server:app`` asks for it), so
importing this package for discovery builds no FastAPI app. It lives in ``asgi.py``: a
submodule named ``app`` would shadow the attribute once imported.
"""

from typing import Any

from twinkle.envs.openenv_envs.number_guess.server.number_guess_environment import (
    NumberGuessEnvironment,
)

__all__ = ["NumberGuessEnvironment", "app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from twinkle.envs.openenv_envs.number_guess.server.asgi import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
