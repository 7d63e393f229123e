"""OpenEnv environments that ship with twinkle.

OpenEnv's own environments are installed from git repositories, not from the package index,
so offline machines and CI cannot get them. These small packages
follow the upstream layout (``models.py``, ``client.py``, ``server/<x>_environment.py``,
``server/app.py``) so the adapters in ``twinkle.envs.openenv`` discover them exactly as they
would discover an upstream environment.

- ``number_guess``: guess a hidden integer with higher/lower hints; one typed action.

Serve one with ``uvicorn twinkle.envs.openenv_envs.number_guess.server:app --host 127.0.0.1``.
Importing this package is free; its sub-packages import ``openenv`` (about 2.4 s).
"""
