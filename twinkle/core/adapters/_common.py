"""What the registry adapters share: the adapter base and the lazy single-turn environment.

:class:`BaseAdapter` names the adapter's optional packages and probes them with
``importlib.util.find_spec`` (never importing them), so listing adapters costs nothing;
``ensure_installed`` raises :class:`~twinkle.errors.MissingExtraError` when one is missing.

:class:`SingleTurnEnv` is the environment of the extraction-only adapters (reasoning_gym,
huggingface, gem, verifiers): one task per episode, its answer extracted behind cleaners and
scored once. Tasks are fetched lazily and cached, so a task set of a million rows costs
nothing until it is used. ``extracted_action == resolved_action`` (the seed's table).

Example:
    >>> class Echo(SingleTurnEnv):
    ...     adapter_name = "demo"
    ...     def load_task(self, i): return {"prompt": f"Say {i}", "answer": str(i)}
    ...     def score(self, task, extracted, action):
    ...         ok = extracted == task["answer"]
    ...         return (outcome_signal("correctness", "correct" if ok else "wrong", float(ok),
    ...                                extracted=extracted),)
    >>> env = Echo("echo", size=3)
    >>> s, _ = env.reset(options={"task_index": 2})
    >>> r = env.step(s, Action.from_text("<answer>2</answer>"))
    >>> r.rewards.total, r.extracted_action == r.resolved_action == "2"
    (1.0, True)
"""

from __future__ import annotations

import importlib.util
import itertools
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinkle.core.environment import EnvironmentSpec, StepResult
from twinkle.core.environments.base import outcome_signal
from twinkle.core.extraction import (
    AnswerExtractor,
    CleanedExtractor,
    CompositeExtractor,
    LastLineExtractor,
    TagBasedExtractor,
)
from twinkle.core.extraction_base import lowered
from twinkle.core.signals import RewardFunction, RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata
from twinkle.core.tools import ToolDefinition
from twinkle.errors import require

__all__ = [
    "AdapterHidden",
    "BaseAdapter",
    "FastTagExtractor",
    "SingleTurnEnv",
    "answer_function",
    "outcome_signal",
]

EXTRA = "envs"


class BaseAdapter:
    """An adapter with optional packages; subclasses set ``name``, ``requires``, ``extra``.

    Example:
        >>> class Needs(BaseAdapter):
        ...     name, requires = "needs", ("no_such_package_xyz",)
        >>> Needs().installed()
        False
    """

    name = ""
    #: Importable module names the adapter needs (probed, never imported, by ``installed``).
    requires: tuple[str, ...] = ()
    #: The ``twinkle[...]`` extra that installs them.
    extra: str | None = EXTRA
    #: A resolver conflict that keeps the package out of the extra (said in errors).
    conflict: str | None = None
    #: The pip requirement to name when the package is in no extra (``extra = None``).
    package: str | None = None

    def installed(self) -> bool:
        try:
            return all(importlib.util.find_spec(m) is not None for m in self.requires)
        except (ImportError, ValueError):
            return False

    def ensure_installed(self) -> None:
        """Raise :class:`~twinkle.errors.MissingExtraError` unless every package imports."""
        feature = f"the '{self.name}' environment adapter"
        if self.conflict:
            feature += f" ({self.conflict})"
        kw = {"package": self.package} if self.extra is None and self.package else {}
        for module in self.requires:
            require(module, feature, self.extra, **kw)

    def list_environments(self) -> list[str]:
        raise NotImplementedError

    def get_environment(self, name: str, **config: Any) -> Any:
        raise NotImplementedError

    def get_environment_info(self, name: str) -> dict[str, Any]:
        return {"name": name, "adapter": self.name, "extra": self.extra}

    def get_default_system_prompt(self, name: str) -> str | None:
        return None

    def get_native_answer_extractor(self, task: Any = None) -> AnswerExtractor | None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(installed={self.installed()})"


class EpisodeMembers:
    """The Environment protocol's descriptive members for a multi-turn adapter environment:
    its spec (``self._spec``), no extra reward functions (the episode's own reward is in each
    step), no tools and no prompts. A subclass overrides what it does have.

    Example:
        >>> class Env(EpisodeMembers):
        ...     _spec = 'spec'
        >>> Env().spec, Env().reward_functions, Env().available_tools, Env().prompts
        ('spec', (), (), {})
    """

    _spec: EnvironmentSpec

    @property
    def spec(self) -> EnvironmentSpec:
        return self._spec

    @property
    def reward_functions(self) -> tuple:
        return ()

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]:
        return ()

    @property
    def prompts(self) -> dict[str, str]:
        return {}


