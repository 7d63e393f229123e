"""Malformed rows never raise; hypothesis: rows are conserved and kept rows are unchanged."""

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinkle.preprocessor.dead_loop_filter import DeadLoopFilter
from twinkle.preprocessor.hard_filter import HardFilter
from twinkle.preprocessor.refuse_filter import RefuseFilter
from twinkle.preprocessor.token_soup import TokenSoupFilter

FILTERS = [
    HardFilter(
        max_chars_per_round=50000,
        max_total_chars=200000,
        max_rounds=10,
        system_deny_keywords=["hack"],
    ),
    DeadLoopFilter(),
    RefuseFilter(),
    TokenSoupFilter(),
]
IDS = [type(f).__name__ for f in FILTERS]
BIG = "word " * 200_000  # 1 MB

MALFORMED = [
    None,
    7,
    "text",
    [],
    {},
    {"messages": None},
    {"messages": "hi"},
    {"messages": []},
    {"messages": [None, 3, "x"]},
    {"messages": [{"role": "assistant", "content": None}]},
    {"messages": [{"role": "assistant", "content": 12}]},
    {
        "messages": [
            {
                "role": "assistant",
                "content": ["a", 1, None, {"type": "text"}, {"type": "text", "text": 5}],
            }
        ]
    },
    {"messages": [{"role": "assistant", "content": {"type": "text", "text": "hi"}}]},
    {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": "{not json"},
        ]
    },
    {"messages": [{"role": "assistant", "content": "", "tool_calls": ["{bad", 3]}]},
    {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": "{bad"}]}]},
    {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": None}}],
            }
        ]
    },
    {"messages": [{"role": "assistant", "content": "", "tool_calls": "[]"}]},
    {"messages": [{"role": "wizard", "content": "spell"}, {"role": None}, {"content": "no role"}]},
    {"messages": [{"role": "user", "content": BIG}, {"role": "assistant", "content": BIG}]},
    {
        "messages": [
            {"role": "assistant", "content": "x", "reasoning_content": 5, "thinking": ["a"]}
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "\ud800 lone surrogate"},
            {"role": "assistant", "content": "\udfff\ud83d"},
        ]
    },
    {"messages": [{"role": "assistant", "content": "<think>unclosed " + "wait... " * 50}]},
    {
        "messages": [
            {"role": "tool", "content": "orphan"},
            {"role": "assistant", "content": "\U0001f600" * 50},
        ]
    },
]


@pytest.mark.parametrize("f", FILTERS, ids=IDS)
def test_malformed_rows_never_raise_and_are_conserved(f):
    kept, dropped = f(MALFORMED)
    assert len(kept) + len(dropped) == len(MALFORMED)
    assert all(isinstance(d.get("drop_reason"), str) and d["drop_reason"] for d in dropped)
    for d in dropped:
        assert not d["drop_reason"].startswith("malformed_row:"), d[
            "drop_reason"
        ]  # no exception inside check


@pytest.mark.parametrize("f", FILTERS, ids=IDS)
def test_column_dict_input(f):
    cols = {
        "messages": [
            [
                {"role": "user", "content": "Please compute 17 times 23 with python3."},
                {
                    "role": "assistant",
                    "content": "391. " + "The sandbox printed exactly this value. " * 3,
                },
            ]
        ],
        "id": ["a"],
    }
    kept, dropped = f(cols)
    assert len(kept) + len(dropped) == 1


text = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=300),
    st.sampled_from(
        [
            "wait... hmm, no wait",
            "I'm not able to help with that.",
            "<|im_end|>" * 21,
            "ção фл 的 ساعة ภาษา 치 ления " * 4,
            "a" * 25,
            "음... 어...",
            "你好",
        ]
    ),
    st.lists(
        st.one_of(
            st.text(max_size=20),
            st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=50)}),
        ),
        max_size=3,
    ),
)
message = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "x"]),
            "content": text,
        },
        optional={
            "tool_calls": st.one_of(
                st.text(max_size=30),
                st.just([{"function": {"name": "run_command", "arguments": '{"command": "ls"}'}}]),
            ),
            "reasoning_content": st.one_of(st.none(), st.text(max_size=100)),
        },
    ),
    st.none(),
    st.integers(),
)
rows = st.lists(
    st.one_of(
        st.fixed_dictionaries({"messages": st.lists(message, max_size=6)}),
        st.none(),
        st.text(max_size=5),
    ),
    max_size=8,
)


@pytest.mark.parametrize("f", FILTERS, ids=IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=rows)
def test_conservation_and_kept_rows_unchanged(f, batch):
    before = copy.deepcopy(batch)
    kept, dropped = f(batch)
    assert len(kept) + len(dropped) == len(batch)
    assert batch == before  # the input is not mutated
    originals = list(before)
    for row in kept:
        assert row in originals  # kept rows come back as they went in
    for d in dropped:
        assert isinstance(d["drop_reason"], str)
        assert not d["drop_reason"].startswith("malformed_row:"), d["drop_reason"]
