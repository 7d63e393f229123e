"""HFSampler on a tiny random Llama and a locally trained tokenizer: logprobs and alignment
end to end, checked against an independent forward pass over the final token sequence."""

import json

import pytest
import torch

from twinkle.data_format import SamplingParams
from twinkle.rollout import MultiTurnRollout
from twinkle.sampler import HFSampler
from twinkle.testing.tiny_lm import tiny_causal_lm
from twinkle.tools import Tool, ToolManager

pytestmark = pytest.mark.slow


class Echo(Tool):
    def __call__(self, tool_name, arguments):
        return f"echo {arguments.get('text', '')}"

    def tool_info(self):
        return {
            "type": "function",
            "function": {
                "name": "echo",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        }


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_causal_lm(tokenizer)


def forward_logprobs(model, ids):
    """log p(ids[i] | ids[:i]) for every i >= 1, from one plain forward pass."""
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [None] + [logp[i - 1, ids[i]].item() for i in range(1, len(ids))]


class ForceReplies:
    """Constrained decoding: force a scripted reply per turn (the model's own logprobs stay
    what they are; only the choice of token is forced). The reply depends on how many
    ``<tool_response>`` tokens the row's prompt holds."""

    def __init__(self, tokenizer, replies):
        self.marker = tokenizer.convert_tokens_to_ids("<tool_response>")
        self.start = tokenizer.convert_tokens_to_ids("<|im_start|>")
        self.header = len(tokenizer.encode("assistant\n", add_special_tokens=False))
        self.replies = [
            tokenizer.encode(r, add_special_tokens=False) + [tokenizer.eos_token_id]
            for r in replies
        ]

    def __call__(self, input_ids, scores):
        forced = torch.full_like(scores, float("-inf"))
        for row, ids in enumerate(input_ids.tolist()):
            last_start = len(ids) - 1 - ids[::-1].index(self.start)
            generated = len(ids) - (last_start + 1 + self.header)
            script = self.replies[min(ids.count(self.marker), len(self.replies) - 1)]
            forced[row, script[min(generated, len(script) - 1)]] = 0.0
        return scores + forced


def test_sampled_logprobs_match_a_forward_pass_with_left_padding(tokenizer, template, model):
    sampler = HFSampler(model, tokenizer)
    prompts = [
        template.encode([{"role": "user", "content": text}])
        for text in ("hi", "what is the weather in Oslo today?")
    ]
    assert len(prompts[0]) != len(prompts[1])  # the batch really is left-padded
    responses = sampler.sample(prompts, SamplingParams(max_tokens=6, temperature=0))
    for prompt, response in zip(prompts, responses):
        seq = response.sequences[0]
        assert seq.stop_reason in ("stop", "length") and len(seq.tokens) == len(seq.logprobs) <= 6
        reference = forward_logprobs(model, prompt + seq.tokens)[len(prompt) :]
        assert seq.logprobs == pytest.approx(reference, abs=1e-4)
        assert seq.decoded == tokenizer.decode(seq.tokens, skip_special_tokens=True)


def test_length_stop_and_sampling_with_a_seed(tokenizer, template, model):
    sampler = HFSampler(model, tokenizer, stop_token_ids=[tokenizer.pad_token_id])
    prompt = [template.encode([{"role": "user", "content": "hi"}])]
    a = sampler.sample(prompt, SamplingParams(max_tokens=5, temperature=1.0, seed=7))[0].sequences[
        0
    ]
    b = sampler.sample(prompt, SamplingParams(max_tokens=5, temperature=1.0, seed=7))[0].sequences[
        0
    ]
    assert a.tokens == b.tokens and a.stop_reason in ("length", "stop")
    if a.stop_reason == "length":
        assert len(a.tokens) == 5


def test_multi_turn_rollout_is_token_exact_end_to_end(tokenizer, template, model):
    call = '<tool_call>\n{"name": "echo", "arguments": {"text": "x"}}\n</tool_call>'
    sampler = HFSampler(
        model, tokenizer, logits_processors=[ForceReplies(tokenizer, [call, "fine"])]
    )
    rollout = MultiTurnRollout(
        sampler,
        template,
        ToolManager([Echo()]),
        max_turns=4,
        sampling_params=SamplingParams(max_tokens=40, temperature=0),
    )
    batch = [
        {"messages": [{"role": "user", "content": text}]}
        for text in ("hi", "weather in Oslo please")
    ]
    for out in rollout(batch):
        assert (out["stop_reason"], out["turns"]) == ("stop", 2)
        assert out["messages"][1]["tool_calls"][0]["function"] == {
            "name": "echo",
            "arguments": json.dumps({"text": "x"}),
        }
        assert out["messages"][2] == {
            "role": "tool",
            "tool_call_id": "call_1_0",
            "name": "echo",
            "content": "echo x",
        }
        ids, labels = out["input_ids"], out["labels"]
        positions = [i for i, label in enumerate(labels) if label != -100]
        assert [ids[i] for i in positions] == [labels[i] for i in positions]
        assert len(positions) == len(out["logprobs"])
        # Every trainable token's logprob is the model's, at that exact position of the final
        # sequence.
        reference = forward_logprobs(model, ids)
        assert out["logprobs"] == pytest.approx([reference[i] for i in positions], abs=1e-4)
        assert tokenizer.decode(ids) == template.render(
            out["messages"], [Echo().tool_info()]
        ).rstrip("\n")