class FastTagExtractor:
    """:class:`TagBasedExtractor`'s result, found with ``str.find`` when the response has one
    opening tag (the common case); anything else goes to ``TagBasedExtractor`` itself.

    Example:
        >>> FastTagExtractor().extract("x <Answer> 42 </answer> y")[0]
        '42'
    """

    def __init__(self, tag_name: str = "answer") -> None:
        self.tag_name = tag_name
        self._open, self._close = f"<{tag_name.lower()}>", f"</{tag_name.lower()}>"
        self._open_len = len(self._open)
        self._slow = TagBasedExtractor(tag_name)

    def extract(self, response: str) -> tuple[str | None, dict[str, Any]]:
        low = lowered(response) if isinstance(response, str) else None
        if low is not None:
            start = low.find(self._open)
            if start < 0:
                return None, {"found": False, "tag_name": self.tag_name}
            begin = start + len(self._open)
            end = low.find(self._close, begin)
            if end >= 0 and low.find(self._open, begin) < 0:
                return response[begin:end].strip(), {
                    "found": True,
                    "tag_name": self.tag_name,
                    "closed": True,
                    "num_matches": 1,
                }
        return self._slow.extract(response)

    def answer(self, response: str) -> str | None:
        """``extract(response)[0]`` without the metadata. When the response's only two
        ``<`` are this tag's exact lower-case pair, no other tag of any case can exist, so
        the answer is found without lower-casing the whole text."""
        if isinstance(response, str):
            n = response.count("<")
            if n == 0:
                return None
            if n == 2:
                start = response.find(self._open)
                if start >= 0:
                    begin = start + self._open_len
                    end = response.find(self._close, begin)
                    if end >= 0:
                        return response[begin:end].strip()
        return self.extract(response)[0]


def _last_line(text: str) -> str | None:
    """``LastLineExtractor().extract(text)[0]`` without counting the lines."""
    text = text.strip()
    return text[text.rfind("\n") + 1 :].strip() if text else None


def answer_function(extractor: AnswerExtractor) -> Any:
    """A ``text -> answer | None`` function equal to ``extractor.extract(text)[0]``.

    Scoring and stepping read only the answer, so this skips the metadata dicts that
    cleaned and composite extractors build on every call: cleaners, fallbacks and the
    adapters' tag extractors are composed directly. It is built from the extractor's parts
    as they are now; other extractors are called as they are.

    Example:
        >>> ex = CleanedExtractor(CompositeExtractor([FastTagExtractor("action"),
        ...                                           LastLineExtractor()]),
        ...                       pre_cleaners=["strip_thinking_tokens"])
        >>> f = answer_function(ex)
        >>> f("<think>hm</think>go <action>left</action>"), f("so\\n up "), f("")
        ('left', 'up', None)
    """
    if type(extractor) is CleanedExtractor:
        pre, post = tuple(extractor.pre_cleaners), tuple(extractor.post_cleaners)
        inner = extractor.inner
        # A composite inner extractor's parts are tried here, one call level less per text.
        if type(inner) is CompositeExtractor:
            parts = tuple(answer_function(e) for e in inner.extractors)
        else:
            parts = (answer_function(inner),)

        def cleaned(text: str) -> str | None:
            if not isinstance(text, str):
                return None
            for clean in pre:
                text = clean(text)
            for part in parts:
                answer = part(text)
                if answer is not None:
                    for clean in post:
                        answer = clean(answer)
                    return answer
            return None

        return cleaned
    if type(extractor) is CompositeExtractor:
        parts = tuple(answer_function(e) for e in extractor.extractors)

        def first(text: str) -> str | None:
            for part in parts:
                answer = part(text)
                if answer is not None:
                    return answer
            return None

        return first
    if type(extractor) is FastTagExtractor:
        return extractor.answer
    if type(extractor) is LastLineExtractor:
        return lambda text: _last_line(text) if isinstance(text, str) else None
    extract = extractor.extract
    return lambda text: extract(text)[0]


@dataclass(frozen=True)
class AdapterHidden:
    """The hidden part of a single-turn adapter state: the task and its reference answer."""

    task_index: int
    task_id: str
    expected_answer: str | None
    task: Mapping[str, Any] = field(default_factory=dict, compare=False)


