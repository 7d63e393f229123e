"""Answer extractors: the answer each returns (grouped digits, fractions, signs, ``####`` and
boxed answers, choice letters), their metadata, and bad or hostile input."""

import re

import pytest

from twinkle.core.extraction import (
    EXTRACTORS,
    AnswerExtractor,
    BoxedExtractor,
    CleanedExtractor,
    CodeBlockExtractor,
    CompositeExtractor,
    GSM8KExtractor,
    LastLineExtractor,
    MultipleChoiceExtractor,
    NativeExtractor,
    NumericExtractor,
    PatternAnswerExtractor,
    RawGenerationExtractor,
    RegexExtractor,
    SingleLineExtractor,
    TagBasedExtractor,
    TailExtractor,
)

ALL = [
    TagBasedExtractor(),
    RegexExtractor(r"(\d+)"),
    GSM8KExtractor(),
    MultipleChoiceExtractor(),
    BoxedExtractor(),
    NumericExtractor(),
    LastLineExtractor(),
    CodeBlockExtractor(),
    PatternAnswerExtractor(),
    RawGenerationExtractor(),
    TailExtractor(),
    CompositeExtractor([BoxedExtractor(), NumericExtractor()]),
    NativeExtractor(lambda r: r or None),
    SingleLineExtractor(LastLineExtractor()),
    CleanedExtractor(TagBasedExtractor(), ["strip_special_tokens"], ["strip_trailing_punctuation"]),
]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2025", "2025"),
        ("in the year 2025.", "2025"),
        ("1234", "1234"),
        ("1234.5", "1234.5"),
        ("1,234", "1234"),
        ("1,234,567.25 total", "1234567.25"),
        ("3/4", "3/4"),
        ("-3/4", "-3/4"),
        ("1e5", "1e5"),
        ("2.5E-3", "2.5E-3"),
        ("3-4", "4"),
        ("42.", "42"),
        ("-42", "-42"),
        ("-3.14", "-3.14"),
        ("x-4", "4"),
        ("1,2345", "2345"),
        ("3/4.", "3/4"),
        ("first 10 then 20 then 30", "30"),
        ("a=-7", "-7"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_numeric_d1(text, expected):
    assert NumericExtractor().extract(text)[0] == expected


def test_numeric_tail_window_agrees_with_full_scan():
    # Long texts use a tail window; it must give the same answer as scanning everything.
    ex = NumericExtractor()
    for tail in (
        "answer 1,234",
        "x" * 300 + "9,999,999",
        "val:123,456",
        "=" * 400 + "77",
        "1" * 600,
    ):
        text = "filler 5 " * 100 + tail
        full = [m.group() for m in ex._re.finditer(text)][-1].replace(",", "")
        assert ex.extract(text)[0] == full


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The answer is B", "B"),
        ("The correct answer is (C).", "C"),
        ("Final answer: **D**", "D"),
        ("Answer: B", "B"),
        ("answer: b", "B"),
        ("the answer is a.", "A"),
        ("Answer: (A)", "A"),
        ("The answer would be C", "C"),
        ("the answer should be: E", "E"),
        ("Answer: [A]", "A"),
        ("Option A is wrong; the answer is C", "C"),
        ("(B)", "B"),
        ("B.", "B"),
        ("B)", "B"),
        ("A", "A"),
        ("  D  ", "D"),
        ("Options:\nA. one\nB. two", "B"),
        ("Answer: Because it rains", None),
        ("answer: a lot", None),
        ("answerE", None),
        ("A good approach is to think.", None),
        ("", None),
        ("no letter", None),
    ],
)
def test_multiple_choice_d2(text, expected):
    assert MultipleChoiceExtractor().extract(text)[0] == expected


