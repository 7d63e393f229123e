"""``ScriptedSampler``: a deterministic sampler for tests and benchmarks.

Replies come from ``respond(prompt_ids) -> str``; each is encoded with the chat template's
tokenizer and closed with the stop token, exactly like a model that stops on end-of-turn.
Each token's logprob is a fixed function of its id (``token_logprob``), so tests can check
that logprobs stay aligned with the tokens they belong to. ``latency_s`` simulates the
generation time of one batched call (benchmarks use it to model a GPU).

Example:
    >>> class Chars:  # a stand-in template: one token per character, stop token 0
    ...     stop_token_ids = [0]
    ...     def encode_text(self, text): return [ord(c) for c in text]
    >>> out = ScriptedSampler(Chars(), lambda ids: 'hi').sample([[1, 2]], SamplingParams())
    >>> seq = out[0].sequences[0]
    >>> seq.stop_reason, seq.logprobs == [token_logprob(t) for t in seq.tokens]
    ('stop', True)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from twinkle.data_format import SampledSequence, SampleResponse, SamplingParams
from twinkle.sampler.base import Sampler


def token_logprob(token_id: int) -> float:
    """The logprob ``ScriptedSampler`` reports for ``token_id``."""
    return -((token_id % 97) + 1) / 100.0


class ScriptedSampler(Sampler):
    """Reply with ``respond(prompt_ids)``, token-exact and deterministic.

    Args:
        template: a ``ChatTemplate`` (its tokenizer encodes replies; its first stop token
            ends them).
        respond: the reply text for a prompt given as token ids.
        latency_s: seconds to sleep per ``sample`` call (simulated generation time).

    Example:
        >>> class Chars:  # a stand-in template: one token per character, stop token 0
        ...     stop_token_ids = [0]
        ...     def encode_text(self, text): return [ord(c) for c in text]
        >>> out = ScriptedSampler(Chars(), lambda ids: 'ok').sample([[5]], SamplingParams())
        >>> seq = out[0].sequences[0]
        >>> seq.tokens, seq.stop_reason, seq.decoded
        ([111, 107, 0], 'stop', 'ok')
    """

    def __init__(
        self, template: Any, respond: Callable[[list[int]], str], *, latency_s: float = 0.0
    ) -> None:
        stops = list(template.stop_token_ids)
        if not stops:
            raise ValueError("the template's tokenizer has no stop token")
        self.template = template
        self.respond = respond
        self.latency_s = latency_s
        self.stop_token_id = stops[0]
        self.calls = 0
        self._encoded: dict[str, list[int]] = {}

    def _encode(self, text: str) -> list[int]:
        ids = self._encoded.get(text)
        if ids is None:
            ids = self._encoded[text] = [*self.template.encode_text(text), self.stop_token_id]
        return ids

    def sample(
        self, prompts: list[list[int]], sampling_params: SamplingParams
    ) -> list[SampleResponse]:
        self.calls += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        limit = sampling_params.max_tokens if sampling_params is not None else None
        responses = []
        for prompt in prompts:
            text = self.respond(prompt)
            tokens = self._encode(text)
            stop_reason = "stop"
            if limit is not None and len(tokens) > limit:
                tokens, stop_reason = tokens[:limit], "length"
            responses.append(
                SampleResponse(
                    sequences=[
                        SampledSequence(
                            stop_reason,
                            list(tokens),
                            [token_logprob(t) for t in tokens],
                            text if stop_reason == "stop" else "",
                        )
                    ],
                    prompt_token_ids=list(prompt),
                )
            )
        return responses
