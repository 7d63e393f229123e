"""DedupFilter (exact, longest wins) and NearDedupFilter (MinHash LSH)."""

from __future__ import annotations

import random

import pytest

from twinkle.preprocessor.dedup_filter import (
    DedupFilter,
    NearDedupFilter,
    conversation_text,
    head_tail,
)


def conv(user, asst="Sure, here it is.", extra=0, id_=None, system=None):
    msgs = [{"role": "system", "content": system}] if system else []
    msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": asst}]
    for k in range(extra):
        msgs += [
            {"role": "user", "content": f"follow-up {k}"},
            {"role": "assistant", "content": f"answer {k}"},
        ]
    row = {"messages": msgs}
    if id_ is not None:
        row["id"] = id_
    return row


def ids(rows):
    return [r["id"] for r in rows]


def test_exact_duplicate_dropped_with_reason_and_first_kept():
    rows = [conv("list files", id_=0), conv("list files", id_=1), conv("other task", id_=2)]
    kept, dropped = DedupFilter()(rows)
    assert ids(kept) == [0, 2]
    assert [(d["id"], d["drop_reason"]) for d in dropped] == [(1, "duplicate")]
    assert "drop_reason" not in rows[1]  # a copy is dropped, the input is untouched


def test_longest_wins_whatever_the_order():
    short, long_ = conv("fix the bug", id_="short"), conv("fix the bug", extra=2, id_="long")
    for rows in ([short, long_], [long_, short]):
        kept, dropped = DedupFilter()(rows)
        assert ids(kept) == ["long"] and ids(dropped) == ["short"]


def test_tie_on_messages_goes_to_more_text_then_first_seen():
    a = conv("fix the bug", asst="Done.", id_="a")
    b = conv("fix the bug", asst="Done.", id_="b")
    b["messages"][0]["name"] = "x"  # different row, same text length
    kept, _ = DedupFilter()([a, b])
    assert ids(kept) == ["a"]
    c = conv("fix the bug", asst="Done.", id_="c")
    c["messages"].append({"role": "tool", "content": "a much longer"})
    d = conv("fix the bug", asst="Done.", id_="d")
    d["messages"].append({"role": "tool", "content": "a much longer tool output"})
    kept, _ = DedupFilter()([c, d])
    assert ids(kept) == ["d"]  # c is d cut off in its last message


def test_conversations_sharing_the_first_exchange_are_all_kept():
    # Issue 12: same first exchange, different later tool results or turns: not copies.
    c = conv("fix the bug", asst="Done.", id_="c")
    c["messages"].append({"role": "tool", "content": "x"})
    d = conv("fix the bug", asst="Done.", id_="d")
    d["messages"].append({"role": "tool", "content": "a much longer tool output"})
    e = conv("fix the bug", asst="Done.", extra=2, id_="e")
    e["messages"][3]["content"] = "a different answer"
    f = conv("fix the bug", asst="Done.", extra=2, id_="f")
    kept, dropped = DedupFilter()([c, d, e, f, conv("fix the bug", asst="Done.", id_="g")])
    assert ids(kept) == ["c", "d", "e", "f"]
    assert ids(dropped) == ["g"]  # a prefix of every one of them


