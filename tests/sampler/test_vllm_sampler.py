"""VLLMSampler's mapping to vLLM. vLLM needs a GPU and its own environment, so a stand-in
``vllm`` module (the only fake in this folder) records what the sampler asks for."""

import sys
import types
from dataclasses import dataclass

import pytest

from twinkle.data_format import SamplingParams
from twinkle.sampler.vllm import VLLMSampler


@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Completion:
    token_ids: list
    logprobs: list
    finish_reason: str
    text: str


@dataclass
class _Output:
    outputs: list


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    calls = {}

    class LLM:
        def __init__(self, model, **kwargs):
            calls["init"] = (model, kwargs)

        def generate(self, prompts, params, use_tqdm=False):
            calls["generate"] = (prompts, params)
            return [
                _Output(
                    [
                        _Completion(
                            [7, 8, 2],
                            [{7: _Logprob(-0.5)}, {8: _Logprob(-1.0)}, {2: _Logprob(-0.1)}],
                            "stop",
                            "hi",
                        )
                    ]
                ),
                _Output([_Completion([9], [{9: _Logprob(-2.0)}], "length", "x")]),
            ]

    module.LLM = LLM
    module.SamplingParams = lambda **kwargs: kwargs
    monkeypatch.setitem(sys.modules, "vllm", module)
    return calls


def test_token_ids_in_and_logprobs_out(fake_vllm):
    sampler = VLLMSampler("/models/m", llm_kwargs={"tensor_parallel_size": 2}, stop_token_ids=[2])
    out = sampler.sample([[1, 2, 3], [4]], SamplingParams(max_tokens=16, temperature=0.7, seed=1))
    assert fake_vllm["init"] == ("/models/m", {"tensor_parallel_size": 2})
    prompts, params = fake_vllm["generate"]
    assert prompts == [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [4]}]
    assert (
        params["max_tokens"] == 16 and params["logprobs"] == 0 and params["stop_token_ids"] == [2]
    )
    first, second = out[0].sequences[0], out[1].sequences[0]
    assert (first.tokens, first.logprobs, first.stop_reason, first.decoded) == (
        [7, 8, 2],
        [-0.5, -1.0, -0.1],
        "stop",
        "hi",
    )
    assert second.stop_reason == "length"


def test_missing_vllm_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match="vllm serve"):
        VLLMSampler("/models/m").sample([[1]], SamplingParams())
