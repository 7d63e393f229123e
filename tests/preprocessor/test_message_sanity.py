"""MessageSanityFilter: consolidation, trimming and each check in order."""

from __future__ import annotations

import pytest

from twinkle.preprocessor import MessageSanityFilter
from twinkle.preprocessor.chain import build_pipeline, curate_rows


def u(text):
    return {"role": "user", "content": text}


def a(text, **kw):
    return {"role": "assistant", "content": text, **kw}


def call(cid="c1", name="get_weather", args='{"city": "Oslo"}'):
    return a(
        "",
        tool_calls=[{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}],
    )


def tool(cid="c1", text="sunny"):
    return {"role": "tool", "content": text, "tool_call_id": cid}


def reason(messages, **kw):
    kept, dropped = MessageSanityFilter(**kw)([{"messages": messages}])
    return dropped[0]["drop_reason"] if dropped else None


GOOD = [u("What's the weather in Oslo?"), a("It is sunny and 18 degrees in Oslo today.")]
AGENT = [
    u("Weather in Oslo?"),
    call(),
    tool(),
    a("It is sunny in Oslo today, around 18 degrees with a light breeze from the west."),
]


def test_clean_rows_pass_and_agent_rows_pass():
    assert reason(GOOD) is None and reason(AGENT) is None


def test_system_messages_consolidated_and_tail_trimmed():
    msgs = [
        {"role": "system", "content": "Be brief."},
        u("Hi there, how are you?"),
        {"role": "system", "content": "Answer in English."},
        a("I'm fine, thanks for asking!"),
        u("trailing question with no answer"),
    ]
    kept, _ = MessageSanityFilter()([{"id": 1, "messages": msgs}])
    out = kept[0]["messages"]
    assert out[0] == {"role": "system", "content": "Be brief.\n\nAnswer in English."}
    assert [m["role"] for m in out] == ["system", "user", "assistant"] and kept[0]["id"] == 1


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ("nope", "invalid_messages"),
        ([u("only a question")], "no_assistant"),
        ([a("I speak first here."), u("hi"), a("hello again there")], "role_order"),
        ([u("hi"), {"role": "robot", "content": "x"}, a("hello")], "role_order"),
        (
            [
                u("q"),
                a("", tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]),
                tool("zz"),
                a("done, the answer is below and it is long enough to count."),
            ],
            "tool_matching",
        ),
        ([u("q"), call(name="bad name!"), tool(), a("done " * 20)], "content_integrity"),
        ([u("q"), call(args="{not json"), tool(), a("done " * 20)], "content_integrity"),
        (
            [u("same question"), u("same question"), a("one reply that is fine")],
            "content_integrity",
        ),
        ([u("x" * 81_000), a("ok")], "content_integrity"),
        (
            [
                u("今天北京的天气怎么样？请详细介绍一下。"),
                a(
                    "The weather in Beijing is sunny and warm "
                    "today, with a light breeze in the afternoon."
                ),
            ],
            "lang_match",
        ),
        ([u("Weather?"), call(), tool(), a("Sunny.")], "agent_min_visible"),
    ],
)
def test_each_check_drops_with_its_name(messages, expected):
    assert reason(messages) == expected


def test_max_msg_chars_has_one_default_and_checks_can_be_switched_off():
    assert MessageSanityFilter().max_msg_chars == 80_000
    assert reason([u("x" * 60_000), a("ok fine")]) is None  # not the old 50,000 fallback
    zh = [u("今天北京的天气怎么样？请详细介绍一下。"), a("Sunny and warm today " * 4)]
    assert reason(zh, check_lang_match=False) is None


def test_sensitive_words_from_file_and_list(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("# comment\nforbidden-topic\n", encoding="utf-8")
    msgs = [u("Tell me about Forbidden-Topic please"), a("Sure, here is a long answer.")]
    assert reason(msgs, sensitive_words_file=str(words)) == "sensitive_words"
    assert reason(GOOD, extra_sensitive_words=["oslo"]) == "sensitive_words"
    assert reason(msgs) is None  # no list, no check


def test_registered_in_the_chain():
    rows = [{"messages": GOOD}, {"messages": [u("q")]}]
    kept, stats = curate_rows(rows, build_pipeline(["sanity"]))
    assert len(kept) == 1 and stats.dropped() == {"MessageSanityFilter": {"no_assistant": 1}}