def test_copies_ignore_call_ids_and_whitespace():
    call = {"type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}}
    a = conv("list the files", asst="Listing.", id_="a")
    a["messages"][1]["tool_calls"] = [dict(call, id="call_1")]
    b = conv("list the files ", asst="Listing.", id_="b")
    b["messages"][1]["tool_calls"] = [dict(call, id="call_xyz")]
    kept, dropped = DedupFilter()([a, b])
    assert ids(kept) == ["a"] and ids(dropped) == ["b"]


def test_signature_uses_head_and_tail_only():
    middle_a = "A" * 150 + "x" + "B" * 150
    middle_b = "A" * 150 + "y" + "B" * 150
    # The signature only groups candidates; rows whose texts differ are never dropped,
    # whatever prefix_chars says.
    f = DedupFilter(prefix_chars=100)
    assert f.signature(conv(middle_a)["messages"]) == f.signature(conv(middle_b)["messages"])
    kept, _ = f([conv(middle_a, id_=0), conv(middle_b, id_=1)])
    assert ids(kept) == [0, 1]
    g = DedupFilter(prefix_chars=200)
    assert g.signature(conv(middle_a)["messages"]) != g.signature(conv(middle_b)["messages"])
    kept, _ = DedupFilter()(
        [conv("q", asst="answer one", id_=0), conv("q", asst="answer two", id_=1)]
    )
    assert ids(kept) == [0, 1]


def test_head_tail():
    assert head_tail("  abc  ", 2) == "abc"
    assert head_tail("abcdef", 2) == "abef"
    assert head_tail("abcd", 2) == "abcd"


def test_injected_context_user_turns_are_skipped():
    a = {
        "id": 0,
        "messages": [
            {"role": "user", "content": "<system-reminder> today is monday </system-reminder>"},
            {"role": "user", "content": "deploy the app"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    b = {
        "id": 1,
        "messages": [
            {"role": "user", "content": "<context>other stuff</context>"},
            {"role": "user", "content": "deploy the app"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    kept, dropped = DedupFilter()([a, b])
    assert ids(kept) == [0] and dropped[0]["drop_reason"] == "duplicate"


def test_no_real_user_falls_back_to_assistant_texts():
    a = {
        "id": 0,
        "messages": [
            {"role": "assistant", "content": "one"},
            {"role": "assistant", "content": "two"},
        ],
    }
    b = {
        "id": 1,
        "messages": [
            {"role": "assistant", "content": "one"},
            {"role": "assistant", "content": "two"},
        ],
    }
    c = {
        "id": 2,
        "messages": [
            {"role": "assistant", "content": "one"},
            {"role": "assistant", "content": "three"},
        ],
    }
    kept, _ = DedupFilter()([a, b, c])
    assert ids(kept) == [0, 2]


def test_rows_without_text_are_not_merged_unless_identical():
    a = {"id": 0, "messages": [{"role": "tool", "content": "out 1"}]}
    b = {"id": 1, "messages": [{"role": "tool", "content": "out 2"}]}
    c = {"id": 2, "messages": [{"role": "tool", "content": "out 1"}]}
    kept, _ = DedupFilter()([a, b, c])
    assert ids(kept) == [0, 1]


def test_odd_messages_and_rows_never_raise():
    rows = [
        {
            "id": 0,
            "messages": [
                "junk",
                3,
                None,
                {"role": "user", "content": "real question"},
                {"role": "assistant", "content": "x"},
            ],
        },
        {
            "id": 1,
            "messages": [
                {"role": "user", "content": "real question"},
                {"role": "assistant", "content": "x"},
            ],
        },
        {
            "id": 2,
            "messages": [{"role": "tool", "content": {1, 2}}, {"role": "tool", "content": b"\xff"}],
        },
        {"id": 3, "messages": [{"role": "user", "content": "\ud800 lone surrogate"}]},
        {"id": 4, "messages": "not a list"},
        {"id": 5, "messages": []},
        {"id": 6},
        7,
        None,
    ]
    kept, dropped = DedupFilter()(rows)
    assert len(kept) + len(dropped) == len(rows)
    reasons = {(d.get("id"), d["drop_reason"]) for d in dropped}
    assert (0, "duplicate") in reasons or (1, "duplicate") in reasons
    assert (4, "malformed_messages") in reasons and (5, "malformed_empty_messages") in reasons
    assert (6, "malformed_messages") in reasons
    assert sum(1 for d in dropped if d["drop_reason"] == "malformed_row") == 2
    assert 2 in ids(kept) and 3 in ids(kept)


def test_deterministic_and_order_preserving():
    rnd = random.Random(7)
    rows = [conv(f"task {rnd.randrange(30)}", extra=rnd.randrange(3), id_=i) for i in range(300)]
    k1, d1 = DedupFilter()(rows)
    k2, d2 = DedupFilter()(list(rows))
    assert ids(k1) == ids(k2) and ids(d1) == ids(d2)
    assert ids(k1) == sorted(ids(k1))
    assert len(k1) == len({r["messages"][0]["content"] for r in rows})
    # the winner of every group is a longest member
    for r in k1:
        group = [x for x in rows if x["messages"][0]["content"] == r["messages"][0]["content"]]
        assert len(r["messages"]) == max(len(x["messages"]) for x in group)


def test_column_input_and_params_validation():
    kept, dropped = DedupFilter()({"messages": [conv("a")["messages"]] * 2, "id": [0, 1]})
    assert ids(kept) == [0] and len(dropped) == 1
    with pytest.raises(ValueError, match="prefix_chars"):
        DedupFilter(prefix_chars=0)
    assert DedupFilter()([]) == ([], [])


# --- near duplicates ---------------------------------------------------------------------

BASE = (
    "please inspect the repository layout then list every python file under src and report how "
    "many lines each file has sorted by size with the largest first and explain what the biggest "
    "one does"
)


def test_near_duplicate_dropped_and_exact_text_change_kept_apart():
    edited = BASE.replace("largest", "biggest")
    other = (
        "write a haiku about autumn leaves falling on a quiet pond at dusk while the city sleeps "
        "nearby"
    )
    rows = [conv(BASE, id_=0), conv(edited, id_=1), conv(other, id_=2)]
    kept, dropped = NearDedupFilter(threshold=0.7)(rows)
    assert ids(kept) == [0, 2]
    assert [(d["id"], d["drop_reason"]) for d in dropped] == [(1, "near_duplicate")]
    assert DedupFilter()(rows)[1] == []  # exact dedup does not see them as the same


def test_threshold_decides():
    edited = BASE.replace("python", "rust").replace("report", "print")
    rows = [conv(BASE, id_=0), conv(edited, id_=1)]
    from datasketch import MinHash  # noqa: F401  (the library the filter uses)

    f = NearDedupFilter(threshold=0.5)
    a, b = (set(f.shingle_hashes(conversation_text(r["messages"])).tolist()) for r in rows)
    true_j = len(a & b) / len(a | b)
    assert 0.55 < true_j < 0.9
    assert len(NearDedupFilter(threshold=0.4)(rows)[0]) == 1
    assert len(NearDedupFilter(threshold=0.98)(rows)[0]) == 2


def test_near_dedup_keeps_longest_copy():
    short = conv(BASE, id_="short")
    long_ = conv(BASE.replace("largest", "biggest"), extra=1, id_="long")
    for rows in ([short, long_], [long_, short]):
        kept, dropped = NearDedupFilter(threshold=0.7)(rows)
        assert ids(kept) == ["long"] and ids(dropped) == ["short"]


def test_near_dedup_cjk_text_and_system_prompt_ignored():
    zh = (
        "请帮我检查这个仓库的目录结构然后列出所有的源代码文件"
        "并统计每个文件的行数按照大小排序最大的放在最前面"
    )
    zh2 = zh.replace("最前面", "第一个")
    sys_prompt = "You are a very long shared system prompt. " * 20
    rows = [
        conv(zh, id_=0, system=sys_prompt),
        conv(zh2, id_=1, system=sys_prompt),
        conv(
            "完全不同的问题：今天天气怎么样，适合出去散步吗，还是应该待在家里读书",
            id_=2,
            system=sys_prompt,
        ),
    ]
    kept, dropped = NearDedupFilter(threshold=0.7)(rows)
    assert ids(kept) == [0, 2] and ids(dropped) == [1]


def test_near_dedup_malformed_and_empty_rows():
    rows = [
        {"id": 0, "messages": [{"role": "tool", "content": "x"}]},
        {"id": 1, "messages": [{"role": "tool", "content": "x"}]},
        {"id": 2, "messages": None},
        "junk",
    ]
    kept, dropped = NearDedupFilter()(rows)
    assert ids(kept) == [0, 1]  # no user/assistant text: nothing to compare
    assert sorted(d["drop_reason"] for d in dropped) == ["malformed_messages", "malformed_row"]


def test_near_dedup_deterministic_and_validates():
    rows = [conv(BASE + f" variant {i % 3}", id_=i) for i in range(12)]
    assert ids(NearDedupFilter(threshold=0.8)(rows)[0]) == ids(
        NearDedupFilter(threshold=0.8)(rows)[0]
    )
    for kw in (
        {"threshold": 0},
        {"threshold": 1.5},
        {"num_perm": 4},
        {"ngram": 0},
        {"max_chars": 0},
    ):
        with pytest.raises(ValueError):
            NearDedupFilter(**kw)
