"""MessageNormalizer: heartbeats, tool-call rewriting, same-role merging, odd input."""

from __future__ import annotations

import copy
import json

import pytest

from twinkle.preprocessor.message_normalizer import MessageNormalizer


def norm(messages, **kw):
    (out,), dropped = MessageNormalizer(**kw)([{"id": 1, "messages": messages}])
    assert dropped == []
    return out["messages"]


def U(text, **kw):
    return {"role": "user", "content": text, **kw}


def A(text, **kw):
    return {"role": "assistant", "content": text, **kw}


# --- pass 0: heartbeats ------------------------------------------------------------------


def test_heartbeat_turns_and_their_replies_are_removed():
    msgs = [
        U("fix the build"),
        A("on it"),
        U("HEARTBEAT: read HEARTBEAT.md and act"),
        A("nothing to do"),
        U("[heartbeat]"),
        A("HEARTBEAT_OK"),
        U("ping"),
        A("pong"),
        U("keep-alive"),
        A("still here"),
        U("thanks"),
        A("HEARTBEAT_OK"),
    ]
    assert norm(msgs) == [U("fix the build"), A("on it"), U("thanks")]


def test_heartbeat_words_in_prose_are_kept():
    msgs = [
        U("my heartbeat monitor app crashes, can you help?"),
        A("Sure, what does the heartbeat log say?"),
        U("ping me when the keep-alive setting is done"),
    ]
    assert norm(msgs) == msgs


def test_reply_with_tool_calls_after_heartbeat_is_kept():
    call = [{"id": "c1", "type": "function", "function": {"name": "check", "arguments": "{}"}}]
    msgs = [
        U("do x"),
        U("HEARTBEAT"),
        A("", tool_calls=call),
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    assert norm(msgs) == [
        U("do x"),
        A("", tool_calls=call),
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]


def test_developer_becomes_system_and_junk_and_leading_replies_go():
    msgs = [
        A("stray reply"),
        "junk",
        3,
        None,
        {"role": "developer", "content": "rules"},
        U("hi there"),
    ]
    assert norm(msgs) == [{"role": "system", "content": "rules"}, U("hi there")]


def test_assistant_only_rows_are_kept():
    msgs = [A("one"), U("two")]
    assert norm([A("one")]) == [A("one")]
    assert norm(msgs) == [U("two")]


def test_heartbeat_stripping_can_be_switched_off_or_customised():
    msgs = [U("do x"), U("HEARTBEAT"), A("fine")]
    assert norm(msgs, strip_heartbeats=False, merge_same_role=False) == msgs
    assert norm([U("do x"), U("TICK"), A("fine")], heartbeat_pattern=r"^TICK$") == [U("do x")]
    with pytest.raises(ValueError, match="heartbeat_pattern"):
        MessageNormalizer(heartbeat_pattern="(")


# --- pass 1: tool calls ------------------------------------------------------------------


def test_json_string_tool_calls_become_openai_list():
    raw = json.dumps(
        [
            json.dumps(
                {
                    "type": "function",
                    "function": json.dumps({"name": "ls", "arguments": {"p": "."}}),
                }
            )
        ]
    )
    out = norm([U("list"), A("", tool_calls=raw, reasoning_content="think")])
    assert out[1] == A(
        "",
        reasoning_content="think",
        tool_calls=[
            {
                "id": "call_norm_0001",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"p": "."}'},
            }
        ],
    )


def test_canonical_calls_are_left_as_they_are():
    call = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    msgs = [U("list"), A(None, tool_calls=call)]
    out = norm(msgs)
    assert out[1] is msgs[1]


def test_empty_tool_call_markers_are_not_tool_calls():
    msgs = [U("hi"), A("hello", tool_calls="[]"), A("again", tool_calls=[])]
    out = norm(msgs)
    assert out == [U("hi"), A("hello\nagain", tool_calls="[]")]  # merged as plain replies


def test_broken_tool_call_json_is_left_untouched():
    msgs = [U("hi"), A("x", tool_calls='[{"function": {"name": "ls", '), U("next")]
    assert norm(msgs) == msgs


