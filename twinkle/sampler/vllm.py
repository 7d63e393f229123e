"""``VLLMSampler``: batched sampling with in-process ``vllm.LLM``, for GPU nodes.

vLLM cannot share an environment with Prefect (conflicting fastapi pins, see
``infra/vllm/README.md``), so this sampler is for GPU workers that run ``MultiTurnRollout``
in their own environment; everywhere else serve the model with ``vllm serve`` and use
``APIMultiTurnRollout``. ``vllm`` is imported only when the sampler is built.

Prompts are passed as token ids (``{'prompt_token_ids': ...}``) so vLLM never re-tokenises
them, and ``logprobs=0`` asks for the sampled token's own logprob.

Example:
    >>> kwargs = {'gpu_memory_utilization': 0.8}
    >>> sampler = VLLMSampler('Qwen/Qwen2.5-7B-Instruct', llm_kwargs=kwargs)  # doctest: +SKIP
    >>> sampler.sample([[151644, 872]], SamplingParams(max_tokens=64))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from twinkle.data_format import SampledSequence, SampleResponse, SamplingParams
from twinkle.errors import MissingExtraError, require
from twinkle.sampler.base import Sampler


def _import_vllm() -> Any:
    # vllm is no extra (it cannot share an environment with Prefect): the hint names it.
    try:
        return require("vllm", "VLLMSampler", package="vllm")
    except MissingExtraError as exc:
        exc.add_note(
            "vLLM cannot share an environment with Prefect: install it on the GPU node, or "
            "serve the model with `vllm serve` and use APIMultiTurnRollout with "
            "twinkle.protocol.openai.OpenAI"
        )
        raise


class VLLMSampler(Sampler):
    """Sample with an in-process ``vllm.LLM`` (built on first use).

    Args:
        model: a model path or hub id, or an existing ``vllm.LLM``.
        llm_kwargs: keyword arguments for ``vllm.LLM`` (tensor_parallel_size, dtype...).
        stop_token_ids: extra ids that end a turn (the model's EOS always does).

    Example:
        >>> kwargs = {'tensor_parallel_size': 2}
        >>> sampler = VLLMSampler('/models/qwen3-8b', llm_kwargs=kwargs)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        *,
        llm_kwargs: dict[str, Any] | None = None,
        stop_token_ids: list[int] | None = None,
    ) -> None:
        self.model = model
        self.llm_kwargs = dict(llm_kwargs or {})
        self.stop_token_ids = list(stop_token_ids or [])
        self._llm: Any = None if isinstance(model, str) else model

    @property
    def llm(self) -> Any:
        if self._llm is None:
            self._llm = _import_vllm().LLM(model=self.model, **self.llm_kwargs)
        return self._llm

    def vllm_params(self, sp: SamplingParams) -> Any:
        """vLLM ``SamplingParams`` for ours."""
        return _import_vllm().SamplingParams(
            n=sp.num_samples,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=sp.top_k,
            repetition_penalty=sp.repetition_penalty,
            max_tokens=sp.max_tokens,
            seed=sp.seed,
            stop=sp.stop,
            stop_token_ids=self.stop_token_ids or None,
            logprobs=0 if sp.logprobs is None else sp.logprobs,
        )

    def sample(
        self, prompts: list[list[int]], sampling_params: SamplingParams
    ) -> list[SampleResponse]:
        sp = sampling_params or SamplingParams()
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts], self.vllm_params(sp), use_tqdm=False
        )
        responses = []
        for prompt, output in zip(prompts, outputs):
            sequences = []
            for completion in output.outputs:
                tokens = list(completion.token_ids)
                logprobs = None
                if completion.logprobs is not None:
                    logprobs = [
                        float(step[token].logprob)
                        for step, token in zip(completion.logprobs, tokens)
                    ]
                reason = completion.finish_reason or "stop"
                sequences.append(
                    SampledSequence(
                        "length"
                        if reason == "length"
                        else "abort"
                        if reason == "abort"
                        else "stop",
                        tokens,
                        logprobs,
                        completion.text or "",
                    )
                )
            responses.append(SampleResponse(sequences=sequences, prompt_token_ids=list(prompt)))
        return responses
