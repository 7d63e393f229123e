"""Trajectory rewards on text: token F1 against the ground truth, tool exploration, CoT steps.

Each reward is a callable over trajectory dicts (``messages`` and ``user_data``) giving one
float per trajectory, and also a core :class:`~twinkle.core.signals.RewardFunction`
(``compute(state, action, next_state)``, the prediction read from ``action.text`` and the
reference from the hidden state), so it plugs into an environment's ``extra_rewards`` too.

What they take care of:

* F1's filler-word leniency compares stemmed tokens with the *stemmed* filler list, so all
  25 filler words work (``heavy``, ``roughly``... match once stemmed);
* no ground truth gives 0.0, not 1.0 for an empty prediction;
* golds are read with :func:`~twinkle.data_format.user_data_get` decoding, like every other
  reader (packed strings lose their JSON quotes);
* a tool result starting with ``Error`` in any case (ToolManager's ``Error:``) is a failure.

The Porter stemmer comes from ``nltk`` (the ``envs`` extra; no corpus download).

Example:
    >>> traj = {"messages": [{"role": "assistant", "content": "It weighs \\\\boxed{5 kg}"}],
    ...         "user_data": [("ground_truth", '"5 kg"')]}
    >>> F1Reward()([traj])
    [1.0]
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twinkle.core.signals import RewardType, Signal
from twinkle.core.state import Action, State, find_ground_truth

__all__ = ["FILLER_WORDS", "CoTReward", "F1Reward", "ToolExploreReward", "f1_score"]

#: Words whose presence or absence does not change an answer ("5 kg" vs "about 5 kg").
FILLER_WORDS = (
    "long tall high wide deep heavy old large small big short away ago approximately about "
    "around over under below above total roughly nearly almost exactly"
).split()
_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_BOXED = "\\boxed{"
_STEP = re.compile(r"^\s*step\s*(\d+)\s*[.:]", re.IGNORECASE | re.MULTILINE)

_stemmer: Any = None
_fillers: frozenset[str] | None = None


def _stem(token: str) -> str:
    global _stemmer
    if _stemmer is None:
        from twinkle.errors import require

        _stemmer = require("nltk.stem.porter", "F1Reward (Porter stemming)", "envs").PorterStemmer()
    return _stemmer.stem(token) if len(token) >= 4 and token.isalpha() else token


def _filler_set() -> frozenset[str]:
    global _fillers
    if _fillers is None:
        _fillers = frozenset(_stem(w) for w in FILLER_WORDS)  # fix 29: stem the list too
    return _fillers


def normalize(text: str) -> list[str]:
    """Lower-case, drop ASCII punctuation and articles, split, stem (tokens of 4+ letters)."""
    text = _ARTICLES.sub(" ", str(text).lower().translate(_PUNCT))
    return [_stem(t) for t in text.split()]


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of ``prediction`` against ``gold`` with the filler/digit leniency."""
    pred, ref = normalize(prediction), normalize(gold)
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    pred_set, ref_set, fillers = set(pred), set(ref), _filler_set()
    if ref_set < pred_set and all(t.isdigit() or t in fillers for t in pred_set - ref_set):
        return 1.0
    if pred_set < ref_set and all(t in fillers for t in ref_set - pred_set):
        return 1.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p
        )
    return ""


