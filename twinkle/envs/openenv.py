"""OpenEnv adapters: ``OpenEnv`` (embedded), ``OpenEnvClient`` (server), ``EnvPool`` (Ray shards).

OpenEnv (``openenv`` 0.10.0) defines typed ``Environment`` classes and serves them over a
WebSocket session protocol; these adapters turn both shapes into a twinkle ``Env`` that a
rollout drives through ``EnvTool``. This module gathers them under one import path; each
lives in its own module:

- ``OpenEnv`` (:mod:`twinkle.envs.openenv_embedded`) builds the environment in-process (no
  server, microseconds per step). Given a ``base_url`` it runs in server mode and delegates
  to ``OpenEnvClient``; it never accepts and ignores an argument.
- ``OpenEnvClient`` (:mod:`twinkle.envs.openenv_client`) holds one WebSocket session with an
  OpenEnv server (uvicorn). Use one per concurrent trajectory, and do not pool it: the
  server owns the sessions.
- ``EnvPool`` (:mod:`twinkle.envs.openenv_pool`) keeps ``pool_size`` embedded envs in
  shards, in-process or as Ray actors, and ``EnvPoolAdapter`` is the ``Env`` over one slot.
  The driver knows the pool's geometry, so nothing needs a round trip to answer "how many
  slots".

Discovery and translation (packages, Action schemas, observations) live in
:mod:`twinkle.envs.openenv_discovery`.

``tools()`` always shows the environment's real action space: explicit schemas when given,
an MCP environment's listed tools, or one tool derived from the typed Action model (its
JSON schema; ``GuessAction`` becomes tool ``guess``). Rewards of None count as 0.0 and every
StepResult carries the cumulative ``episode_reward`` in ``info``.

Errors are data, so one failing environment never stops a batch: a bad action comes back as
an ``Error: ...`` observation with ``done=False`` (the model can correct it); a broken
session (timeout, lost connection, server full) as ``done=True`` with ``info['error']``,
after which the client reconnects on ``reset``. ``openenv`` takes about 2.4 s to import, so
it is imported on first use.
"""

from __future__ import annotations

from twinkle.envs.openenv_client import ActionMapper, Handler, OpenEnvClient
from twinkle.envs.openenv_embedded import OpenEnv
from twinkle.envs.openenv_pool import EnvPool, EnvPoolAdapter

__all__ = ["ActionMapper", "EnvPool", "EnvPoolAdapter", "Handler", "OpenEnv", "OpenEnvClient"]
