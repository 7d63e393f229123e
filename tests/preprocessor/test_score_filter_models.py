"""ScoreFilter scorers over real transports: the local OpenAI-compatible server (prompt
logprobs on /v1/completions, chat, an LLM judge through twinkle.protocol.openai) and the
local HF sampler on the tiny random model (logprobs from a forward pass)."""

from __future__ import annotations

import math

import pytest

from twinkle.data_format import user_data_get
from twinkle.preprocessor import (
    ChrMinScorer,
    OpenAIBackend,
    ParaphraseScorer,
    PassNScorer,
    SamplerBackend,
    ScoreFilter,
    SIFDScorer,
)
from twinkle.preprocessor.scorers import chr_min_distinct
from twinkle.testing.openai_server import OpenAIServer, scripted, toy_prompt_logprobs

pytestmark = pytest.mark.slow

ROWS = [
    {
        "id": "weather",
        "messages": [
            {"role": "user", "content": "What is the weather in Oslo today?"},
            {"role": "assistant", "content": "It is sunny and warm in Oslo today, 21 degrees."},
        ],
    },
    {
        "id": "fox",
        "messages": [
            {"role": "user", "content": "Say the sentence about the fox."},
            {"role": "assistant", "content": "The quick brown fox jumps over the lazy dog."},
        ],
    },
]


def _scores(row):
    return user_data_get(row["user_data"], "scores")["1"]


def test_logprob_scorers_over_the_local_openai_server(template, chat_server):
    backend = OpenAIBackend(chat_server.base_url, model="twinkle-test")
    step = ScoreFilter(template, backend, [ChrMinScorer(threshold=None), SIFDScorer()])
    kept, dropped = step(ROWS)
    assert len(kept) == 2 and not dropped
    for row in kept:
        scores = _scores(row)
        assert 0.0 <= scores["chr_min"] <= 1.0 and scores["sifd"] > 0
    # the server computed exactly what the local toy model gives for the same ids
    reply = ROWS[0]["messages"][1]["content"]
    asst = template.tokenizer(reply, add_special_tokens=False)["input_ids"]
    prompt = template.encode(ROWS[0]["messages"][:1], add_generation_prompt=True)
    expected = chr_min_distinct(
        toy_prompt_logprobs(prompt + asst),
        toy_prompt_logprobs(asst),
        prompt + asst,
        asst,
        len(prompt),
    )
    assert math.isclose(_scores(kept[0])["chr_min"], expected)
    sent = [r for r in chat_server.requests if "prompt" in r]
    assert len(sent) == 4 and all(r["echo"] and r["prompt_logprobs"] == 1 for r in sent)
    # the OpenAI echo form (no prompt_logprobs field) is read as well
    ids = prompt + asst
    assert backend._one_logprobs(ids)[1:] == toy_prompt_logprobs(ids)[1:]


def test_pass_n_and_paraphrase_over_the_local_server(template, chat_server):
    chat_server.responder = lambda request: (
        {"content": "<verdict>PASS</verdict>"}
        if request["messages"][0].get("role") == "system"
        else {"content": "Oslo is sunny and warm today, about 21 degrees."}
    )
    from twinkle.protocol.openai import OpenAI

    backend = OpenAIBackend(chat_server.base_url, model="twinkle-test")
    judge = OpenAI(model="judge", base_url=chat_server.base_url, api_key="x")
    scorers = [
        PassNScorer(backend, judge_api=judge, n=2, min_pass=2),
        ParaphraseScorer(backend, template, prompt_budget=2048, sample_max_tokens=64),
    ]
    kept, dropped = ScoreFilter(template, backend, scorers)(ROWS[:1])
    assert len(kept) == 1 and not dropped
    scores = _scores(kept[0])
    assert scores["pass_n"] == 1.0 and 0.0 <= scores["paraphrase"] <= 1.0
    judged = [r for r in chat_server.requests if r.get("model") == "judge"]
    assert len(judged) == 2 and "[模型回答]" in judged[0]["messages"][1]["content"]


def test_server_without_logprobs_gives_a_clear_error(template):
    with OpenAIServer(scripted([(404, {"error": {"message": "no such route"}})] * 8)) as server:
        backend = OpenAIBackend(server.base_url.replace("/v1", "/nope/v1"))
        with pytest.raises(Exception, match="prompt logprobs"):
            ScoreFilter(template, backend, [ChrMinScorer()])(ROWS)


def test_scorers_over_the_local_hf_sampler(tokenizer):
    from twinkle.sampler import HFSampler
    from twinkle.testing.tiny_lm import tiny_causal_lm

    sampler = HFSampler(tiny_causal_lm(tokenizer), tokenizer, default_max_tokens=12)
    backend = SamplerBackend(sampler)
    scorers = [
        ChrMinScorer(threshold=None),
        SIFDScorer(),
        PassNScorer(backend, n=2, sample_max_tokens=8),
        ParaphraseScorer(backend, backend.template, prompt_budget=1024, sample_max_tokens=16),
    ]
    kept, dropped = ScoreFilter(backend=backend, scorers=scorers)(ROWS)
    assert len(kept) + len(dropped) == 2
    scores = _scores(kept[0])
    assert 0.0 <= scores["chr_min"] <= 1.0 and scores["sifd"] > 0
    assert scores["pass_n"] is not None
    # the backend's logprobs are the model's own: check one against a plain forward pass
    import torch

    ids = backend.template.encode(ROWS[0]["messages"], add_generation_prompt=False)[:20]
    with torch.inference_mode():
        logits = sampler.model(torch.tensor([ids])).logits[0].float()
    want = torch.log_softmax(logits, -1)[range(len(ids) - 1), ids[1:]].tolist()
    got = backend.prompt_logprobs_ids([ids])[0]
    assert got[0] is None and all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(got[1:], want))