def _last_assistant_text(messages: Iterable[Any]) -> str:
    text = ""
    for m in messages or ():
        if isinstance(m, Mapping) and m.get("role") == "assistant":
            text = _text(m.get("content"))
    return text


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}``; an unbalanced one stops the scan."""
    found, start = None, text.find(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            break  # unbalanced: keep the last good match
        found = text[start + len(_BOXED) : i - 1]
        start = text.find(_BOXED, i)
    return found


def _golds(user_data: Any) -> list[str]:
    from twinkle.data_format import user_data_get

    if isinstance(user_data, Mapping):
        user_data = list(user_data.items())
    golds = []
    for pair in user_data or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and pair[0] == "ground_truth":
            value = user_data_get([pair], "ground_truth")
            if value:
                golds.append(str(value))
    return golds


class _TrajectoryReward:
    """Shared plumbing: ``__call__`` over trajectories, ``compute`` as a RewardFunction."""

    name = "reward"
    reward_type = RewardType.OUTCOME

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    def score(self, trajectory: Mapping[str, Any]) -> float:
        raise NotImplementedError

    def __call__(self, trajectories: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[float]:
        return [self.score(t) for t in trajectories]

    def compute(self, state: State[Any], action: Action, next_state: State[Any]) -> Signal:
        messages = [*next_state.observation.messages]
        if not messages or messages[-1].get("role") != "assistant":
            messages.append({"role": "assistant", "content": action.text or ""})
        gold = find_ground_truth(state.hidden)
        trajectory = {"messages": messages, "user_data": [("ground_truth", gold)] if gold else []}
        return Signal(self.name, self.reward_type, self.score(trajectory), weight=self.weight)


class F1Reward(_TrajectoryReward):
    """Max token F1 of the last ``\\boxed{}`` answer against the ``ground_truth`` entries.

    Args:
        answer_pattern: a regex (str or compiled) used when there is no ``\\boxed{}``; its
            last match (first group) is the prediction.

    Example:
        >>> F1Reward().score({"messages": [{"role": "assistant", "content": "\\\\boxed{Paris}"}],
        ...                   "user_data": [("ground_truth", "Lyon")]})
        0.0
    """

    name = "f1"

    def __init__(self, answer_pattern: str | re.Pattern[str] | None = None, weight: float = 1.0):
        super().__init__(weight)
        self.answer_pattern = (
            re.compile(answer_pattern) if isinstance(answer_pattern, str) else answer_pattern
        )

    def prediction(self, messages: Iterable[Any]) -> str:
        text = _last_assistant_text(messages)
        boxed = last_boxed(text)
        if boxed is not None:
            return boxed
        if self.answer_pattern is not None:
            matches = self.answer_pattern.findall(text)
            if matches:
                last = matches[-1]
                return (last[0] if isinstance(last, tuple) else last).strip()
        return ""

    def score(self, trajectory: Mapping[str, Any]) -> float:
        golds = _golds(trajectory.get("user_data"))
        if not golds:
            return 0.0  # fix 29: no reference is not a match
        prediction = self.prediction(trajectory.get("messages") or ())
        return max(f1_score(prediction, gold) for gold in golds)


class ToolExploreReward(_TrajectoryReward):
    """Rewards using tools successfully, once the answer is good enough.

    F1 (as :class:`F1Reward`) below ``f1_threshold`` gives 0.0. Otherwise the assistant
    turns with tool calls followed by at least one successful tool message (non-empty, not
    starting with ``error`` in any case) are counted: 0 gives 0.0, 1-3 give 1.0, 4 or more
    0.5.

    Example:
        >>> msgs = [{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]},
        ...         {"role": "tool", "content": "Error: no such file"},
        ...         {"role": "assistant", "content": "\\\\boxed{42}"}]
        >>> ToolExploreReward().score({"messages": msgs, "user_data": [("ground_truth", "42")]})
        0.0
    """

    name = "tool_explore"

    def __init__(
        self,
        f1_threshold: float = 0.5,
        answer_pattern: str | re.Pattern[str] | None = None,
        weight: float = 1.0,
    ) -> None:
        super().__init__(weight)
        self.f1_threshold = f1_threshold
        self.f1 = F1Reward(answer_pattern)

    @staticmethod
    def successful_tool_turns(messages: Sequence[Any]) -> int:
        count = 0
        for i, message in enumerate(messages):
            if not (isinstance(message, Mapping) and message.get("role") == "assistant"):
                continue
            if not message.get("tool_calls"):
                continue
            j, ok = i + 1, False
            while j < len(messages) and isinstance(messages[j], Mapping):
                if messages[j].get("role") != "tool":
                    break
                content = _text(messages[j].get("content")).strip()
                ok = ok or (bool(content) and not content.lower().startswith("error"))
                j += 1
            count += ok
        return count

    def score(self, trajectory: Mapping[str, Any]) -> float:
        if self.f1.score(trajectory) < self.f1_threshold:
            return 0.0
        turns = self.successful_tool_turns(list(trajectory.get("messages") or ()))
        return 0.0 if turns == 0 else 1.0 if turns <= 3 else 0.5


class CoTReward(_TrajectoryReward):
    """A small bonus for numbered reasoning steps before a ``\\boxed{}`` answer.

    No ``\\boxed{`` gives 0.0; 3-6 distinct ``Step N:`` lines give 0.3, 7 or more 0.1.

    Example:
        >>> text = "Step 1: a\\nStep 2: b\\nStep 3: c\\n\\\\boxed{1}"
        >>> CoTReward().score({"messages": [{"role": "assistant", "content": text}]})
        0.3
    """

    name = "cot"
    reward_type = RewardType.PROCESS

    def score(self, trajectory: Mapping[str, Any]) -> float:
        text = "\n".join(
            m["content"]
            for m in trajectory.get("messages") or ()
            if isinstance(m, Mapping)
            and m.get("role") == "assistant"
            and isinstance(m.get("content"), str)
        )
        if _BOXED not in text:
            return 0.0
        steps = len(set(_STEP.findall(text)))
        return 0.3 if 3 <= steps <= 6 else 0.1 if steps >= 7 else 0.0