class SingleTurnEnv:
    """A lazy single-turn environment; subclasses give ``load_task`` and ``score``.

    ``load_task(i)`` returns a dict with at least ``prompt`` (and ``answer``, ``id`` when
    known); ``score(task, extracted, action)`` returns the signals, ``extracted`` being None
    when extraction failed.

    Args:
        name: the environment name in the spec.
        size: number of tasks.
        system_prompt: put before the task prompt as a system message.
        extractor: the inner answer extractor (default ``<answer>`` tags).
        pre_cleaners, post_cleaners: cleaner names or callables around the extractor
            (defaults: the class's ``default_pre_cleaners`` / ``default_post_cleaners``).
        extra_rewards: more reward functions scored on every step (a judge, say).
    """

    adapter_name = ""
    default_pre_cleaners: tuple[str, ...] = ("strip_special_tokens", "strip_thinking_tokens")
    default_post_cleaners: tuple[str, ...] = ("strip_trailing_punctuation",)

    def __init__(
        self,
        name: str,
        *,
        size: int,
        system_prompt: str | None = None,
        extractor: AnswerExtractor | None = None,
        pre_cleaners: Sequence[Any] | None = None,
        post_cleaners: Sequence[Any] | None = None,
        extra_rewards: Sequence[RewardFunction] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"{name}: an environment needs at least one task (size={size})")
        self._size = size
        self._system_prompt = system_prompt
        self._extra_rewards = tuple(extra_rewards)
        self._inner_extractor = extractor or FastTagExtractor("answer")
        self._answer_for: AnswerExtractor | None = None
        self.set_cleaners(pre_cleaners, post_cleaners)
        self._cache: dict[int, tuple[Observation, AdapterHidden]] = {}
        self._episodes = itertools.count()
        self._id_prefix = uuid.uuid4().hex[:20]
        self._spec = EnvironmentSpec(
            name=name,
            adapter=self.adapter_name,
            max_steps=1,
            observation_type="text",
            action_type="text",
            is_multi_turn=False,
            pure_step=True,
            metadata={"num_tasks": size, **(metadata or {})},
        )

    # -- what subclasses provide -------------------------------------------------------
    def load_task(self, index: int) -> dict[str, Any]:
        raise NotImplementedError

    def score(self, task: Mapping[str, Any], extracted: str | None, action: Action) -> tuple:
        raise NotImplementedError

    # -- cleaning ------------------------------------------------------------------------
    def set_cleaners(
        self, pre: Sequence[Any] | None = None, post: Sequence[Any] | None = None
    ) -> None:
        """Rebuild :attr:`extractor` with these cleaners (None keeps the class default)."""
        self.extractor = CleanedExtractor(
            self._inner_extractor,
            pre_cleaners=self.default_pre_cleaners if pre is None else pre,
            post_cleaners=self.default_post_cleaners if post is None else post,
        )

    # -- the Environment protocol ------------------------------------------------------
    @property
    def spec(self) -> EnvironmentSpec:
        return self._spec

    @property
    def reward_functions(self) -> tuple[RewardFunction, ...]:
        return (_EnvReward(self), *self._extra_rewards)

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]:
        return ()

    @property
    def prompts(self) -> dict[str, str]:
        return {}

    def __len__(self) -> int:
        return self._size

    def task(self, index: int) -> Mapping[str, Any]:
        """The task dict at ``index`` (fetched once)."""
        return self._entry(index)[1].task

    def _entry(self, index: int) -> tuple[Observation, AdapterHidden]:
        entry = self._cache.get(index)
        if entry is None:
            task = self.load_task(index)
            prompt = str(task["prompt"])
            messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
            if self._system_prompt:
                messages = ({"role": "system", "content": self._system_prompt}, *messages)
            task_id = str(task.get("id", index))
            content = ObservationContent(text=prompt, data={"task_id": task_id})
            observation = Observation(prompt, messages, task=content, state=content)
            answer = task.get("answer")
            hidden = AdapterHidden(index, task_id, None if answer is None else str(answer), task)
            entry = self._cache[index] = (observation, hidden)
        return entry

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[AdapterHidden], dict[str, Any]]:
        index = (options or {}).get("task_index")
        if index is None:
            index = random.Random(seed).randrange(self._size)
        elif not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"task_index must be an int, got {type(index).__name__}")
        elif not 0 <= index < self._size:
            raise IndexError(f"task_index {index} out of range for {self._size} tasks")
        observation, hidden = self._entry(index)
        # A per-environment random prefix and a counter: unique like uuid4, without the
        # system call on every reset.
        episode_id = f"{self._id_prefix}{next(self._episodes):012x}"
        state = State(observation, hidden, StateMetadata(0, episode_id))
        return state, {"task_index": index, "task_id": hidden.task_id}

    def step(self, state: State[AdapterHidden], action: Action) -> StepResult[AdapterHidden]:
        if state.metadata.is_terminal:
            raise ValueError(f"{self._spec.name}: the episode has ended; call reset()")
        extracted, signals = self._signals(state.hidden, action)
        info = {"task_index": state.hidden.task_index, "extracted_answer": extracted}
        next_state = State(
            state.observation,
            state.hidden,
            StateMetadata(state.metadata.step + 1, state.metadata.episode_id, True, info),
        )
        signals += tuple(self._extra(rf, state, action, next_state) for rf in self._extra_rewards)
        return StepResult(
            next_state=next_state,
            rewards=SignalBundle(signals),
            terminated=True,
            extracted_action=extracted,
            resolved_action=extracted,
            info=dict(info),
        )

    def compute_rewards(
        self, state: State[AdapterHidden], action: Action, next_state: State[AdapterHidden]
    ) -> SignalBundle:
        signals = self._signals(state.hidden, action)[1]
        extra = tuple(self._extra(rf, state, action, next_state) for rf in self._extra_rewards)
        return SignalBundle(signals + extra)

    def reward_value(self, task: Mapping[str, Any], extracted: str | None) -> float:
        """The total reward of an extracted answer (subclasses may skip building signals)."""
        return SignalBundle(tuple(self.score(task, extracted, Action.from_text("")))).total

    def _answer_function(self) -> Any:
        """:func:`answer_function` of :attr:`extractor`, rebuilt when it is replaced."""
        if self._answer_for is not self.extractor:
            self._answer, self._answer_for = answer_function(self.extractor), self.extractor
        return self._answer

    def extract_answers(self, responses: Sequence[str]) -> list[str | None]:
        """What :attr:`extractor` (cleaners included) reads from each response."""
        answer = self._answer_function()
        return [answer(text) for text in responses]

    def _tasks_for(self, indices: Sequence[int]) -> dict[int, Mapping[str, Any]]:
        """The task of every distinct index, each range-checked once."""
        tasks = {}
        for i in set(indices):
            if not 0 <= i < self._size:
                raise IndexError(f"task_index {i} out of range for {self._size} tasks")
            tasks[i] = self._entry(i)[1].task
        return tasks

    def score_answers(self, indices: Sequence[int], answers: Sequence[str | None]) -> list[float]:
        """The environment's own reward of already-extracted answers (None: unparsed),
        without ``extra_rewards`` (they need the response). A failing verifier gives 0.0."""
        if len(indices) != len(answers):
            raise ValueError("indices and answers must have the same length")
        tasks, reward, out = self._tasks_for(indices), self.reward_value, []
        for i, answer in zip(indices, answers):
            try:
                out.append(reward(tasks[i], answer))
            except Exception:  # noqa: BLE001 - as in step: a crashing verifier scores 0.0
                out.append(0.0)
        return out

    def score_responses(self, indices: Sequence[int], responses: Sequence[str]) -> list[float]:
        """Total rewards of many responses without building states: a trainer's reward
        function. Same numbers as ``reset`` + ``step`` (a failing verifier gives 0.0)."""
        if len(indices) != len(responses):
            raise ValueError("indices and responses must have the same length")
        if self._extra_rewards:  # judges and other rewards need the states
            out = []
            for i, text in zip(indices, responses):
                state, _ = self.reset(options={"task_index": i})
                out.append(self.step(state, Action.from_text(text)).rewards.total)
            return out
        return self.score_answers(indices, self.extract_answers(responses))

    def action_from_messages(self, messages: Sequence[Mapping[str, Any]]) -> Action:
        """The action to score for a finished conversation: its final assistant text."""
        from twinkle.data_format import message_text

        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                return Action.from_text(message_text(message))
        return Action.from_text("")

    # -- helpers -----------------------------------------------------------------------
    def _signals(self, hidden: AdapterHidden, action: Action) -> tuple[str | None, tuple]:
        extracted = self._answer_function()(action.text or "")
        try:
            signals = tuple(self.score(hidden.task, extracted, action))
        except Exception as exc:  # noqa: BLE001 - a verifier that crashes scores 0 as 'error'
            signals = (
                outcome_signal(
                    "correctness", "error", 0.0, extracted=extracted, error=f"{exc!r}"[:500]
                ),
            )
        return extracted, signals

    @staticmethod
    def _extra(rf: RewardFunction, state: State[Any], action: Action, nxt: State[Any]) -> Signal:
        try:
            return rf.compute(state, action, nxt)
        except Exception as exc:  # noqa: BLE001 - a broken extra reward is an error signal
            return Signal(
                rf.name,
                rf.reward_type,
                0.0,
                metadata={"outcome": "error", "extracted": None, "error": repr(exc)[:500]},
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._spec.name!r}, size={self._size})"


class _EnvReward:
    """The environment's own scoring as a :class:`RewardFunction`."""

    reward_type = RewardType.OUTCOME

    def __init__(self, env: SingleTurnEnv) -> None:
        self._env = env
        self.name = f"{env.spec.name}_reward"

    def compute(self, state: State[Any], action: Action, next_state: State[Any]) -> Signal:
        return self._env._signals(state.hidden, action)[1][0]
