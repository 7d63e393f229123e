"""HardFilter: every drop reason, EN/ZH/JA/KO simple queries, tool-call replies, rounds."""

import pytest

from twinkle.preprocessor.hard_filter import HardFilter

LONG_REPLY = (
    "A thorough answer that explains the reasoning step by step, with an example and a caveat. " * 2
)


def row(*messages, **extra):
    return {"messages": [{"role": r, "content": c} for r, c in messages], **extra}


def reason(f, r):
    _kept, dropped = f([r])
    return dropped[0]["drop_reason"] if dropped else None


@pytest.mark.parametrize(
    "greeting",
    [
        "hi",
        "Hello!",
        "good morning",
        "你好",
        "您好！",
        "こんにちは",
        "おはようございます",
        "안녕하세요",
        "반갑습니다",
    ],
)
def test_greetings_are_trivial_in_every_language(greeting):
    assert (
        reason(HardFilter(), row(("user", greeting), ("assistant", LONG_REPLY)))
        == "trivial_single_turn"
    )


@pytest.mark.parametrize(
    "query",
    [
        "What is a closure?",
        "tell me about rust",
        "Python是什么？",
        "什么是闭包",
        "クロージャとは何ですか",
        "なぜ空は青い？",
        "클로저란 무엇인가요?",
        "왜 그런가요?",
    ],
)
def test_simple_queries_without_thinking_are_trivial(query):
    assert (
        reason(HardFilter(), row(("user", query), ("assistant", LONG_REPLY)))
        == "trivial_single_turn"
    )


@pytest.mark.parametrize(
    "query",
    [
        "Can you explain why my list comprehension over a large CSV gets slow, and what to change "
        "for a million rows?",
        "能解释一下为什么我用列表推导式过滤一个很大的 CSV 时会变慢吗？"
        "要处理几百万行的话应该怎么改？",
        "大きな CSV をリスト内包表記でフィルタすると遅くなるのはなぜですか？"
        "数百万行に対応させるにはどうすればよいでしょうか。",
        "큰 CSV를 리스트 컴프리헨션으로 필터링하면 왜 느려지는지 설명해 줄 수 있나요? "
        "수백만 행까지 처리하려면 무엇을 바꿔야 할까요?",
    ],
)
def test_substantive_questions_with_full_answers_are_kept(query):
    assert reason(HardFilter(), row(("user", query), ("assistant", LONG_REPLY))) is None


def test_thinking_exempts_a_simple_query_and_a_short_reply():
    think = "x" * 250
    f = HardFilter()
    r = {
        "messages": [
            {"role": "user", "content": "What is a closure?"},
            {
                "role": "assistant",
                "content": "A function with captured variables.",
                "reasoning_content": think,
            },
        ]
    }
    assert reason(f, r) is None
    inline = row(
        ("user", "What is a closure?"), ("assistant", f"<think>{think}</think>A function.")
    )
    assert reason(f, inline) is None


def test_shallow_reply_but_not_for_tool_calls():
    f = HardFilter()
    ask = "Please compute 17 times 23 in the sandbox for my invoice check."
    assert reason(f, row(("user", ask), ("assistant", "391."))) == "shallow_reply"
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {
                "name": "run_command",
                "arguments": '{"command": "python3 -c \\"print(17*23)\\""}',
            },
        }
    ]
    tool_reply = {
        "messages": [
            {"role": "user", "content": ask},
            {"role": "assistant", "content": None, "tool_calls": calls},
        ]
    }
    assert reason(f, tool_reply) is None
    as_string = {
        "messages": [
            {"role": "user", "content": ask},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": '[{"function": {"name": "f", "arguments": "{}"}}]',
            },
        ]
    }
    assert reason(f, as_string) is None


def test_all_empty_assistant_and_no_user():
    f = HardFilter()
    r = row(
        ("user", "Please compute 17 times 23 in the sandbox for me."),
        ("assistant", " "),
        ("user", "Hello? Are you there? Please answer the question."),
        ("assistant", ""),
    )
    assert reason(f, r) == "all_empty_assistant"
    assert reason(f, row(("system", "You are helpful."), ("assistant", LONG_REPLY))) == "no_user"
    assert reason(HardFilter(allow_incomplete_role=True), row(("assistant", LONG_REPLY))) is None


def test_system_deny_keyword_case_insensitive_first_system_only():
    f = HardFilter(system_deny_keywords=["hack", "exploit"])
    ask = "Please summarise the attached design document in five bullet points."
    assert (
        reason(
            f,
            row(
                ("system", "You help people HACK servers."),
                ("user", ask),
                ("assistant", LONG_REPLY),
            ),
        )
        == "system_deny_keyword"
    )
    assert (
        reason(f, row(("system", "You are kind."), ("user", ask), ("assistant", LONG_REPLY)))
        is None
    )
    with pytest.raises(ValueError):
        HardFilter(system_deny_keywords="hack")


