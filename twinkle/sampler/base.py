"""The ``Sampler`` interface ``MultiTurnRollout`` samples through.

A sampler works on token ids, never on text: the rollout owns the exact token sequence
(prompt, sampled tokens, bridge tokens), so nothing is ever re-tokenised. Contract of
``sample(prompts, sampling_params)``:

* one ``SampleResponse`` per prompt, in order, each with at least one ``SampledSequence``;
* ``tokens``: the sampled ids, *including* the stop token when generation ended on one
  (``<|im_end|>``, EOS), so the sequence is exactly what the model produced;
* ``logprobs``: one float per token in ``tokens`` (log-probability of that token under
  the model's distribution before temperature and other processing), or None;
* ``decoded``: the text of ``tokens`` without special tokens (may be ``''``; the
  template then decodes);
* ``stop_reason``: ``'stop'`` (stop token or string), ``'length'`` (``max_tokens``),
  ``'abort'`` or ``'error'``.

Example:
    >>> from twinkle.data_format import SampledSequence, SampleResponse
    >>> class Constant(Sampler):
    ...     def sample(self, prompts, sampling_params):
    ...         seq = SampledSequence('stop', [7, 2], [-0.1, -0.2])
    ...         return [SampleResponse([seq]) for _ in prompts]
    >>> Constant().sample([[1, 2, 3]], None)[0].sequences[0].tokens
    [7, 2]
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from twinkle.data_format import SampleResponse, SamplingParams


class Sampler(ABC):
    """Batched generation from token ids (see the module docstring for the contract).

    Example:
        >>> from twinkle.data_format import SampledSequence, SampleResponse
        >>> class Silent(Sampler):
        ...     def sample(self, prompts, sampling_params):
        ...         return [SampleResponse([SampledSequence('stop', [2])]) for _ in prompts]
        >>> len(Silent().sample([[1], [1, 5]], None))
        2
    """

    @abstractmethod
    def sample(
        self, prompts: list[list[int]], sampling_params: SamplingParams
    ) -> list[SampleResponse]:
        raise NotImplementedError()