def test_hermes_blocks_in_content_become_tool_calls_and_results():
    content = (
        "<think>need files</think>Let me look.\n"
        '<tool_call>\n{"name": "ls", "arguments": {"path": "/"}}\n'
        '</tool_call>\n<tool_call>{"name": "cat", "arguments": "{\\"f\\": \\"a\\"}"}</tool_call>'
    )
    msgs = [
        U("inspect"),
        A(content, reasoning_content="r", name="bot"),
        U("<tool_response>bin etc</tool_response>\n<tool_response>hello</tool_response>"),
        A("done"),
    ]
    out = norm(msgs)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "assistant"]
    asst = out[1]
    assert asst["content"] == "<think>need files</think>Let me look."
    assert asst["reasoning_content"] == "r" and asst["name"] == "bot"
    assert [c["function"] for c in asst["tool_calls"]] == [
        {"name": "ls", "arguments": '{"path": "/"}'},
        {"name": "cat", "arguments": '{"f": "a"}'},
    ]
    assert [c["id"] for c in asst["tool_calls"]] == ["call_norm_0001", "call_norm_0002"]
    assert out[2] == {"role": "tool", "content": "bin etc", "tool_call_id": "call_norm_0001"}
    assert out[3] == {"role": "tool", "content": "hello", "tool_call_id": "call_norm_0002"}


def test_single_call_takes_whole_untagged_user_turn_multi_call_does_not():
    one = norm([U("go"), A('<tool_call>{"name": "run", "arguments": {}}</tool_call>'), U("exit 0")])
    assert one[2] == {"role": "tool", "content": "exit 0", "tool_call_id": "call_norm_0001"}
    two = norm(
        [
            U("go"),
            A(
                '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
                '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
            ),
            U("what next?"),
        ]
    )
    assert two[2] == U("what next?")


def test_text_outside_tool_response_stays_a_user_turn():
    out = norm(
        [
            U("go"),
            A('<tool_call>{"name": "a", "arguments": {}}</tool_call>'),
            U("<tool_response>42</tool_response>\nNow summarise."),
        ]
    )
    assert out[2:] == [
        {"role": "tool", "content": "42", "tool_call_id": "call_norm_0001"},
        U("Now summarise."),
    ]


