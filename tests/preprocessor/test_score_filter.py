"""ScoreFilter and its scorers on a word-level template and an in-memory backend (no model).

The backend's logprobs are the local test server's ``toy_prompt_logprobs``: a token seen
earlier in the sequence is likely, so a reply that repeats its context scores a high ChrMin.
"""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from twinkle.data_format import message_text, user_data_get
from twinkle.preprocessor import (
    ChrMinScorer,
    IntentClassifier,
    ParaphraseScorer,
    PassNScorer,
    ScoreFilter,
    SIFDScorer,
)
from twinkle.preprocessor.chain import build_pipeline
from twinkle.preprocessor.llm_backend import LLMBackend, split_reasoning
from twinkle.preprocessor.scorers import chr_min_distinct, ifd_family_metrics, parse_verdict
from twinkle.testing.openai_server import toy_prompt_logprobs


class WordTokenizer:
    def __init__(self):
        self.vocab: dict[str, int] = {}

    def id(self, word):
        return self.vocab.setdefault(word, len(self.vocab) + 1)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.id(w) for w in text.split()]}


class WordTemplate:
    def __init__(self):
        self.tokenizer = WordTokenizer()

    def encode(self, messages, tools=None, add_generation_prompt=True):
        ids = []
        for m in messages:
            ids += [self.tokenizer.id(f"<{m['role']}>")]
            ids += self.tokenizer(message_text(m))["input_ids"]
        return ids + [self.tokenizer.id("<assistant>")]

    def decode(self, ids):
        words = {v: k for k, v in self.tokenizer.vocab.items()}
        return " ".join(words[i] for i in ids)


class FakeBackend(LLMBackend):
    def __init__(self, dp=1, reply="a fresh paraphrased answer with several brand new words"):
        self.dp_world_size = dp
        self.reply = reply
        self.logprob_batches: list[int] = []
        self.chats: list = []

    def chat(self, messages, *, temperature=0.0, max_tokens=16, n=1):
        self.chats.append(messages)
        return [{"content": self.reply, "reasoning_content": ""} for _ in range(n)]

    def prompt_logprobs_ids(self, input_ids_list):
        assert len(input_ids_list) >= self.dp_world_size  # callers pad to the floor
        self.logprob_batches.append(len(input_ids_list))
        return [toy_prompt_logprobs(list(ids)) for ids in input_ids_list]


Q = "please list the colors of the rainbow in order from red to violet"
PARROT = "please list the colors of the rainbow in order from red to violet"
FRESH = "red orange yellow green blue indigo violet are seven hues seen"


def row(answer, **extra):
    return {
        "messages": [{"role": "user", "content": Q}, {"role": "assistant", "content": answer}],
        **extra,
    }


def test_no_arguments_says_what_it_needs():
    with pytest.raises(TypeError, match="ScoreFilter needs a model: pass backend="):
        ScoreFilter()
    with pytest.raises(TypeError, match="template="):
        ScoreFilter(backend=FakeBackend())
    with pytest.raises(TypeError, match="needs a model"):
        build_pipeline(["score"])
    from twinkle.cli.curate import curate

    result = CliRunner().invoke(curate, ["README.md", "-o", "x.jsonl", "--filters", "score"])
    assert result.exit_code == 2 and "needs a model" in result.output


def test_logprob_statistics_by_hand():
    # prompt [1, 2] then reply [3, 4, 3]; cond - asst deltas: 3 -> 0.5, 4 -> -0.5, 3 -> 1.0
    cond = [None, -1.0, -1.0, -2.0, -1.5]
    asst = [None, -1.5, -1.5]
    assert chr_min_distinct(cond, [-9.0, -2.5, -1.0], [1, 2, 3, 4, 3], [3, 4, 3], 2) == 0.5
    m = ifd_family_metrics(cond, asst, [1, 2, 3, 4, 3], [3, 4, 3], 2)
    assert m["n_tokens"] == 2 and math.isclose(m["mean_delta"], -0.25)
    assert math.isclose(m["ifd"], math.exp(0.25)) and math.isclose(m["s_ifd_50"], math.exp(0.5))
    assert chr_min_distinct([], asst, [1], [3], 0) is None
    assert parse_verdict("ok <verdict> PASS </verdict>") is True
    assert parse_verdict("<verdict>FAIL</verdict>") is False and parse_verdict("maybe") is None
    assert split_reasoning("<think>plan</think> answer") == ("answer", "plan")


def test_chr_min_drops_the_parrot_and_keeps_the_answer():
    backend = FakeBackend(dp=4)
    step = ScoreFilter(WordTemplate(), backend, [ChrMinScorer(), SIFDScorer()])
    kept, dropped = step([row(PARROT, id="parrot"), row(FRESH, id="fresh"), row("too short")])
    assert [r["id"] for r in kept if "id" in r] == ["fresh"] and len(kept) == 2
    assert [(d["id"], d["drop_reason"]) for d in dropped] == [("parrot", "score_round_failed")]
    scores = user_data_get(kept[0]["user_data"], "scores")["1"]
    assert scores["chr_min"] < 0.47 and scores["sifd"] > 0
    assert backend.logprob_batches == [4, 4]  # cond and asst batches, padded to dp_world_size
    two_sided = ScoreFilter(WordTemplate(), FakeBackend(), [ChrMinScorer(threshold=1.1, low=0.5)])
    kept, dropped = two_sided([row(PARROT), row(FRESH)])
    assert kept[0]["messages"][1]["content"] == PARROT and dropped[0]["drop_reason"]


