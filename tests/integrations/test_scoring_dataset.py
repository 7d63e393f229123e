"""DatasetProvider: task items, ground truths, capability checks and a real datasets.Dataset."""

import pytest

from twinkle.core import EnvironmentSpec, Observation, State, StateMetadata
from twinkle.core.environments import CodeEnvironment, MathEnvironment, MultipleChoiceEnvironment
from twinkle.integrations import DatasetProvider, TaskItem


def test_items_carry_prompt_messages_ground_truth_and_metadata():
    provider = DatasetProvider(MathEnvironment())
    assert len(provider) == 30
    item = provider[3]
    assert isinstance(item, TaskItem) and item.task_index == 3
    assert item.ground_truth == "30" and item.task_id == "math-004"
    assert item.messages == ({"role": "user", "content": item.prompt},)
    assert item.metadata["task_index"] == 3 and item.metadata["episode_id"]
    assert not item.images and item.available_tools == ()
    assert [i.task_index for i in provider.get_items([5, 1])] == [5, 1]
    assert len(provider.get_items()) == 30 == len(list(provider))


def test_system_prompt_and_other_environments():
    mc = DatasetProvider(MultipleChoiceEnvironment(system_prompt="Be terse."))
    assert [m["role"] for m in mc[0].messages] == ["system", "user"]
    assert mc[0].ground_truth == "B" and "B. Mercury" in mc[0].prompt
    code = DatasetProvider(CodeEnvironment(limit=2))[0]
    assert "add_numbers" in code.prompt and '"call"' in code.ground_truth
    assert "reference_solution" not in code.prompt and "return a + b" not in code.prompt


class _DictHidden:
    """A minimal environment whose hidden state is a dict (shared ground-truth lookup)."""

    def __init__(self, multi_turn=False, supports_len=True):
        self.spec = EnvironmentSpec(
            name="dict", is_multi_turn=multi_turn, supports_len=supports_len
        )
        self.available_tools = ()

    def __len__(self):
        return 1

    def reset(self, *, seed=None, options=None):
        return State(Observation("q?"), {"target": 7}, StateMetadata(0, "ep")), {}


def test_ground_truth_from_dict_hidden_state_and_none_for_multi_turn():
    assert DatasetProvider(_DictHidden())[0].ground_truth == "7"
    assert DatasetProvider(_DictHidden(multi_turn=True))[0].ground_truth is None
    with pytest.raises(TypeError, match="supports_len"):
        DatasetProvider(_DictHidden(supports_len=False))


def test_to_hf_dataset_builds_a_real_dataset():
    from datasets import Dataset

    ds = DatasetProvider(MathEnvironment()).to_hf_dataset([0, 1, 2])
    assert isinstance(ds, Dataset) and ds.num_rows == 3
    assert {"task_index", "prompt", "ground_truth", "messages", "task_id"} <= set(ds.column_names)
    assert "images" not in ds.column_names
    assert ds[1]["ground_truth"] == "378" and ds[1]["messages"][0]["role"] == "user"
    assert DatasetProvider(MultipleChoiceEnvironment()).to_hf_dataset().num_rows == 20