def test_multiple_choice_choices_and_case():
    assert MultipleChoiceExtractor("ABC").extract("Answer: D")[0] is None
    assert MultipleChoiceExtractor(case_sensitive=True).extract("answer: b")[0] is None
    assert MultipleChoiceExtractor(case_sensitive=True).extract("answer: B")[0] == "B"
    answer, meta = MultipleChoiceExtractor().extract("x (A) y (C) z")
    assert (answer, meta["pattern_used"], meta["num_matches"]) == ("C", "parenthesized", 2)
    with pytest.raises(ValueError):
        MultipleChoiceExtractor("A1")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("x=7", "7"),
        ("x = 7 and y = 8", "8"),
        ("the answer is: 42", "42"),
        ("the answer is 3.14.", "3.14"),
        ("So the answer is 10. But actually the answer is 42", "42"),
        ("Therefore, 12 apples", "12 apples"),
        ("therefore\n42", "42"),
        ("if a == b", None),
        ("a <= b and c >= d and e != f => g", None),
        ("", None),
        ("nothing", None),
    ],
)
def test_pattern_answer_d3(text, expected):
    assert PatternAnswerExtractor().extract(text)[0] == expected


def test_pattern_answer_custom_and_meta():
    answer, meta = PatternAnswerExtractor([r"result:\s*"]).extract("result: 42")
    assert answer == "42" and meta["pattern_index"] == 0
    assert PatternAnswerExtractor([r"result:\s*"]).extract("x = 5")[0] is None
    _, meta = PatternAnswerExtractor().extract("The Answer Is 9")
    assert meta["pattern_index"] == 0


@pytest.mark.parametrize(
    "text,expected",
    [
        ("#### 42", "42"),
        ("####42", "42"),
        ("#### $150", "150"),
        ("#### 1,234,567", "1234567"),
        ("#### 3.14", "3.14"),
        ("#### -5", "-5"),
        ("#### $-5", "-5"),
        ("#### ,", None),
        ("#### 1\n#### 2", "2"),
        ("no marker 5", None),
    ],
)
def test_gsm8k_d4(text, expected):
    assert GSM8KExtractor().extract(text)[0] == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        (r"\boxed{x^{2}+1}", "x^{2}+1"),
        (r"\boxed{\boxed{1}}", "1"),
        (r"\boxed{}", ""),
        (r"\boxed {42}", "42"),
        (r"\boxed{\{a\}}", r"\{a\}"),
        (r"\fbox{7}", "7"),
        (r"$\boxed 42$", "42"),
        (r"\boxed{1} and \boxed{2", "1"),
        (r"\boxed{3} then \boxed{ 4 }", "4"),
        (r"\boxed{", None),
        ("plain", None),
    ],
)
def test_boxed_d6(text, expected):
    assert BoxedExtractor().extract(text)[0] == expected


def test_boxed_many_candidates_uses_single_pass_pairing():
    text = "".join(rf"\boxed{{{i}}} " for i in range(50)) + r"\boxed{\frac{1}{2}} \boxed{open"
    assert BoxedExtractor().extract(text)[0] == r"\frac{1}{2}"


def test_tag_based():
    ex = TagBasedExtractor()
    assert ex.extract("The answer is <answer>42</answer>")[0] == "42"
    answer, meta = ex.extract("Reasoning... <answer>echo hello")
    assert (answer, meta["closed"], meta["match_end"]) == ("echo hello", False, 31)
    answer, meta = ex.extract("<answer>wrong</answer> trailing <answer>correct")
    assert (answer, meta["closed"], meta["num_matches"]) == ("correct", False, 1)
    assert ex.extract("<answer></answer>") == (
        "",
        {
            "found": True,
            "tag_name": "answer",
            "closed": True,
            "match_start": 8,
            "match_end": 8,
            "num_matches": 1,
        },
    )
    assert ex.extract("<ANSWER> x </Answer>")[0] == "x"
    assert ex.extract("<answer>1</answer><answer>2</answer>")[0] == "2"
    assert ex.extract("no tags") == (None, {"found": False, "tag_name": "answer"})
    assert TagBasedExtractor("my.tag").extract("<myxtag>1</myxtag><my.tag>2</my.tag>")[0] == "2"
    assert TagBasedExtractor(strip_whitespace=False).extract("<answer> 1 </answer>")[0] == " 1 "