def test_qwen_xml_function_form():
    content = (
        "<tool_call>\n<function=write>\n<parameter=path>\na.py\n</parameter>\n"
        "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    out = norm([U("write it"), A(content)])
    assert out[1]["tool_calls"][0]["function"] == {
        "name": "write",
        "arguments": '{"path": "a.py", "n": 3}',
    }
    assert out[1]["content"] == ""


def test_unparsable_block_leaves_message_as_is():
    msgs = [U("go"), A("<tool_call>{not json}</tool_call>"), U("hm")]
    assert norm(msgs) == msgs
    msgs = [U("go"), A('<tool_call>{"arguments": {}}</tool_call>')]  # no name
    assert norm(msgs) == msgs


def test_tool_rewrite_can_be_switched_off():
    msgs = [U("go"), A('<tool_call>{"name": "a", "arguments": {}}</tool_call>')]
    assert norm(msgs, rewrite_tool_calls=False) == msgs


# --- pass 2: merging ---------------------------------------------------------------------


def test_consecutive_same_role_messages_merge():
    out = norm(
        [
            U(" part one "),
            U("part two"),
            A("a", reasoning_content="r1"),
            A(None, reasoning_content="r2"),
        ]
    )
    assert out == [U("part one\npart two"), A("a", reasoning_content="r1\nr2")]


def test_reasoning_only_assistant_is_kept():
    msgs = [
        U("q"),
        A(None, reasoning_content="thinking hard"),
        {"role": "tool", "content": "x", "tool_call_id": "1"},
    ]
    assert norm(msgs) == msgs
    assert norm([U("q"), A("", thinking="legacy thoughts")]) == [
        U("q"),
        A("", thinking="legacy thoughts"),
    ]


def test_list_contents_concatenate_and_mixed_contents_become_parts():
    img = {"type": "image_url", "image_url": {"url": "x"}}
    out = norm([U([{"type": "text", "text": "look"}]), U([img]), U("and this")])
    assert out == [U([{"type": "text", "text": "look"}, img, {"type": "text", "text": "and this"}])]


def test_blank_messages_removed_but_empty_tool_results_kept():
    call = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    msgs = [
        U("q"),
        U("   "),
        A(""),
        A(None, tool_calls=call),
        {"role": "tool", "content": "", "tool_call_id": "c"},
    ]
    assert norm(msgs) == [
        U("q"),
        A(None, tool_calls=call),
        {"role": "tool", "content": "", "tool_call_id": "c"},
    ]


def test_other_fields_fill_from_later_messages_first_wins():
    out = norm([U("a", name="n1"), U("b", name="n2", lang="en")])
    assert out == [{"role": "user", "content": "a\nb", "name": "n1", "lang": "en"}]


def test_atomic_and_unknown_roles_are_not_merged():
    msgs = [
        U("q"),
        {"role": "tool", "content": "1", "tool_call_id": "a"},
        {"role": "tool", "content": "2", "tool_call_id": "b"},
        {"role": "function", "content": "x"},
        {"role": "function", "content": "y"},
    ]
    assert norm(msgs) == msgs


# --- rows --------------------------------------------------------------------------------


def test_unchanged_row_is_returned_as_is_and_input_never_mutated():
    row = {"id": 1, "messages": [U("q"), A("a")]}
    (out,), _ = MessageNormalizer()([row])
    assert out is row
    row2 = {
        "id": 2,
        "messages": [
            U("q"),
            U("more"),
            A('<tool_call>{"name": "a", "arguments": {}}</tool_call>'),
            U("r"),
        ],
    }
    snapshot = copy.deepcopy(row2)
    (out2,), _ = MessageNormalizer()([row2])
    assert row2 == snapshot and out2["id"] == 2 and out2 is not row2


def test_empty_after_normalize_and_malformed_rows_are_dropped_with_reasons():
    rows = [
        {"messages": [U("HEARTBEAT"), A("ok")]},
        {"messages": []},
        {"messages": "x"},
        5,
        {"messages": [U("fine")]},
    ]
    kept, dropped = MessageNormalizer()(rows)
    assert len(kept) == 1
    assert [d["drop_reason"] for d in dropped] == [
        "empty_after_normalize",
        "malformed_empty_messages",
        "malformed_messages",
        "malformed_row",
    ]


def test_odd_content_never_raises():
    rows = [
        {
            "messages": [
                U(None),
                U(5),
                U([1, None, {"type": "text"}]),
                A({"type": "text", "text": "d"}),
                A("x", tool_calls=7),
                A("y", tool_calls=[{"function": "nope"}]),
                {"role": None, "content": "z"},
                U("x" * 1_000_000),
            ]
        }
    ]
    kept, dropped = MessageNormalizer()(rows)
    assert len(kept) + len(dropped) == 1
    assert kept and kept[0]["messages"][-1]["content"] == "x" * 1_000_000


def test_columns_input():
    kept, dropped = MessageNormalizer()({"messages": [[U("a"), U("b")]], "id": [3]})
    assert kept == [{"messages": [U("a\nb")], "id": 3}] and dropped == []


def test_user_turn_with_media_is_never_read_as_a_tool_result():
    img = [
        {"type": "text", "text": "<tool_response>x</tool_response>"},
        {"type": "image", "image": "p.png"},
    ]
    msgs = [U("go"), A('<tool_call>{"name": "a", "arguments": {}}</tool_call>'), U(img)]
    out = norm(msgs)
    assert out[2] == U(img) and out[1]["tool_calls"][0]["function"]["name"] == "a"


def test_second_pass_changes_nothing_when_a_blank_first_message_goes():
    msgs = [
        {"role": "system", "content": None},
        {"role": "tool", "content": None},
        {"role": "system", "content": ":"},
    ]
    once = norm(msgs)
    assert once == [{"role": "system", "content": ":"}]
    assert norm(once) == once
