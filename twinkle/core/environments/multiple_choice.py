"""Multiple-choice questions scored by exact letter match.

The letter is read by :class:`twinkle.core.extraction.MultipleChoiceExtractor` (cue words,
"(C)", option labels, a bare letter), restricted to the task's own letters, after the
default cleaners and think-block removal.

Example:
    >>> env = MultipleChoiceEnvironment(tasks=[
    ...     {"id": "q", "question": "2 + 2?", "choices": ["3", "4"], "answer": "B"}])
    >>> s, _ = env.reset(options={"task_index": 0})
    >>> env.step(s, Action.from_text("The answer is B.")).rewards.total
    1.0
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from twinkle.core.cleaning import resolve_cleaners
from twinkle.core.environments.base import TaskEnvironment, TaskHidden, outcome_signal
from twinkle.core.extraction import CleanedExtractor, MultipleChoiceExtractor
from twinkle.core.signals import RewardType, Signal
from twinkle.core.state import Action

__all__ = ["MultipleChoiceEnvironment"]

PROMPT = (
    "{question}\n\n{options}\n\nThink it through, then end with 'Answer: X' where X is the letter."
)


class MultipleChoiceEnvironment(TaskEnvironment):
    """Questions with lettered options (bundled: ``examples/tasks/multiple_choice.jsonl``).

    Task dicts: ``{"id", "question", "choices": [...], "answer": "B"}`` (2 to 26 choices).
    Signals: ``correctness`` and ``format`` (weight 0).

    Example:
        >>> MultipleChoiceEnvironment().spec.name
        'multiple_choice'
    """

    default_file = "multiple_choice.jsonl"
    default_name = "multiple_choice"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pre = resolve_cleaners(["strip_special_tokens", "strip_thinking_tokens"], "pre")
        self._post = resolve_cleaners(["strip_trailing_punctuation"], "post")
        self._extractors: dict[str, CleanedExtractor] = {}  # one per set of option letters
        super().__init__(*args, **kwargs)

    def _letters(self, task: Mapping[str, Any]) -> str:
        choices = task.get("choices")
        if not isinstance(choices, (list, tuple)) or not 2 <= len(choices) <= 26:
            raise ValueError(f"multiple-choice task {task.get('id')!r} needs 2-26 choices")
        return string.ascii_uppercase[: len(choices)]

    def _extractor(self, letters: str) -> CleanedExtractor:
        if letters not in self._extractors:
            self._extractors[letters] = CleanedExtractor(
                inner=MultipleChoiceExtractor(choices=letters),
                pre_cleaners=self._pre,
                post_cleaners=self._post,
            )
        return self._extractors[letters]

    def format_prompt(self, task: Mapping[str, Any]) -> str:
        letters = self._letters(task)
        options = "\n".join(f"{letter}. {text}" for letter, text in zip(letters, task["choices"]))
        return PROMPT.format(question=task["question"], options=options)

    def expected_answer(self, task: Mapping[str, Any]) -> str | None:
        answer = str(task.get("answer", "")).strip().upper()
        if answer not in self._letters(task):
            raise ValueError(
                f"multiple-choice task {task.get('id')!r}: answer {answer!r} is not a choice"
            )
        return answer

    def extract(self, action: Action, hidden: TaskHidden) -> tuple[str | None, dict[str, Any]]:
        # Only the task's own letters count: "E" is no answer to a four-option question.
        return self._extractor(self._letters(hidden.task)).extract(action.text or "")

    def score(
        self, hidden: TaskHidden, extracted: str | None, meta: dict[str, Any]
    ) -> tuple[Signal, ...]:
        if extracted is None:
            outcome, reward = "unparsed", 0.0
        elif extracted.upper() == hidden.expected_answer:
            outcome, reward = "correct", 1.0
        else:
            outcome, reward = "wrong", 0.0
        return (
            outcome_signal(
                "correctness", outcome, reward, extracted=extracted, expected=hidden.expected_answer
            ),
            outcome_signal(
                "format",
                "unparsed" if extracted is None else "correct",
                0.0 if extracted is None else 1.0,
                extracted=extracted,
                reward_type=RewardType.FORMAT,
                weight=0.0,
            ),
        )