def test_regex_extractor():
    assert RegexExtractor(r"final: (\w+)").extract("final: a final: b")[0] == "b"
    answer, meta = RegexExtractor(r"final: \w+").extract("final: a")
    assert answer is None and meta["error"] == "Group 1 not found in match"
    assert RegexExtractor(r"(a)|(b)", group_index=1).extract("b")[0] is None
    assert RegexExtractor(r"x(\d)", flags=re.IGNORECASE).extract("X5")[0] == "5"


def test_last_line_code_block_raw_tail_native():
    answer, meta = LastLineExtractor().extract("work\n\n  42  \n\n")
    assert (answer, meta["num_lines"]) == ("42", 2)
    assert LastLineExtractor().extract(" \n ")[0] is None
    blocks = "```python\nprint(1)\n```\ntext\n```\nsecond\n```"
    assert CodeBlockExtractor().extract(blocks)[0] == "second"
    assert CodeBlockExtractor("python").extract(blocks)[0] == "print(1)"
    assert CodeBlockExtractor("python").extract("```python3\nx\n```")[0] is None
    assert CodeBlockExtractor().extract("```python\nunclosed")[0] is None
    assert RawGenerationExtractor().extract("  hi \n")[0] == "hi"
    assert RawGenerationExtractor().extract("")[0] == ""
    assert TailExtractor(3).extract(" 12345 ")[0] == "345"
    assert TailExtractor().extract("   ")[0] is None
    with pytest.raises(ValueError):
        TailExtractor(0)
    assert NativeExtractor(lambda r: 7).extract("x") == (
        "7",
        {"found": True, "format": "native", "native_name": "native"},
    )
    assert NativeExtractor(lambda r: None).extract("x")[0] is None
    answer, meta = NativeExtractor(lambda r: 1 / 0, name="broken").extract("x")
    assert answer is None and "ZeroDivisionError" in meta["error"]


def test_composite_and_single_line():
    ex = CompositeExtractor([TagBasedExtractor(), BoxedExtractor(), NumericExtractor()])
    answer, meta = ex.extract(r"\boxed{5} or 6")
    assert (answer, meta["extractor_index"], meta["extractor_type"]) == ("5", 1, "BoxedExtractor")
    assert ex.extract("<answer></answer> 9")[0] == ""  # an empty answer counts as found
    assert CompositeExtractor([]).extract("x") == (None, {"found": False, "tried_extractors": []})
    assert ex.extract("nothing")[1]["tried_extractors"] == [
        "TagBasedExtractor",
        "BoxedExtractor",
        "NumericExtractor",
    ]
    single = SingleLineExtractor(RawGenerationExtractor(), max_chars=5)
    assert single.extract("\n ok \n")[0] == "ok"
    assert single.extract("a\nb")[1]["rejected_multiline"] is True
    assert single.extract("toolong")[1]["rejected_too_long"] is True


def test_cleaned_extractor_d14():
    ex = CleanedExtractor(
        TagBasedExtractor(), ["strip_special_tokens"], ["strip_trailing_punctuation"]
    )
    answer, meta = ex.extract("<answer>42.</answer><|endoftext|>")
    assert answer == "42"
    assert meta["pre_cleaners"] == ["strip_special_tokens"]
    assert meta["post_cleaners"] == ["strip_trailing_punctuation"]
    assert meta["pre_cleaners_applied"] and meta["post_cleaners_applied"]
    _, meta = CleanedExtractor(TagBasedExtractor()).extract("<answer>1</answer>")
    assert not meta["pre_cleaners_applied"] and not meta["post_cleaners_applied"]
    _, meta = ex.extract("no tag")
    assert meta["post_cleaners_applied"] is False and meta["post_cleaners"] == []
    tail = CleanedExtractor(
        RawGenerationExtractor(),
        post_cleaners=[{"type": "truncate_tail", "config": {"max_chars": 2}}],
    )
    assert tail.extract("12345")[0] == "45"
    assert (
        CleanedExtractor(RawGenerationExtractor(), post_cleaners=[str.upper]).extract("a")[0] == "A"
    )


