"""Environments: the ``Env`` interface, ``EnvTool``, and the OpenEnv, sandbox and pool adapters.

Heavy adapters are imported on first use so ``import twinkle.envs`` stays light.
"""

from importlib import import_module
from typing import Any

from twinkle.envs.base import Env, StepResult

_LAZY = {
    "EnvTool": "twinkle.envs.env_tool",
    "AgentEnv": "twinkle.envs.agentenv",
    "OpenEnv": "twinkle.envs.openenv",
    "OpenEnvClient": "twinkle.envs.openenv",
    "EnvPool": "twinkle.envs.openenv",
    "EnvPoolAdapter": "twinkle.envs.openenv",
}

__all__ = ["Env", "StepResult", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'twinkle.envs' has no attribute {name!r}")
