"""The shared single-turn task environment that the built-in task sets specialise.

A task set is a list of dicts (usually a JSONL file under ``examples/tasks/``). One episode
is one task: ``reset`` shows the prompt, one ``step`` reads the model's answer, scores it
and ends the episode. Steps are pure functions of ``(state, action)``, so the environment
is branchable for free (``pure_step=True``). Prompts are built once per task and shared,
which keeps ``Scorer.score_batch`` cheap. Stdlib only; extractors come from
:mod:`twinkle.core.extraction`.

Every reward signal says in ``metadata['outcome']`` whether the answer was ``correct``,
``wrong``, ``unparsed`` (no answer could be read: a format failure) or ``error`` (the
scorer itself failed), and carries the ``extracted`` answer, so format failures can be told
from reasoning failures.

Example:
    >>> from twinkle.core.environments import MathEnvironment
    >>> env = MathEnvironment(tasks=[{"id": "t1", "question": "1 + 1?", "answer": "2"}])
    >>> state, info = env.reset(options={"task_index": 0})
    >>> env.step(state, Action.from_text("\\\\boxed{2}")).rewards.total
    1.0
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinkle.core.environment import EnvironmentSpec, StepResult
from twinkle.core.signals import RewardFunction, RewardType, Signal, SignalBundle
from twinkle.core.state import Action, Observation, ObservationContent, State, StateMetadata
from twinkle.core.tools import ToolDefinition
from twinkle.data_format import message_text

__all__ = [
    "OUTCOMES",
    "TaskEnvironment",
    "TaskHidden",
    "default_tasks_dir",
    "load_tasks",
    "outcome_signal",
]

#: The closed vocabulary of ``Signal.metadata['outcome']``.
OUTCOMES = ("correct", "wrong", "unparsed", "error")


@dataclass(frozen=True)
class TaskHidden:
    """What the environment knows and the model does not: the task and its reference answer.

    Example:
        >>> h = TaskHidden(task_index=0, task_id="t1", expected_answer="2", task={"answer": 2})
        >>> h == TaskHidden(0, "t1", "2")  # the task dict is not compared
        True
    """

    task_index: int
    task_id: str
    expected_answer: str | None
    task: Mapping[str, Any] = field(default_factory=dict, compare=False)


def default_tasks_dir() -> Path:
    """``examples/tasks`` of the source tree, where the bundled task sets live."""
    return Path(__file__).resolve().parents[3] / "examples" / "tasks"


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL task file; a malformed line raises ``ValueError`` naming the line."""
    tasks = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
            if not isinstance(item, dict):
                raise ValueError(f"{path}:{lineno}: a task must be a JSON object")
            tasks.append(item)
    return tasks


def outcome_signal(
    name: str,
    outcome: str,
    reward: float,
    *,
    extracted: str | None,
    reward_type: RewardType = RewardType.OUTCOME,
    weight: float = 1.0,
    **metadata: Any,
) -> Signal:
    """A signal whose metadata carries the outcome vocabulary and the extracted answer."""
    return Signal(
        name,
        reward_type,
        reward,
        metadata={"outcome": outcome, "extracted": extracted, **metadata},
        weight=weight,
    )