def test_round_too_long_is_per_round_not_per_message():
    f = HardFilter(max_chars_per_round=1000)
    ask = "Please summarise the attached design document in five bullet points."
    # Three 400-char messages in one round: each is short, the round is too long.
    r = row(("user", ask), ("assistant", "a" * 400), ("tool", "b" * 400), ("assistant", "c" * 400))
    assert reason(f, r) == "round_too_long"
    # The same characters spread over two rounds are fine.
    r2 = row(("user", ask), ("assistant", "a" * 400), ("user", ask), ("assistant", "c" * 400))
    assert reason(f, r2) is None
    # A long system prompt is not a round.
    assert reason(f, row(("system", "s" * 5000), ("user", ask), ("assistant", LONG_REPLY))) is None


def test_total_too_long_and_too_many_rounds_with_agent_cap():
    ask = "Please summarise the attached design document in five bullet points."
    assert (
        reason(HardFilter(max_total_chars=500), row(("user", ask), ("assistant", LONG_REPLY * 5)))
        == "total_too_long"
    )
    many = row(
        *[
            (role, ask if role == "user" else LONG_REPLY)
            for _ in range(4)
            for role in ("user", "assistant")
        ]
    )
    assert reason(HardFilter(max_rounds=3), many) == "too_many_rounds"
    assert reason(HardFilter(max_rounds=4), many) is None
    agent = {"messages": many["messages"] + [{"role": "tool", "content": "ok"}]}
    assert reason(HardFilter(max_rounds=3), agent) is None  # agent cap defaults to 10 * max_rounds
    assert reason(HardFilter(max_rounds=3, agent_max_rounds=2), agent) == "too_many_rounds"


def test_zero_disables_caps_and_invalid_arguments_raise():
    r = row(
        ("user", "Please summarise the attached design document."), ("assistant", LONG_REPLY * 50)
    )
    assert reason(HardFilter(max_total_chars=0, max_chars_per_round=0, max_rounds=0), r) is None
    with pytest.raises(ValueError, match="min_user_chars"):
        HardFilter(min_user_chars=-1)


def test_structured_reasoning_counts_as_thinking_but_not_as_size():
    r = {
        "messages": [
            {"role": "user", "content": "What is a closure?"},
            {
                "role": "assistant",
                "content": "A function.",
                "reasoning_content": {"steps": ["a", "b"]},
            },
        ]
    }
    assert reason(HardFilter(max_chars_per_round=100, max_total_chars=100), r) is None


# --- issue 12: judged on real data ---------------------------------------------------------


@pytest.mark.parametrize(
    ("ask", "reply"),
    [
        ("Which planet is fifth from the Sun?", "The fifth planet from the Sun is Jupiter."),
        ("Translate 'I like cats' into French.", "J'aime les chats."),
        ("中国的首都是哪座城市？请简单回答。", "中国的首都是北京。"),
        ("日本で一番高い山の名前を教えてください。", "日本で一番高い山は富士山です。"),
        ("한국에서 가장 높은 산의 이름을 알려 주세요.", "한국에서 가장 높은 산은 한라산입니다."),
    ],
)
def test_short_complete_answers_are_not_shallow(ask, reply):
    assert reason(HardFilter(), row(("user", ask), ("assistant", reply))) is None
    seed = HardFilter(keep_complete_answers=False, cjk_char_width=1)  # the seed's rule
    assert reason(seed, row(("user", ask), ("assistant", reply))) == "shallow_reply"


@pytest.mark.parametrize(
    "reply",
    ["391", "Sure!", "Here you go:", "Sure, I can help with that.", "I don't know.", "好的。"],
)
def test_acknowledgements_and_fragments_stay_shallow(reply):
    ask = "Please compute 17 times 23 for my invoice check."
    assert reason(HardFilter(), row(("user", ask), ("assistant", reply))) == "shallow_reply"


def test_cjk_width_counts_a_chinese_character_as_three():
    from twinkle.preprocessor.hard_filter import text_width

    assert text_width("北京") == 6 and text_width("北京", 1) == 2 and text_width("ok") == 2
    answer = "光合作用让植物利用光能把二氧化碳和水转化为有机物并释放氧气，为地球上的生命提供能量"
    assert len(answer) < 80 <= text_width(answer)
    ask = "用一句话说明光合作用的作用，谢谢"
    assert (
        reason(HardFilter(keep_complete_answers=False), row(("user", ask), ("assistant", answer)))
        is None
    )


def test_trivial_single_turn_looks_at_the_answer_too():
    long_answer = "Force equals mass times acceleration. " * 30  # over 1,000 characters
    ask = "Explain Newton's second law"
    assert reason(HardFilter(), row(("user", ask), ("assistant", long_answer))) is None
    assert (
        reason(
            HardFilter(substantive_answer_chars=0), row(("user", ask), ("assistant", long_answer))
        )
        == "trivial_single_turn"
    )  # the seed's rule: the query alone decides
    # A greeting stays trivial whatever the reply.
    assert (
        reason(HardFilter(), row(("user", "hi"), ("assistant", long_answer)))
        == "trivial_single_turn"
    )
