"""Environments: the ``Env`` interface, ``EnvTool``, and the OpenEnv, sandbox and pool adapters.

Heavy adapters are imported on first use so ``import twinkle.envs`` stays light.
"""

from twinkle.envs.base import Env, StepResult
from twinkle.utils.lazy import lazy_getattr

_LAZY = {
    "EnvTool": "twinkle.envs.env_tool",
    "AgentEnv": "twinkle.envs.agentenv",
    "OpenEnv": "twinkle.envs.openenv",
    "OpenEnvClient": "twinkle.envs.openenv",
    "EnvPool": "twinkle.envs.openenv",
    "EnvPoolAdapter": "twinkle.envs.openenv",
}

__all__ = ["Env", "StepResult", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY)
