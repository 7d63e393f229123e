"""Math answer equivalence with ``math-verify``: ``\\frac{1}{2}``, ``0.5`` and ``1/2`` agree.

:func:`math_outcome` says whether a prediction is ``correct``, ``wrong`` or ``unparsed`` (no
mathematical expression could be read from it, a format failure kept apart from a wrong
answer). ``math-verify`` (the ``envs`` extra) parses LaTeX and plain expressions with sympy;
without it, a stdlib fallback compares exact numbers (:func:`parse_number`) and else
normalised strings. math-verify's own timeouts use ``SIGALRM``, which works only in the main
thread, so other threads parse without a timeout.

Example:
    >>> math_outcome("0.5", "\\\\frac{1}{2}"), math_outcome("1/2", "0.5")
    ('correct', 'correct')
    >>> math_outcome("1/3", "0.5"), math_outcome("no idea", "0.5"), math_outcome(None, "1")
    ('wrong', 'unparsed', 'unparsed')
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from typing import Any

__all__ = ["HAVE_MATH_VERIFY", "math_equal", "math_outcome", "parse_math"]

HAVE_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None


def _timeouts() -> int | None:
    return 5 if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str, timeout: int | None) -> tuple[Any, ...]:
    from math_verify import parse

    # bare LaTeX ("x^2+1", "\\frac12") reads best as one formula; plain text as is
    if "$" not in text and "\\boxed" not in text and any(c in text for c in "\\^_{}"):
        parsed = parse(f"${text}$", parsing_timeout=timeout)
        if parsed:
            return tuple(parsed)
    return tuple(parse(text, parsing_timeout=timeout))


def parse_math(text: str | None) -> tuple[Any, ...]:
    """math-verify's parse of ``text`` (``()`` when nothing could be read); cached."""
    if text is None or not text.strip():
        return ()
    if not HAVE_MATH_VERIFY:
        from twinkle.core.environments.math_word import parse_number

        value = parse_number(text)
        return () if value is None else (value,)
    try:
        return _parse_cached(text.strip(), _timeouts())
    except Exception:  # noqa: BLE001 - math-verify's parser failing is "unparsed"
        return ()


def math_outcome(prediction: str | None, gold: str | None) -> str:
    """``correct``, ``wrong`` or ``unparsed`` for ``prediction`` against ``gold``."""
    if prediction is None or gold is None:
        return "unparsed"
    gold_parsed = parse_math(gold)
    if not gold_parsed:  # a non-mathematical reference: compare the texts
        same = prediction.strip().lower() == str(gold).strip().lower()
        return "correct" if same else "wrong"
    pred = parse_math(prediction)
    if not pred:
        return "unparsed"
    if not HAVE_MATH_VERIFY:
        return "correct" if pred[0] == gold_parsed[0] else "wrong"
    from math_verify import verify

    try:
        ok = verify(list(gold_parsed), list(pred), timeout_seconds=_timeouts())
    except Exception:  # noqa: BLE001 - a verifier crash on odd input counts as not equal
        ok = False
    return "correct" if ok else "wrong"


def math_equal(prediction: str | None, gold: str | None) -> bool:
    """True when ``prediction`` and ``gold`` are the same mathematical answer."""
    return math_outcome(prediction, gold) == "correct"
