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

from typing import TYPE_CHECKING

from twinkle.sampler.base import Sampler
from twinkle.utils.lazy import lazy_getattr

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


__getattr__ = lazy_getattr(__name__, _LAZY)
