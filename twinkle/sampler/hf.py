"""``HFSampler``: batched sampling with ``transformers`` ``generate``, for CPU and small models.

transformers is used because it runs any Hugging Face causal LM on CPU or one GPU with no
server; torch and transformers are imported on first use (the ``hf`` extra). Prompts are
left-padded into one batch; each sampled token's logprob is read from the model's raw
logits (``output_logits=True``), i.e. before temperature and top-k/top-p, which is what
vLLM reports by default and what a policy-gradient loss compares against.

Example:
    >>> sampler = HFSampler.from_pretrained('Qwen/Qwen2.5-0.5B-Instruct')  # doctest: +SKIP
    >>> out = sampler.sample([[151644, 872]], SamplingParams(max_tokens=8))  # doctest: +SKIP
    >>> out[0].sequences[0].stop_reason  # doctest: +SKIP
    'length'
"""

from __future__ import annotations

from typing import Any

from twinkle.data_format import SampledSequence, SampleResponse, SamplingParams
from twinkle.errors import require
from twinkle.sampler.base import Sampler
from twinkle.sampler.template import END_OF_TURN_TOKENS


def _import_torch() -> Any:
    return require("torch", "HFSampler", "hf")


class HFSampler(Sampler):
    """Sample from a ``transformers`` causal LM.

    Args:
        model: a causal LM (``AutoModelForCausalLM``), already on its device.
        tokenizer: its tokenizer (pad and stop tokens come from it).
        stop_token_ids: ids that end a turn; default: EOS and known end-of-turn tokens.
        default_max_tokens: ``max_new_tokens`` when ``SamplingParams.max_tokens`` is None.
        max_batch_size: split larger batches into chunks of this size.
        logits_processors: extra ``transformers`` logits processors (constrained decoding);
            they change what is sampled, not the reported logprobs.

    Example:
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer  # doctest: +SKIP
        >>> model = AutoModelForCausalLM.from_pretrained(path)  # doctest: +SKIP
        >>> sampler = HFSampler(model, AutoTokenizer.from_pretrained(path))  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        stop_token_ids: list[int] | None = None,
        default_max_tokens: int = 256,
        max_batch_size: int | None = None,
        logits_processors: list[Any] | None = None,
    ) -> None:
        if default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {default_max_tokens}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        if stop_token_ids is None:
            vocab = tokenizer.get_vocab()
            stop_token_ids = []
            for token in (tokenizer.eos_token, *END_OF_TURN_TOKENS):
                if token and token in vocab and vocab[token] not in stop_token_ids:
                    stop_token_ids.append(vocab[token])
        if not stop_token_ids:
            raise ValueError("no stop token: pass stop_token_ids=")
        self.stop_token_ids = list(stop_token_ids)
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        )
        self.default_max_tokens = default_max_tokens
        self.max_batch_size = max_batch_size
        self.logits_processors = list(logits_processors or [])

    @classmethod
    def from_pretrained(
        cls, path: str, *, dtype: Any = "auto", device: str | None = None, **kwargs: Any
    ) -> HFSampler:
        """Load model and tokenizer from a local path or hub id."""
        _import_torch()
        require("transformers", "HFSampler", "hf")  # the install hint, before the import below
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        if device is not None:
            model = model.to(device)
        return cls(model.eval(), AutoTokenizer.from_pretrained(path), **kwargs)

    def sample(
        self, prompts: list[list[int]], sampling_params: SamplingParams
    ) -> list[SampleResponse]:
        sp = sampling_params or SamplingParams()
        if sp.num_samples != 1:
            raise ValueError(
                f"HFSampler samples one sequence per prompt; got num_samples={sp.num_samples}"
            )
        size = self.max_batch_size or max(1, len(prompts))
        out: list[SampleResponse] = []
        for start in range(0, len(prompts), size):
            out.extend(self._sample_chunk(prompts[start : start + size], sp))
        return out

    def _generate_kwargs(self, sp: SamplingParams) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": sp.max_tokens or self.default_max_tokens,
            "eos_token_id": self.stop_token_ids,
            "pad_token_id": self.pad_token_id,
            "return_dict_in_generate": True,
            "output_logits": True,
            "do_sample": sp.temperature > 0,
            "repetition_penalty": sp.repetition_penalty,
        }
        if sp.temperature > 0:
            kwargs.update(
                temperature=sp.temperature, top_p=sp.top_p, top_k=sp.top_k if sp.top_k != -1 else 0
            )
        else:  # greedy: silence sampling defaults a model's generation config may carry
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if sp.stop:
            kwargs.update(stop_strings=list(sp.stop), tokenizer=self.tokenizer)
        if self.logits_processors:
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList(self.logits_processors)
        return kwargs

    def _sample_chunk(self, prompts: list[list[int]], sp: SamplingParams) -> list[SampleResponse]:
        torch = _import_torch()
        if any(not prompt for prompt in prompts):
            raise ValueError("HFSampler got an empty prompt")
        width = max(len(p) for p in prompts)
        device = getattr(self.model, "device", "cpu")
        input_ids = torch.tensor(
            [[self.pad_token_id] * (width - len(p)) + list(p) for p in prompts], device=device
        )
        attention = torch.tensor(
            [[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device
        )
        if sp.seed is not None:
            torch.manual_seed(sp.seed)
        with torch.inference_mode():
            result = self.model.generate(
                input_ids=input_ids, attention_mask=attention, **self._generate_kwargs(sp)
            )
        new = result.sequences[:, width:]
        logits = torch.stack(result.logits, dim=1).float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        responses = []
        for row, prompt in enumerate(prompts):
            tokens = new[row].tolist()
            row_logprobs = logprobs[row].tolist()
            end, stop_reason = len(tokens), "length"
            for i, token in enumerate(tokens):
                if token in self.stop_token_ids:
                    end, stop_reason = i + 1, "stop"
                    break
            if stop_reason == "length" and sp.stop:
                end, stop_reason = self._stop_string_end(tokens, sp.stop)
            tokens, row_logprobs = tokens[:end], row_logprobs[:end]
            responses.append(
                SampleResponse(
                    sequences=[
                        SampledSequence(
                            stop_reason,
                            tokens,
                            row_logprobs,
                            self.tokenizer.decode(tokens, skip_special_tokens=True),
                        )
                    ],
                    prompt_token_ids=list(prompt),
                )
            )
        return responses

    def _stop_string_end(self, tokens: list[int], stops: list[str]) -> tuple[int, str]:
        """Where a stop string completed (generation pads the rest of a finished row)."""
        for i in range(len(tokens)):
            text = self.tokenizer.decode(tokens[: i + 1], skip_special_tokens=False)
            if any(stop in text for stop in stops):
                return i + 1, "stop"
        return len(tokens), "length"
