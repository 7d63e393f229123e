"""Property tests: every step of this package conserves rows and never raises on odd input."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinkle.preprocessor.chain import build_pipeline, curate_rows
from twinkle.preprocessor.dedup_filter import DedupFilter, NearDedupFilter
from twinkle.preprocessor.message_normalizer import MessageNormalizer
from twinkle.preprocessor.model_filter import ModelFilter
from twinkle.preprocessor.quality import QualityPreprocessor

text = st.text(alphabet=string.ascii_letters + ' <>/{}"[]:_\n' + "日本語한국어中文", max_size=60)
tool_call_item = st.one_of(
    st.fixed_dictionaries(
        {
            "id": st.text(max_size=3),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {
                    "name": text,
                    "arguments": st.one_of(text, st.dictionaries(text, text, max_size=2)),
                }
            ),
        }
    ),
    text,
    st.integers(),
    st.none(),
)
tool_calls = st.one_of(
    st.none(),
    text,
    st.just("[]"),
    st.lists(tool_call_item, max_size=3),
    st.lists(tool_call_item, max_size=2).map(json.dumps),
)
content = st.one_of(
    st.none(),
    text,
    st.integers(),
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": text}),
            st.fixed_dictionaries({"type": st.just("image"), "image": text}),
            text,
            st.none(),
        ),
        max_size=3,
    ),
    st.builds(lambda t: f"<tool_call>{t}</tool_call>", text),
    st.just('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'),
    st.just("<tool_response>out</tool_response>"),
    st.just("HEARTBEAT"),
)
message = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(
                ["system", "user", "assistant", "tool", "developer", "weird", None]
            ),
            "content": content,
        },
        optional={
            "tool_calls": tool_calls,
            "reasoning_content": st.one_of(text, st.integers()),
            "tool_call_id": text,
        },
    ),
    text,
    st.integers(),
    st.none(),
)
row = st.one_of(
    st.fixed_dictionaries(
        {"messages": st.lists(message, max_size=6)},
        optional={"id": st.integers(), "model_id": st.one_of(text, st.integers(), st.none())},
    ),
    st.fixed_dictionaries({"messages": st.one_of(text, st.none(), st.integers())}),
    st.none(),
    st.integers(),
    text,
)
rows_st = st.lists(row, max_size=12)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_split(rows, kept, dropped):
    assert len(kept) + len(dropped) == len(rows)
    assert all(
        isinstance(d, dict) and isinstance(d["drop_reason"], str) and d["drop_reason"]
        for d in dropped
    )


@SETTINGS
@given(rows_st)
def test_each_step_conserves_rows(rows):
    for step in (
        DedupFilter(),
        DedupFilter(prefix_chars=3, asst_chars=2),
        NearDedupFilter(num_perm=16),
        ModelFilter(),
        ModelFilter(allowed_models=["a*"]),
        MessageNormalizer(),
    ):
        kept, dropped = step(rows)
        check_split(rows, kept, dropped)


@SETTINGS
@given(rows_st)
def test_dedup_is_idempotent_and_order_independent_in_size(rows):
    kept, _ = DedupFilter()(rows)
    again, dropped = DedupFilter()(kept)
    assert dropped == [] and len(again) == len(kept)
    assert len(DedupFilter()(list(reversed(rows)))[0]) == len(kept)


@SETTINGS
@given(rows_st)
def test_normalizer_is_idempotent(rows):
    once, _ = MessageNormalizer()(rows)
    twice, dropped = MessageNormalizer()(once)
    assert dropped == [] and twice == once


@SETTINGS
@given(rows_st)
def test_full_chain_conserves_rows(rows):
    stages = build_pipeline(
        ["dedup", "model", "hard", "deadloop", "refuse", "soup", "normalize", "neardedup"],
        {"model": {"allowed_models": ["*"]}, "neardedup": {"num_perm": 16}},
    )
    kept, stats = curate_rows(rows, stages, batch_size=5)
    dropped = sum(sum(s.dropped.values()) for s in stats.steps.values())
    assert len(kept) + dropped == len(rows)


@SETTINGS
@given(
    st.lists(
        st.fixed_dictionaries(
            {"messages": st.lists(message, max_size=5)}, optional={"id": st.integers(), "x": text}
        ),
        max_size=10,
    )
)
def test_quality_preprocessor_columns_keep_the_input_keys(rows):
    stages = build_pipeline(["hard", "deadloop", "refuse", "soup", "normalize"])
    qp = QualityPreprocessor([s.step for s in stages])
    keys = {k for r in rows for k in r} or {"messages"}
    batch = {k: [r.get(k) for r in rows] for k in keys}
    out = qp(batch)
    assert set(out) >= keys
    lengths = {len(v) for v in out.values()}
    assert len(lengths) == 1 and lengths.pop() == qp.last_stats.rows_out
    marked = QualityPreprocessor([s.step for s in stages], drop_mode="mark")(batch)
    assert all(len(v) == len(rows) for v in marked.values())
