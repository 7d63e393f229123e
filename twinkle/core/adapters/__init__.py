"""Registry adapters over real task sets and games, each behind the ``envs`` extra.

=============  ===================================================  ========================
adapter        what                                                 package
=============  ===================================================  ========================
reasoning_gym  every procedural generator, scored by its verifier   ``reasoning-gym``
huggingface    a Dataset, ``save_to_disk`` folder, JSON/JSONL/       ``datasets``
               Parquet files (GSM8K/MATH/MMLU presets)              (``math-verify``)
gymnasium      text-rendered FrozenLake, Taxi, CliffWalking,        ``gymnasium``
               Blackjack through an :class:`ActionMapper`
openenv        the project's OpenEnv environment packages           ``openenv``
dialogue       a simulated user over an OpenAI-compatible endpoint  none (an endpoint)
gem            GEM's text games                                     ``gem-llm`` (by hand)
textarena      TextArena's single-player games                      ``textarena``
verifiers      not installable beside the pins: raises, naming why  (``verifiers``)
=============  ===================================================  ========================

Each adapter module imports only twinkle's own code; the third-party package is imported
when an environment is built, and a missing one raises
:class:`~twinkle.errors.MissingExtraError` (``pip install 'twinkle[envs]'``). The
registry (:data:`twinkle.core.registry.environment_registry`) registers all of them on first
use; ``installed()`` tells whether an adapter's packages are present.

Example:
    >>> from twinkle.core.registry import environment_registry
    >>> {"reasoning_gym", "gymnasium", "dialogue"} <= set(environment_registry.list_adapters())
    True
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from twinkle.core.adapters.action_mapper import ActionMapper

__all__ = ["ADAPTERS", "ActionMapper", "builtin_adapters"]

#: adapter name -> (module, class); imported when the registry is first used.
ADAPTERS: dict[str, tuple[str, str]] = {
    "reasoning_gym": ("twinkle.core.adapters.reasoning_gym", "ReasoningGymAdapter"),
    "huggingface": ("twinkle.core.adapters.huggingface", "HuggingFaceAdapter"),
    "gymnasium": ("twinkle.core.adapters.gymnasium", "GymnasiumAdapter"),
    "openenv": ("twinkle.core.adapters.openenv", "OpenEnvAdapter"),
    "dialogue": ("twinkle.core.adapters.dialogue", "DialogueAdapter"),
    "gem": ("twinkle.core.adapters.gem", "GemAdapter"),
    "textarena": ("twinkle.core.adapters.textarena", "TextArenaAdapter"),
    "verifiers": ("twinkle.core.adapters.verifiers", "VerifiersAdapter"),
}


def builtin_adapters() -> list[Any]:
    """One instance of every adapter in :data:`ADAPTERS` whose module exists."""
    adapters = []
    for module, attr in ADAPTERS.values():
        try:
            adapters.append(getattr(import_module(module), attr)())
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return adapters
