"""TokenSoupFilter: every soup signal, and ordinary multilingual text, code and JSON kept."""

import json

import pytest

from twinkle.preprocessor.token_soup import (
    TokenSoupFilter,
    _is_token_soup,
    _script_chaos,
    _script_of,
)

GARBLE = "ção фл 的 ساعة ภาษา 치 ления ▁the ção 的な ساعة ภาษ ของ ения 습니 τη ου של " * 3
CLEAN = {
    "en": "I wrote /home/user/fib.py and ran it; it prints [0, 1, 1, 2, 3, 5, 8]. See https://docs.python.org/3/.",
    "zh": "我已经写好 /home/user/fib.py 并运行，输出是 [0, 1, 1, 2, 3, 5, 8]。"
    "使用Python的requests库发送HTTP请求也可以。",
    "ja": "日本語の文章はひらがなとカタカナと漢字を混ぜて書きます。"
    "Pythonで処理して、結果をJSONで保存しました。"
    "ファイルは /home/user/note.txt にあります。",
    "ko": "먼저 Python 스크립트로 결과를 계산합니다. "
    "함수의 반환 값이 정확하므로 다음 단계로 진행할 수 있습니다. "
    "설정은 config.json에 저장했어요.",
    "code": "```python\ndef fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n"
    "        yield a\n        a, b = b, a + b\n```\n"
    "# ======================================\n| col | value |\n|-----|-------|",
    "json": json.dumps(
        {"名前": "テスト", "이름": "테스트", "name": "test", "url": "https://example.com/a?b=1"},
        ensure_ascii=False,
    ),
    "math": "设 α 为入射角，β 为折射角，则 n1 sin α = n2 sin β，当 Δt 很小时，速度 v = Δx/Δt。" * 3,
}


def soup_row(text):
    return {
        "messages": [
            {"role": "user", "content": "Summarise the log."},
            {"role": "assistant", "content": text},
        ]
    }


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_ordinary_text_is_not_soup(name):
    assert not _is_token_soup(CLEAN[name])
    assert TokenSoupFilter()([soup_row(CLEAN[name])])[1] == []


@pytest.mark.parametrize(
    "text",
    [
        GARBLE,
        "Result: " + "\ufffd" * 5 + "abc",
        "ok" + "\x01\x02" * 3,
        "x" + "\ue000" * 5,
        "<|im_end|>" * 20,
        "<unk>" * 12 + "</unk>" * 13,
        "<0x0A>" * 20,
        "[PAD]" * 20,
        "a" * 20,
        "哈" * 30,
    ],
)
def test_soup_signals(text):
    assert _is_token_soup(text)
    assert TokenSoupFilter()([soup_row(text)])[1][0]["drop_reason"] == "token_soup"


def test_garbled_tail_after_a_long_clean_answer():
    clean = CLEAN["zh"] * 6  # Chinese with English terms: two scripts, many runs
    assert not _is_token_soup(clean)
    assert _is_token_soup(clean + " ção фл 的 ساعة ภาษา 치 ления ▁the ção 的な ساعة ภาษ ของ")


def test_thresholds_are_strict_and_boundaries_hold():
    assert not _is_token_soup("a" * 19)
    assert not _is_token_soup("-" * 80 + "=" * 80 + "ー" * 30 + "1" * 40)
    assert not _is_token_soup("┌" + "─" * 40 + "┐\n" + "█" * 30 + " " + "⣿" * 25)
    assert not _is_token_soup("<|im_end|>" * 19)
    assert not _is_token_soup("dp[mask] " * 30)  # special tokens are case-sensitive
    assert _is_token_soup("ab" * 40 + "\ufffd" * 2, replacement_char_ratio=0.02) is True
    assert (
        _is_token_soup("ab" * 50 + "\ufffd" * 2, replacement_char_ratio=0.02) is False
    )  # 2/102 is below 0.02
    assert not _is_token_soup("")


def test_script_chaos_and_buckets():
    assert _script_chaos("日本語の文章はひらがなとカタカナと漢字を混ぜて書きます。" * 3) == 0.0
    assert _script_chaos(GARBLE) > 0.9
    assert _script_chaos("short ção фл") == 0.0  # below min_chars
    assert [_script_of(ord(c)) for c in "a1αжאعकกあア漢한\ue000€"] == [
        "latin",
        "latin",
        "greek",
        "cyrillic",
        "hebrew",
        "arabic",
        "devanagari",
        "thai",
        "hiragana",
        "katakana",
        "cjk",
        "hangul",
        "private",
        "other",
    ]


def test_every_assistant_and_reasoning_is_checked_and_max_chars():
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Fine so far."},
        {"role": "assistant", "content": "ok", "reasoning_content": GARBLE},
    ]
    assert TokenSoupFilter()([{"messages": msgs}])[1][0]["drop_reason"] == "token_soup"
    late = "Clean text. " * 50 + "a" * 30
    assert TokenSoupFilter()([soup_row(late)])[1]
    assert TokenSoupFilter(max_chars=100)([soup_row(late)])[1] == []
    with pytest.raises(ValueError):
        TokenSoupFilter(special_token_count=-1)


# --- issue 12: template-token leaks at any count ------------------------------------------


def _reply(text, ask="Summarise the meeting notes for me, please."):
    row = {"messages": [{"role": "user", "content": ask}, {"role": "assistant", "content": text}]}
    _kept, dropped = TokenSoupFilter()([row])
    return dropped[0]["drop_reason"] if dropped else None


@pytest.mark.parametrize(
    "text",
    [
        "The sync moved to Thursday.<|im_end|>",
        "Unit tests catch regressions early.</s>",
        "Try Nimbus!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nthanks",
        "会议改到周四。<|endoftext|>",
        "좋아요! [/INST] [INST] 고마워",
    ],
)
def test_one_leaked_template_token_is_enough(text):
    assert _reply(text) == "special_token_leak"


@pytest.mark.parametrize(
    "text",
    [
        "ChatML ends every turn with `<|im_end|>`.",
        "```\n<|im_start|>user\nhi<|im_end|>\n```",
        'The "<|eot_id|>" token ends a Llama 3 turn.',
        "Wrap it in the s element: <s>$49.99</s> for a crossed-out price.",
    ],
)
def test_mentions_of_template_tokens_are_not_leaks(text):
    assert _reply(text) is None


def test_a_conversation_about_templates_may_name_tokens():
    ask = "My Llama 2 prompt is '[INST] hello [/INST]'. Where does the system prompt go?"
    assert _reply("Inside the first [INST], wrapped in <<SYS>> tags.", ask) is None
    assert (
        TokenSoupFilter(template_token_count=0)(
            [{"messages": [{"role": "assistant", "content": "Done.</s>"}]}]
        )[1]
        == []
    )
