"""Samplers for ``MultiTurnRollout``: token ids in, sampled token ids and logprobs out.

``HFSampler`` (transformers ``generate``, CPU or one GPU) and ``VLLMSampler`` (in-process
vLLM, GPU nodes) are imported lazily; ``ScriptedSampler`` is a deterministic sampler for
tests and benchmarks; ``ChatTemplate`` renders conversations with a tokenizer's chat
template and parses tool calls out of generated text.

Example:
    >>> from twinkle.sampler import Sampler, ScriptedSampler
    >>> issubclass(ScriptedSampler, Sampler)
    True
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from twinkle.sampler.base import Sampler

if TYPE_CHECKING:
    from twinkle.sampler.hf import HFSampler
    from twinkle.sampler.scripted import ScriptedSampler
    from twinkle.sampler.template import ChatTemplate
    from twinkle.sampler.vllm import VLLMSampler

_LAZY = {
    "ChatTemplate": "twinkle.sampler.template",
    "HFSampler": "twinkle.sampler.hf",
    "ScriptedSampler": "twinkle.sampler.scripted",
    "VLLMSampler": "twinkle.sampler.vllm",
}

__all__ = ["ChatTemplate", "HFSampler", "Sampler", "ScriptedSampler", "VLLMSampler"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'twinkle.sampler' has no attribute {name!r}")
