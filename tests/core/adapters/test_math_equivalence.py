"""Math answer equivalence with math-verify: equal forms agree, unparsed is not wrong."""

import threading

import pytest

from twinkle.core.math_equivalence import HAVE_MATH_VERIFY, math_equal, math_outcome


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "1/2"),
        ("1/2", "\\frac{1}{2}"),
        ("\\boxed{0.5}", "1/2"),
        ("x^2+1", "1+x^2"),
        ("42", "42.0"),
        ("Paris", "paris"),
    ],
)
def test_equivalent_forms_are_correct(pred, gold):
    assert HAVE_MATH_VERIFY
    assert math_outcome(pred, gold) == "correct"


def test_wrong_and_unparsed_are_told_apart():
    assert math_outcome("1/3", "0.5") == "wrong"
    assert math_outcome("no idea", "0.5") == "unparsed"
    assert math_outcome(None, "0.5") == "unparsed"
    assert math_outcome("", "1") == "unparsed"
    assert not math_equal("2", "3")


def test_works_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(math_outcome("1/2", "0.5")))
    thread.start()
    thread.join()
    assert results == ["correct"]
