"""Sampling parameters and sampler outputs.

Example:
    >>> SamplingParams(max_tokens=64, temperature=0.7).temperature
    0.7
    >>> SamplingParams(top_p=2.0)
    Traceback (most recent call last):
    ...
    ValueError: top_p must be in (0, 1], got 2.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    """How a sampler decodes; values are checked on construction, ``stop`` may be one string.

    Example:
        >>> params = SamplingParams(max_tokens=16, temperature=0.0, stop='</answer>')
        >>> params.stop, params.num_samples
        (['</answer>'], 1)
    """

    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    num_samples: int = 1

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {self.num_samples}")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]


@dataclass
class SampledSequence:
    """One sampled continuation: token ids, per-token logprobs and the decoded text.

    Example:
        >>> seq = SampledSequence('stop', tokens=[5, 7], logprobs=[-0.1, -0.2], decoded='hi')
        >>> len(seq.tokens) == len(seq.logprobs)
        True
    """

    stop_reason: str
    tokens: list[int]
    logprobs: list[float] | None = None
    decoded: str = ""


@dataclass
class SampleResponse:
    """A sampler's answer to one prompt: ``num_samples`` sequences and the prompt's token ids.

    Example:
        >>> resp = SampleResponse([SampledSequence('length', [1, 2])], prompt_token_ids=[9])
        >>> resp.sequences[0].stop_reason
        'length'
    """

    sequences: list[SampledSequence]
    prompt_token_ids: list[int] = field(default_factory=list)
    prompt_logprobs: list[Any] | None = None