class TaskEnvironment:
    """A single-turn environment over a list of task dicts; subclasses define the scoring.

    Subclasses implement :meth:`format_prompt`, :meth:`expected_answer`, :meth:`extract`
    and :meth:`score` (one call per step, returning the signals). ``reward_functions``
    exposes the same scoring as :class:`RewardFunction` objects for reward probing.

    Args:
        tasks: the task dicts; when None, ``path`` (or the bundled file) is read.
        path: a JSONL file of tasks.
        name: the environment name in its spec.
        system_prompt: an optional system message put before the task prompt.
        limit: keep only the first ``limit`` tasks.
        extra_rewards: more reward functions scored on every step after the built-in ones,
            e.g. a :class:`~twinkle.core.judge.JudgeReward`. One that raises gives an
            ``error`` signal with reward 0.0 instead of failing the step.

    Example:
        >>> class Upper(TaskEnvironment):
        ...     def format_prompt(self, task): return f"Uppercase: {task['word']}"
        ...     def extract(self, action, hidden): return (action.text or "").strip() or None, {}
        ...     def score(self, hidden, extracted, meta):
        ...         ok = extracted == hidden.expected_answer
        ...         return (outcome_signal("upper", "correct" if ok else "wrong", float(ok),
        ...                                extracted=extracted),)
        >>> env = Upper(tasks=[{"word": "hi", "answer": "HI"}])
        >>> state, _ = env.reset(options={"task_index": 0})
        >>> env.step(state, Action.from_text("HI")).rewards.total
        1.0
    """

    default_file = ""
    default_name = "tasks"

    def __init__(
        self,
        tasks: Sequence[Mapping[str, Any]] | None = None,
        *,
        path: str | Path | None = None,
        name: str | None = None,
        system_prompt: str | None = None,
        limit: int | None = None,
        extra_rewards: Sequence[RewardFunction] = (),
    ) -> None:
        self._extra_rewards = tuple(extra_rewards)
        if tasks is None:
            file = Path(path) if path is not None else default_tasks_dir() / self.default_file
            if not file.is_file():
                raise FileNotFoundError(f"task file not found: {file}")
            tasks = load_tasks(file)
        tasks = list(tasks)[:limit] if limit is not None else list(tasks)
        if not tasks:
            raise ValueError(f"{type(self).__name__} needs at least one task")
        self._tasks = [dict(t) for t in tasks]
        self._system_prompt = system_prompt
        self._spec = EnvironmentSpec(
            name=name or self.default_name,
            adapter="tasks",
            max_steps=1,
            observation_type="text",
            action_type="text",
            is_multi_turn=False,
            pure_step=True,
            metadata={"num_tasks": len(self._tasks)},
        )
        # Built once per task and shared by every episode: observations are immutable.
        self._observations = [self._observation(i, t) for i, t in enumerate(self._tasks)]
        self._hidden = [
            TaskHidden(i, str(t.get("id", i)), self.expected_answer(t), t)
            for i, t in enumerate(self._tasks)
        ]

    # -- what subclasses provide -------------------------------------------------------
    def format_prompt(self, task: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def expected_answer(self, task: Mapping[str, Any]) -> str | None:
        answer = task.get("answer")
        return None if answer is None else str(answer)

    def extract(self, action: Action, hidden: TaskHidden) -> tuple[str | None, dict[str, Any]]:
        """The model's answer to ``hidden``'s task (None when there is none) and extraction
        metadata."""
        raise NotImplementedError

    def score(
        self, hidden: TaskHidden, extracted: str | None, meta: dict[str, Any]
    ) -> tuple[Signal, ...]:
        raise NotImplementedError

    def action_from_messages(self, messages: Sequence[Mapping[str, Any]]) -> Action:
        """The action to score for a finished conversation: its final assistant text."""
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "assistant":
                return Action.from_text(message_text(message))
        return Action.from_text("")

    # -- the Environment protocol ------------------------------------------------------
    @property
    def spec(self) -> EnvironmentSpec:
        return self._spec

    @property
    def reward_functions(self) -> tuple[RewardFunction, ...]:
        return (_TaskReward(self), *self._extra_rewards)

    @property
    def available_tools(self) -> tuple[ToolDefinition, ...]:
        return ()

    @property
    def prompts(self) -> dict[str, str]:
        return {}

    @property
    def tasks(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[State[TaskHidden], dict[str, Any]]:
        index = (options or {}).get("task_index")
        if index is None:
            index = random.Random(seed).randrange(len(self._tasks))
        elif not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"task_index must be an int, got {type(index).__name__}")
        elif not 0 <= index < len(self._tasks):
            raise IndexError(f"task_index {index} out of range for {len(self._tasks)} tasks")
        hidden = self._hidden[index]
        state = State(self._observations[index], hidden, StateMetadata(0, uuid.uuid4().hex))
        return state, {"task_index": index, "task_id": hidden.task_id}

    def step(self, state: State[TaskHidden], action: Action) -> StepResult[TaskHidden]:
        extracted, next_state, signals = self._score_step(state, action)
        signals += tuple(
            self._extra_signal(rf, state, action, next_state) for rf in self._extra_rewards
        )
        return self._result(next_state, signals, extracted)

    async def astep(self, state: State[TaskHidden], action: Action) -> StepResult[TaskHidden]:
        """``step`` for event loops: I/O-bound rewards (judges) are awaited concurrently."""
        import asyncio

        if self.blocking_score:
            extracted, next_state, signals = await asyncio.to_thread(
                self._score_step, state, action
            )
        else:
            extracted, next_state, signals = self._score_step(state, action)
        extra = await asyncio.gather(
            *(self._aextra_signal(rf, state, action, next_state) for rf in self._extra_rewards)
        )
        return self._result(next_state, signals + tuple(extra), extracted)

    def compute_rewards(
        self, state: State[TaskHidden], action: Action, next_state: State[TaskHidden]
    ) -> SignalBundle:
        extracted, meta = self.extract(action, state.hidden)
        signals = self.score(state.hidden, extracted, meta)
        extra = tuple(
            self._extra_signal(rf, state, action, next_state) for rf in self._extra_rewards
        )
        return SignalBundle(signals + extra)

    #: True when ``score`` blocks on I/O (runs tests): ``astep`` then runs it in a thread.
    blocking_score = False

    def _score_step(
        self, state: State[TaskHidden], action: Action
    ) -> tuple[str | None, State[TaskHidden], tuple[Signal, ...]]:
        if state.metadata.is_terminal:
            raise ValueError(f"{self._spec.name}: the episode has ended; call reset()")
        extracted, meta = self.extract(action, state.hidden)
        signals = self.score(state.hidden, extracted, meta)
        info = {"task_index": state.hidden.task_index, "extracted_answer": extracted}
        next_state = State(
            state.observation,
            state.hidden,
            StateMetadata(state.metadata.step + 1, state.metadata.episode_id, True, info),
        )
        return extracted, next_state, signals

    @staticmethod
    def _result(
        next_state: State[TaskHidden], signals: tuple[Signal, ...], extracted: str | None
    ) -> StepResult[TaskHidden]:
        return StepResult(
            next_state=next_state,
            rewards=SignalBundle(signals),
            terminated=True,
            extracted_action=extracted,
            resolved_action=extracted,
            info=dict(next_state.metadata.info),
        )

    @staticmethod
    def _failed_reward(rf: RewardFunction, exc: Exception) -> Signal:
        return Signal(
            rf.name,
            rf.reward_type,
            0.0,
            metadata={
                "outcome": "error",
                "extracted": None,
                "error": f"{type(exc).__name__}: {exc}",
            },
        )

    def _extra_signal(
        self, rf: RewardFunction, state: State[Any], action: Action, nxt: State[Any]
    ) -> Signal:
        try:
            return rf.compute(state, action, nxt)
        except Exception as exc:  # noqa: BLE001 - a broken reward is an error signal, not a failed step
            return self._failed_reward(rf, exc)

    async def _aextra_signal(
        self, rf: RewardFunction, state: State[Any], action: Action, nxt: State[Any]
    ) -> Signal:
        import asyncio

        try:
            acompute = getattr(rf, "acompute", None)
            if acompute is not None:
                return await acompute(state, action, nxt)
            return await asyncio.to_thread(rf.compute, state, action, nxt)
        except Exception as exc:  # noqa: BLE001 - as in _extra_signal
            return self._failed_reward(rf, exc)

    # -- helpers -----------------------------------------------------------------------
    def _observation(self, index: int, task: Mapping[str, Any]) -> Observation:
        prompt = self.format_prompt(task)
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
        if self._system_prompt:
            messages = ({"role": "system", "content": self._system_prompt}, *messages)
        content = ObservationContent(text=prompt, data={"task_id": str(task.get("id", index))})
        return Observation(prompt=prompt, messages=messages, task=content, state=content)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._spec.name!r}, tasks={len(self._tasks)})"


class _TaskReward:
    """The environment's scoring as a :class:`RewardFunction` (reward probing)."""

    reward_type = RewardType.OUTCOME

    def __init__(self, env: TaskEnvironment) -> None:
        self._env = env
        self.name = f"{env.spec.name}_reward"

    def compute(
        self, state: State[TaskHidden], action: Action, next_state: State[TaskHidden]
    ) -> Signal:
        return self._env.compute_rewards(state, action, next_state).signals[0]
