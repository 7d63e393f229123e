"""huggingface adapter over real `datasets`: Dataset objects, save_to_disk, JSON/JSONL/Parquet."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twinkle.core import Action
from twinkle.core.registry import environment_registry
from twinkle.errors import EnvError

GSM8K = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "Half of 9?", "answer": "9 / 2\n#### 4.5"},
]
MATH = [{"problem": "What is $1/2 + 0$?", "solution": "It is $\\boxed{\\frac{1}{2}}$."}]
MMLU = [{"question": "Capital of France?", "choices": ["Rome", "Paris", "Oslo"], "answer": 1}]


def _score(env, index, reply):
    state, _ = env.reset(options={"task_index": index})
    return env.step(state, Action.from_text(reply))


def test_datasets_dataset_with_gsm8k_preset():
    import datasets

    env = environment_registry.get(
        "gsm8k", adapter="huggingface", dataset=datasets.Dataset.from_list(GSM8K)
    )
    assert len(env) == 2 and env.task(0)["answer"] == "7"
    right = _score(env, 0, "3 plus 4 is 7, so \\boxed{7}")
    assert right.rewards.total == 1.0 and right.extracted_action == right.resolved_action == "7"
    assert _score(env, 0, "\\boxed{8}").rewards.total == 0.0
    assert _score(env, 1, "The answer is \\boxed{\\frac{9}{2}}").rewards.total == 1.0


def test_save_to_disk_folder_and_dataset_dict_split(tmp_path):
    import datasets

    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(MATH * 2), "test": datasets.Dataset.from_list(MATH)}
    )
    dd.save_to_disk(str(tmp_path / "math"))
    env = environment_registry.get("hendrycks_math", "huggingface", path=tmp_path / "math")
    assert len(env) == 1  # the test split is the default
    assert env.task(0)["answer"] == "\\frac{1}{2}"
    for reply in ("\\boxed{0.5}", "\\boxed{1/2}", "\\boxed{\\frac{1}{2}}"):
        assert _score(env, 0, reply).rewards.total == 1.0, reply
    wrong = _score(env, 0, "\\boxed{1/3}")
    assert wrong.rewards.total == 0.0
    assert wrong.rewards.by_name("correctness").metadata["outcome"] == "wrong"
    unparsed = _score(env, 0, "\\boxed{no idea}")
    assert unparsed.rewards.by_name("correctness").metadata["outcome"] == "unparsed"
    train = environment_registry.get(
        "hendrycks_math", "huggingface", path=tmp_path / "math", split="train"
    )
    assert len(train) == 2


def test_jsonl_json_and_parquet_files_with_field_mapping(tmp_path):
    rows = [{"q": "Capital of Italy?", "opts": ["Rome", "Paris"], "gold": "A", "uid": "x1"}]
    (tmp_path / "mc.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "mc.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mc.parquet")
    fields = {"prompt": "q", "choices": "opts", "answer": "gold", "id": "uid"}
    for name in ("mc.jsonl", "mc.json", "mc.parquet"):
        env = environment_registry.get("mmlu", "huggingface", path=tmp_path / name, fields=fields)
        state, info = env.reset(options={"task_index": 0})
        assert info["task_id"] == "x1" and "A. Rome" in state.observation.prompt
        assert _score(env, 0, "The answer is A").rewards.total == 1.0
        assert _score(env, 0, "The answer is B").rewards.total == 0.0


def test_mmlu_preset_with_an_index_answer_and_qa_exact_match():
    env = environment_registry.get("mmlu", "huggingface", dataset=MMLU)
    assert env.task(0)["answer"] == "B"
    assert _score(env, 0, "Answer: (B)").rewards.total == 1.0
    assert _score(env, 0, "Answer: C").rewards.total == 0.0
    qa = environment_registry.get(
        "qa", "huggingface", dataset=[{"question": "Q?", "answer": "Paris"}]
    )
    assert _score(qa, 0, "<answer>paris.</answer>").rewards.total == 1.0
    assert _score(qa, 0, "<answer>Lyon</answer>").rewards.total == 0.0


def test_unreachable_hub_gives_a_clear_error_fast(monkeypatch):
    import datasets  # noqa: F401 - the adapter needs it installed

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(EnvError, match="Hugging Face Hub: 127.0.0.1:9 is not reachable"):
        environment_registry.get("gsm8k", "huggingface", path="openai/gsm8k", subset="main")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EnvError, match="HF_HUB_OFFLINE is set.*save_to_disk"):
        environment_registry.get("gsm8k", "huggingface", path="openai/gsm8k")


def test_missing_file_and_bad_config():
    with pytest.raises(FileNotFoundError):
        environment_registry.get("qa", "huggingface", path="./nope/data.jsonl")
    with pytest.raises(ValueError, match="exactly one"):
        environment_registry.get("qa", "huggingface")
    with pytest.raises(KeyError, match="column 'question'"):
        environment_registry.get("qa", "huggingface", dataset=[{"x": 1}]).reset()
