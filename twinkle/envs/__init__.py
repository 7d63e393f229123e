"""Environments: the ``Env`` interface, ``EnvTool``, and the OpenEnv, sandbox, pool and
registry (``RegistryEnv``: multi-turn environments of the registry) adapters.

Heavy adapters are imported on first use so ``import twinkle.envs`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twinkle.envs.base import Env, StepResult
from twinkle.utils.lazy import lazy_getattr

_LAZY = {
    "EnvTool": "twinkle.envs.env_tool",
    "AgentEnv": "twinkle.envs.agentenv",
    "OpenEnv": "twinkle.envs.openenv_embedded",
    "OpenEnvClient": "twinkle.envs.openenv_client",
    "EnvPool": "twinkle.envs.openenv_pool",
    "EnvPoolAdapter": "twinkle.envs.openenv_pool",
    "RegistryEnv": "twinkle.envs.registry_env",
}

__all__ = [
    "AgentEnv",
    "Env",
    "EnvPool",
    "EnvPoolAdapter",
    "EnvTool",
    "OpenEnv",
    "OpenEnvClient",
    "RegistryEnv",
    "StepResult",
]

if TYPE_CHECKING:
    from twinkle.envs.agentenv import AgentEnv
    from twinkle.envs.env_tool import EnvTool
    from twinkle.envs.openenv_client import OpenEnvClient
    from twinkle.envs.openenv_embedded import OpenEnv
    from twinkle.envs.openenv_pool import EnvPool, EnvPoolAdapter
    from twinkle.envs.registry_env import RegistryEnv

__getattr__ = lazy_getattr(__name__, _LAZY)
