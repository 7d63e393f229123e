"""Model backends for ``ScoreFilter`` and its scorers: chat sampling and prompt logprobs.

Two backends share one small interface (``LLMBackend``):

- ``OpenAIBackend``: any OpenAI-compatible server over ``httpx`` (a core dependency).
  ``chat`` posts to ``/v1/chat/completions``; ``prompt_logprobs_ids`` posts token ids to
  ``/v1/completions`` with ``echo`` and ``logprobs`` (and vLLM's ``prompt_logprobs``) and
  reads either answer form: vLLM's ``choices[0].prompt_logprobs`` or the OpenAI
  ``choices[0].logprobs.token_logprobs``. The ids must come from the served model's
  tokenizer (``ScoreFilter``'s ``template``).
- ``SamplerBackend``: a local twinkle sampler. ``chat`` renders with the template and calls
  ``sampler.sample``; ``prompt_logprobs_ids`` runs one forward pass of the sampler's
  ``transformers`` model (``HFSampler``), or the sampler's own ``prompt_logprobs_ids``.

``prompt_logprobs_ids(batch)`` returns, per sequence, one float per token: the logprob of
token *i* given tokens *< i*, with None at position 0. ``dp_world_size`` is the batch floor
that callers pad to (``pad_batch``).

Example:
    >>> backend = OpenAIBackend('http://127.0.0.1:8000/v1', model='m')
    >>> backend.base_url
    'http://127.0.0.1:8000/v1'
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from twinkle.data_format import SamplingParams
from twinkle.errors import ProtocolError

logger = logging.getLogger("twinkle.preprocessor")

Messages = list[dict[str, Any]]
Logprobs = list[float | None]


class BackendError(ProtocolError, RuntimeError):
    """A backend call that cannot give what a scorer needs (the message says what to do)."""


def split_reasoning(text: str) -> tuple[str, str]:
    """``(content, reasoning)`` of generated text: the reasoning ends at the first ``</think>``."""
    if "</think>" not in text:
        return text.strip(), ""
    head, _, tail = text.partition("</think>")
    return tail.strip(), head.rsplit("<think>", 1)[-1].strip()


def pad_batch(batch: list[Any], floor: int) -> tuple[list[Any], int]:
    """``(batch padded with copies of its last item to floor, original length)``."""
    n = len(batch)
    if not batch or n >= floor:
        return batch, n
    return batch + [batch[-1]] * (floor - n), n


class LLMBackend(ABC):
    """What the scorers need from a model (see the module doc)."""

    #: Callers pad ``prompt_logprobs_ids`` batches to at least this many sequences.
    dp_world_size: int = 1

    @abstractmethod
    def chat(
        self, messages: Messages, *, temperature: float = 0.0, max_tokens: int = 16, n: int = 1
    ) -> list[dict[str, str]]:
        """``n`` replies ``{'content', 'reasoning_content'}``; ``[]`` when the call failed."""

    def chat_batch(
        self,
        batch: Sequence[Messages],
        *,
        temperature: float = 0.0,
        max_tokens: int = 16,
        n: int = 1,
    ) -> list[list[dict[str, str]]]:
        return [self.chat(m, temperature=temperature, max_tokens=max_tokens, n=n) for m in batch]

    @abstractmethod
    def prompt_logprobs_ids(self, input_ids_list: Sequence[Sequence[int]]) -> list[Logprobs]:
        """Per sequence, the logprob of each token given the ones before (None first)."""


def _logprob_entry(entry: Any, token_id: int) -> float | None:
    """One vLLM ``prompt_logprobs`` entry (``{id: {logprob, ...}}``) for ``token_id``."""
    if entry is None:
        return None
    if isinstance(entry, (int, float)):
        return float(entry)
    if not isinstance(entry, dict) or not entry:
        return None
    value = entry.get(str(token_id), entry.get(token_id))  # type: ignore[call-overload]
    if value is None:
        value = next(iter(entry.values()))
    if isinstance(value, dict):
        value = value.get("logprob")
    return float(value) if isinstance(value, (int, float)) else None


class OpenAIBackend(LLMBackend):
    """An OpenAI-compatible endpoint (``endpoint`` with or without the ``/v1`` suffix).

    Args:
        endpoint: server URL, e.g. ``http://127.0.0.1:8000/v1``.
        model: model id sent with every request.
        api_key: bearer token ('' sends none).
        timeout: seconds per request.
        max_workers: parallel requests in ``chat_batch`` and ``prompt_logprobs_ids``.
    """

    def __init__(
        self,
        endpoint: str,
        model: str = "default",
        api_key: str = "",
        timeout: float = 120.0,
        max_workers: int = 16,
    ) -> None:
        if not endpoint:
            raise ValueError("OpenAIBackend needs an endpoint such as http://127.0.0.1:8000/v1")
        base = endpoint.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.max_workers = max_workers
        self._client: Any = None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.Client(timeout=self.timeout, headers=headers)
        response = self._client.post(self.base_url + path, json={"model": self.model, **body})
        response.raise_for_status()
        return response.json()

    def chat(
        self, messages: Messages, *, temperature: float = 0.0, max_tokens: int = 16, n: int = 1
    ) -> list[dict[str, str]]:
        body = {"messages": messages, "temperature": temperature, "max_tokens": max_tokens, "n": n}
        try:
            choices = self._post("/chat/completions", body)["choices"]
        except Exception as exc:  # noqa: BLE001 - a failed rollout is scored as empty, not fatal
            logger.warning("chat request to %s failed: %r", self.base_url, exc)
            return []
        out = []
        for choice in choices:
            message = choice.get("message") or {}
            content, reasoning = message.get("content") or "", message.get("reasoning_content")
            if not reasoning:
                content, reasoning = split_reasoning(content)
            out.append({"content": content, "reasoning_content": reasoning or ""})
        return out

    def chat_batch(
        self,
        batch: Sequence[Messages],
        *,
        temperature: float = 0.0,
        max_tokens: int = 16,
        n: int = 1,
    ) -> list[list[dict[str, str]]]:
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(
                pool.map(
                    lambda m: self.chat(m, temperature=temperature, max_tokens=max_tokens, n=n),
                    batch,
                )
            )

    def _one_logprobs(self, ids: Sequence[int]) -> Logprobs:
        body = {
            "prompt": list(ids),
            "max_tokens": 1,
            "echo": True,
            "logprobs": 1,
            "prompt_logprobs": 1,
            "temperature": 0.0,
        }
        try:
            choice = self._post("/completions", body)["choices"][0]
        except Exception as exc:  # noqa: BLE001 - reported below with what to check
            raise BackendError(
                f"{self.base_url}/completions did not return prompt logprobs ({exc!r}); the "
                "logprob scorers need an endpoint that accepts token-id prompts with echo and "
                "logprobs (vLLM, SGLang, twinkle.testing.openai_server)"
            ) from exc
        prompt_lp = choice.get("prompt_logprobs")
        if isinstance(prompt_lp, list):
            return [_logprob_entry(e, t) for e, t in zip(prompt_lp, ids)] + [None] * (
                len(ids) - len(prompt_lp)
            )
        token_lp = (choice.get("logprobs") or {}).get("token_logprobs")
        if isinstance(token_lp, list) and len(token_lp) >= len(ids):
            values = [None if v is None else float(v) for v in token_lp[: len(ids)]]
            return [None, *values[1:]]
        raise BackendError(
            f"{self.base_url}/completions answered without prompt logprobs; serve the model "
            "with vLLM/SGLang or another server that supports echo with logprobs"
        )

    def prompt_logprobs_ids(self, input_ids_list: Sequence[Sequence[int]]) -> list[Logprobs]:
        if not input_ids_list:
            return []
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(pool.map(self._one_logprobs, input_ids_list))


class SamplerBackend(LLMBackend):
    """A local twinkle sampler (``HFSampler`` or any ``Sampler``) and its chat template.

    Args:
        sampler: the sampler; ``HFSampler`` gives prompt logprobs from its model.
        template: a ``ChatTemplate``; default: one over ``sampler.tokenizer``.
    """

    def __init__(self, sampler: Any, template: Any = None) -> None:
        self.sampler = sampler
        if template is None:
            tokenizer = getattr(sampler, "tokenizer", None)
            if tokenizer is None:
                raise ValueError("SamplerBackend needs template= (the sampler has no tokenizer)")
            from twinkle.sampler.template import ChatTemplate

            template = ChatTemplate(tokenizer)
        self.template = template
        mesh = getattr(sampler, "device_mesh", None)
        self.dp_world_size = int(getattr(mesh, "dp_world_size", 1) or 1)

    def chat_batch(
        self,
        batch: Sequence[Messages],
        *,
        temperature: float = 0.0,
        max_tokens: int = 16,
        n: int = 1,
    ) -> list[list[dict[str, str]]]:
        if not batch:
            return []
        prompts = [self.template.encode(list(m), add_generation_prompt=True) for m in batch]
        flat = [p for p in prompts for _ in range(n)]
        padded, real = pad_batch(flat, self.dp_world_size)
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
        try:
            responses = self.sampler.sample(padded, params)[:real]
        except Exception as exc:  # noqa: BLE001 - a failed rollout is scored as empty, not fatal
            logger.warning("sampling for scoring failed: %r", exc)
            return [[] for _ in batch]
        out: list[list[dict[str, str]]] = []
        for i in range(len(batch)):
            replies = []
            for response in responses[i * n : (i + 1) * n]:
                seq = response.sequences[0]
                text = seq.decoded or self.template.decode(seq.tokens)
                content, reasoning = split_reasoning(text)
                replies.append({"content": content, "reasoning_content": reasoning})
            out.append(replies)
        return out

    def chat(
        self, messages: Messages, *, temperature: float = 0.0, max_tokens: int = 16, n: int = 1
    ) -> list[dict[str, str]]:
        return self.chat_batch([messages], temperature=temperature, max_tokens=max_tokens, n=n)[0]

    def prompt_logprobs_ids(self, input_ids_list: Sequence[Sequence[int]]) -> list[Logprobs]:
        if not isinstance(input_ids_list, (list, tuple)) or not input_ids_list:
            raise ValueError("prompt_logprobs_ids needs a non-empty list of token-id lists")
        own = getattr(self.sampler, "prompt_logprobs_ids", None)
        if callable(own):
            return own(input_ids_list)
        model = getattr(self.sampler, "model", None)
        if model is None:
            raise BackendError(
                f"{type(self.sampler).__name__} gives no prompt logprobs: use HFSampler, or a "
                "sampler with prompt_logprobs_ids(), or OpenAIBackend on a vLLM server"
            )
        return [_forward_logprobs(model, ids) for ids in input_ids_list]


def _forward_logprobs(model: Any, ids: Sequence[int]) -> Logprobs:
    """Logprob of each token given the ones before, from one forward pass."""
    import torch

    if len(ids) < 2:
        return [None] * len(ids)
    device = getattr(model, "device", "cpu")
    with torch.inference_mode():
        tensor = torch.tensor([list(ids)], device=device)
        logits = model(input_ids=tensor).logits[0, :-1].float()
        lp = torch.log_softmax(logits, dim=-1).gather(-1, tensor[0, 1:].unsqueeze(-1))
    return [None, *lp.squeeze(-1).tolist()]
