"""Cleaners and resolve_cleaners: think blocks cut even when unclosed or orphaned, trailing
punctuation stripped without touching inner dots, LaTeX dollars removed only as a balanced pair."""

import pytest

from twinkle.core.cleaning import (
    CLEANER_FACTORIES,
    POST_CLEANERS,
    PRE_CLEANERS,
    resolve_cleaners,
    strip_latex_dollars,
    strip_special_tokens,
    strip_surrounding_quotes,
    strip_thinking_tokens,
    strip_trailing_punctuation,
    take_first_nonempty_line,
    truncate_tail,
)


def test_strip_special_tokens():
    assert strip_special_tokens("hello<|endoftext|>world") == "helloworld"
    assert strip_special_tokens("<s>a</s><pad><|im_start|>b<|im_end|>") == "ab"
    assert strip_special_tokens("") == ""
    assert strip_special_tokens("<S>kept</S>") == "<S>kept</S>"  # case-sensitive


@pytest.mark.parametrize(
    "text,expected",
    [
        ("before<think>x</think>after", "beforeafter"),
        ("answer text<think>trunc", "answer text"),
        ("reasoning here</think>\n0.7", "\n0.7"),
        ("</think>", ""),
        ("a</think>b</think>c", "c"),
        ("<think>a</think>b<think>c</think>d", "bd"),
        ("no tags", "no tags"),
        ("<think>\nmulti\nline\n</think>42", "42"),
    ],
)
def test_strip_thinking_tokens_unclosed_and_orphan_tags(text, expected):
    assert strip_thinking_tokens(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("3.", "3"),
        ("3.14", "3.14"),
        ("3.14.", "3.14"),
        ("42..", "42"),
        ("42, ", "42"),
        (".", ""),
        ("", ""),
        ("U.S.", "U.S"),
        ("a,.,", "a"),
    ],
)
def test_strip_trailing_punctuation_keeps_inner_dots(text, expected):
    assert strip_trailing_punctuation(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ('"x"', "x"),
        ("'x'", "x"),
        ('""', ""),
        ("\"x'", "\"x'"),
        ('"', '"'),
        ("«x»", "«x»"),
    ],
)
def test_strip_surrounding_quotes(text, expected):
    assert strip_surrounding_quotes(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("$42$", "42"),
        ("$$x^2$$", "x^2"),
        ("$$a\nb$$", "a\nb"),
        ("$ 42 $", "42"),
        ("$42$\n", "42"),
        ("$42$$", "$42$$"),
        ("$x + $y$", "$x + $y$"),
        ("$", "$"),
        ("$$", "$$"),
        ("42", "42"),
    ],
)
def test_strip_latex_dollars_only_balanced_pairs(text, expected):
    assert strip_latex_dollars(text) == expected


def test_factories():
    assert truncate_tail(3)("  abcdef  ") == "def"
    assert truncate_tail(3)("abc") == "abc"
    assert truncate_tail(3)("abcd") == "bcd"
    assert truncate_tail()("x" * 300) == "x" * 256
    assert take_first_nonempty_line()("\n\n  first \nsecond") == "first"
    assert take_first_nonempty_line(2)("abc") == "ab"
    assert take_first_nonempty_line()(" \n\t\n") == ""
    with pytest.raises(ValueError):
        truncate_tail(0)


def test_resolve_cleaners():
    assert resolve_cleaners(None, "pre") == [strip_special_tokens]
    assert resolve_cleaners(None, "post") == [strip_trailing_punctuation]
    assert resolve_cleaners([], "post") == []
    names = resolve_cleaners(["strip_trailing_punctuation", "strip_surrounding_quotes"], "post")
    assert names[0] is POST_CLEANERS["strip_trailing_punctuation"]
    parametrised = resolve_cleaners(
        [
            {"type": "truncate_tail", "config": {"max_chars": 2}},
            {"type": "take_first_nonempty_line"},
        ],
        "pre",
    )
    assert parametrised[0]("12345") == "45" and parametrised[1]("\nx\ny") == "x"
    with pytest.raises(ValueError):
        resolve_cleaners(["strip_special_tokens"], "middle")
    with pytest.raises(KeyError, match="is a pre-cleaner"):
        resolve_cleaners(["strip_thinking_tokens"], "post")  # pre-only
    with pytest.raises(KeyError):
        resolve_cleaners([{"type": "nope"}], "post")
    with pytest.raises(TypeError):
        resolve_cleaners([42], "post")
    with pytest.raises(TypeError):
        resolve_cleaners([{"config": {}}], "post")
    assert set(PRE_CLEANERS) == {"strip_special_tokens", "strip_thinking_tokens"}
    assert set(CLEANER_FACTORIES) == {"truncate_tail", "take_first_nonempty_line"}


def _reference_strip_thinking(text):
    """The rule as written in the reference, with regexes (slow but obviously right)."""
    import re

    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL)
    text = re.sub(r"<think>.*", "", text, flags=re.DOTALL)
    if "</think>" in text:
        text = text[text.rfind("</think>") + len("</think>") :]
    return text


def test_strip_thinking_matches_the_regex_rule():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = st.lists(
        st.sampled_from(["<think>", "</think>", "a", "b\n", " ", "<", "think>"]), max_size=12
    ).map("".join)

    @settings(max_examples=400, deadline=None)
    @given(pieces)
    def check(text):
        assert strip_thinking_tokens(text) == _reference_strip_thinking(text)

    check()