def test_key_rounds_narrowed_intents_and_no_context_rules(tmp_path):
    msgs = [
        {"role": "user", "content": Q},
        {"role": "assistant", "content": PARROT},
        {"role": "user", "content": "and now in reverse order please"},
        {"role": "assistant", "content": FRESH},
    ]
    tagged = {"messages": msgs, "user_data": [["key_rounds", "[1, 3]"], ["source", "x"]]}
    trace = tmp_path / "traces"
    trace.mkdir()
    (trace / "keep-me.txt").write_text("x")
    step = ScoreFilter(WordTemplate(), FakeBackend(), [ChrMinScorer()], trace_dir=str(trace))
    kept, dropped = step([tagged])
    assert not dropped and user_data_get(kept[0]["user_data"], "key_rounds") == [3]
    assert user_data_get(kept[0]["user_data"], "source") == "x"
    names = sorted(p.name for p in trace.iterdir())
    assert "keep-me.txt" in names  # an existing folder is never emptied
    assert sum(n.startswith("score-fail-") for n in names) == 1
    assert sum(n.startswith("score-ok-") for n in names) == 1
    all_fail = {"messages": msgs[:2], "user_data": [["key_rounds", "[1]"]]}
    assert step([all_fail, row(FRESH)])[1][0]["drop_reason"] == "score_all_rounds_failed"
    only_math = ScoreFilter(WordTemplate(), FakeBackend(), [ChrMinScorer()], intents=["math"])
    rows = IntentClassifier()([row(FRESH)])[0]
    assert only_math(rows + [row("short")])[0] == rows + [row("short")]  # nothing to score
    kept, dropped = only_math(
        rows
        + [{"messages": msgs, "user_data": [["key_rounds", "[3]"], ["intents", '{"3": "math"}']]}]
    )
    assert [d["drop_reason"] for d in dropped] == ["score_no_context"] and len(kept) == 1


def test_pass_n_with_a_judge_and_paraphrase_padding():
    verdicts = iter(["<verdict>PASS</verdict>", "FAIL", "<verdict>PASS</verdict>", "unsure"])
    seen = []

    def judge(traj, params, **kw):
        seen.append((traj["messages"][1]["content"], kw))
        return {"role": "assistant", "content": next(verdicts)}

    backend = FakeBackend()
    scorer = PassNScorer(backend, judge_api=judge, n=4, min_pass=3, judge_max_workers=1)
    step = ScoreFilter(WordTemplate(), backend, [scorer])
    kept, dropped = step([row(FRESH)])
    assert not kept and dropped[0]["drop_reason"] == "score_round_failed"  # 2 of 4 < 3
    assert "[参考答案]" in seen[0][0] and seen[0][1]["extra_body"] == {"enable_thinking": False}
    backend = FakeBackend(dp=3)
    template = WordTemplate()
    para = ParaphraseScorer(backend, template, chr_min_threshold=0.47, prompt_budget=200)
    kept, _ = ScoreFilter(template, backend, [para])([row(FRESH)])
    assert user_data_get(kept[0]["user_data"], "scores")["1"]["paraphrase"] is not None
    assert backend.logprob_batches == [3, 3]  # padded to the data-parallel floor
    assert "<reference_answer>" in backend.chats[0][-1]["content"]


def test_openai_backend_reads_both_logprob_answer_forms(monkeypatch):
    from twinkle.preprocessor import OpenAIBackend

    backend = OpenAIBackend("http://127.0.0.1:9", model="m")
    assert backend.base_url == "http://127.0.0.1:9/v1"
    echo = {"choices": [{"logprobs": {"token_logprobs": [None, -1.0, -2.0, -0.1]}}]}
    monkeypatch.setattr(backend, "_post", lambda path, body: echo)
    assert backend.prompt_logprobs_ids([[5, 6, 7]]) == [[None, -1.0, -2.0]]
    vllm = {
        "choices": [{"prompt_logprobs": [None, {"6": {"logprob": -0.5, "rank": 1}}, {"3": -9}]}]
    }
    monkeypatch.setattr(backend, "_post", lambda path, body: vllm)
    assert backend.prompt_logprobs_ids([[5, 6, 7]]) == [[None, -0.5, -9.0]]
    monkeypatch.setattr(backend, "_post", lambda path, body: {"choices": [{"text": ""}]})
    with pytest.raises(RuntimeError, match="without prompt logprobs"):
        backend.prompt_logprobs_ids([[5, 6]])
