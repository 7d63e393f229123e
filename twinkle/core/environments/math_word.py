"""Math word problems with a numeric answer: ``\\boxed{}``/``####``/tag/pattern/last-number
extraction.

The answer is read by a chain of :mod:`twinkle.core.extraction` extractors behind the
default cleaners plus think-block removal, then parsed as an exact
:class:`fractions.Fraction` (integers, decimals, ``3/4``, ``\\frac{3}{4}``, ``1,234``,
``$12.50``, ``1e5``), so ``0.5``, ``1/2`` and ``\\frac12``-style answers all match ``1/2``.

Example:
    >>> env = MathEnvironment(tasks=[{"id": "m", "question": "Half of 9?", "answer": "9/2"}])
    >>> s, _ = env.reset(options={"task_index": 0})
    >>> r = env.step(s, Action.from_text("It is 4.5, so \\\\boxed{4.5}"))
    >>> r.rewards.total, r.rewards.by_name("correctness").metadata["outcome"]
    (1.0, 'correct')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from twinkle.core.cleaning import resolve_cleaners
from twinkle.core.environments.base import TaskEnvironment, TaskHidden, outcome_signal
from twinkle.core.extraction import (
    BoxedExtractor,
    CleanedExtractor,
    CompositeExtractor,
    GSM8KExtractor,
    NumericExtractor,
    PatternAnswerExtractor,
    TagBasedExtractor,
)
from twinkle.core.signals import RewardType, Signal
from twinkle.core.state import Action

__all__ = ["MathEnvironment", "parse_number"]

# \frac{3}{4}, \dfrac{3}{4} and the brace-less \frac34
_FRAC_RE = re.compile(
    r"^(-?)\\[dt]?frac\s*(?:\{\s*(-?[\d.]+)\s*\}|(\d))\s*(?:\{\s*(-?[\d.]+)\s*\}|(\d))$"
)
_NUMBER_RE = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?$")
_STRIP = str.maketrans("", "", "$ ,\u00a0")
_UNITS_RE = re.compile(r"^(.*?\d)\s*(?:%|\\%|[a-zA-Z][a-zA-Z ]*)$")

PROMPT = (
    "{question}\n\nSolve the problem step by step, then give only the final number "
    "as \\boxed{{answer}}."
)


def parse_number(text: str | None) -> Fraction | None:
    """An exact value for a short numeric answer, or None when it is not one number."""
    if text is None:
        return None
    s = text.strip().translate(_STRIP).replace("\\!", "").replace("{,}", "")
    s = s.removeprefix("\\(").removesuffix("\\)")
    m = _UNITS_RE.match(s)
    if m:  # "42 apples", "96%": the number before a trailing unit word
        s = m.group(1)
    if not s:
        return None
    frac = _FRAC_RE.match(s)
    try:
        if frac:
            sign, a1, a2, b1, b2 = frac.groups()
            value = Fraction(a1 or a2) / Fraction(b1 or b2)
            return -value if sign else value
        if _NUMBER_RE.match(s):
            return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


class MathEnvironment(TaskEnvironment):
    """Word problems with numeric answers (bundled: ``examples/tasks/math.jsonl``).

    Task dicts: ``{"id", "question", "answer"}``. Signals: ``correctness`` (1.0 or 0.0)
    and ``format`` (weight 0, a logged metric: 1.0 when a number could be read).

    Example:
        >>> env = MathEnvironment()          # the bundled 30 problems
        >>> len(env)
        30
    """

    default_file = "math.jsonl"
    default_name = "math"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._numeric = NumericExtractor()
        #: The answer extractor (cleaners + extractor chain); public for benchmarks and reuse.
        self.extractor = CleanedExtractor(
            inner=CompositeExtractor(
                extractors=[
                    BoxedExtractor(),
                    GSM8KExtractor(),
                    TagBasedExtractor(tag_name="answer"),
                    PatternAnswerExtractor(),
                    self._numeric,
                ]
            ),
            pre_cleaners=resolve_cleaners(["strip_special_tokens", "strip_thinking_tokens"], "pre"),
            post_cleaners=resolve_cleaners(
                ["strip_trailing_punctuation", "strip_latex_dollars"], "post"
            ),
        )
        super().__init__(*args, **kwargs)

    def format_prompt(self, task: Mapping[str, Any]) -> str:
        return PROMPT.format(question=task["question"])

    def expected_answer(self, task: Mapping[str, Any]) -> str | None:
        answer = task.get("answer")
        if answer is None or parse_number(str(answer)) is None:
            raise ValueError(f"math task {task.get('id')!r}: answer {answer!r} is not a number")
        return str(answer)

    def extract(self, action: Action, hidden: TaskHidden) -> tuple[str | None, dict[str, Any]]:
        return self.extractor.extract(action.text or "")

    def score(
        self, hidden: TaskHidden, extracted: str | None, meta: dict[str, Any]
    ) -> tuple[Signal, ...]:
        value = parse_number(extracted)
        if value is None and extracted is not None:
            # A phrase such as "18 muffins are left": its last number is the answer.
            number, _ = self._numeric.extract(extracted)
            value = parse_number(number)
        if value is None:
            outcome, reward = "unparsed", 0.0
        else:
            correct = value == parse_number(hidden.expected_answer)
            outcome, reward = ("correct", 1.0) if correct else ("wrong", 0.0)
        return (
            outcome_signal(
                "correctness",
                outcome,
                reward,
                extracted=extracted,
                expected=hidden.expected_answer,
                parsed=None if value is None else str(value),
            ),
            outcome_signal(
                "format",
                "unparsed" if value is None else "correct",
                0.0 if value is None else 1.0,
                extracted=extracted,
                reward_type=RewardType.FORMAT,
                weight=0.0,
            ),
        )