def test_registry_names():
    assert set(EXTRACTORS) == {
        "tag_based",
        "regex",
        "gsm8k",
        "multiple_choice",
        "raw",
        "boxed",
        "numeric",
        "last_line",
        "code_block",
        "pattern_answer",
        "tail",
    }
    for extractor in ALL:
        assert isinstance(extractor, AnswerExtractor)


@pytest.mark.parametrize("extractor", ALL, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("bad", [None, 42, b"bytes", ["list"]])
def test_non_string_input_is_a_failed_extraction(extractor, bad):
    if isinstance(extractor, (NativeExtractor, CompositeExtractor, SingleLineExtractor)):
        bad_answer, meta = extractor.extract(bad)  # delegates; must still not raise
    else:
        bad_answer, meta = extractor.extract(bad)
        assert "error" in meta
    assert meta["found"] is False or bad_answer is not None


@pytest.mark.parametrize("extractor", ALL, ids=lambda e: type(e).__name__)
def test_hostile_huge_inputs_finish(extractor):
    # Patterns must stay linear: many unclosed tags/boxes, long whitespace, digit soup.
    for text in (
        "<answer>" * 20_000,
        "\\boxed{" * 20_000,
        "\n" * 200_000 + "A",
        "9," * 100_000,
        "=" * 100_000,
        "the answer is " * 10_000,
        "```" * 30_000,
        "日本語 the answer is 42 " * 5_000,
    ):
        answer, meta = extractor.extract(text)
        assert isinstance(meta, dict) and "found" in meta or "extractor_index" in meta


def test_unicode_and_unparseable():
    assert NumericExtractor().extract("答案是 42。")[0] == "42"
    assert TagBasedExtractor().extract("<answer>日本</answer>")[0] == "日本"
    # A lower() that changes length (U+0130) must not shift offsets.
    assert PatternAnswerExtractor().extract("İİİ the answer is 5")[0] == "5"
    assert MultipleChoiceExtractor().extract("İİ Answer: C")[0] == "C"
    for ex in (BoxedExtractor(), GSM8KExtractor(), TagBasedExtractor(), PatternAnswerExtractor()):
        assert ex.extract("just some prose without any answer markers")[0] is None


def test_tag_pairing_matches_the_regex_rule():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    def reference(text):
        closed = list(re.finditer(r"<answer>(.*?)</answer>", text, re.I | re.S))
        opens = list(re.finditer(r"<answer>", text, re.I))
        if not opens:
            return None
        if closed and opens[-1].start() < closed[-1].end():
            return closed[-1].group(1).strip()
        return text[opens[-1].end() :].strip()

    pieces = st.lists(
        st.sampled_from(["<answer>", "</answer>", "<ANSWER>", "x", "1 ", "\n", "<"]), max_size=12
    ).map("".join)

    @settings(max_examples=400, deadline=None)
    @given(pieces)
    def check(text):
        assert TagBasedExtractor().extract(text)[0] == reference(text)

    check()


def test_numeric_window_matches_full_scan_property():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ex = NumericExtractor()
    tails = st.text(alphabet="0123456789,.-/eE x>", min_size=0, max_size=400)

    @settings(max_examples=400, deadline=None)
    @given(tails)
    def check(tail):
        text = "lead 7 " * 40 + tail
        matches = [m.group() for m in ex._re.finditer(text)]
        assert ex.extract(text)[0] == matches[-1].replace(",", "")

    check()
