"""Immutable states, observations and actions of the functional environment API.

Every type is a frozen stdlib dataclass: an environment's ``step(state, action)`` takes the
state explicitly, so states must never change behind a caller's back (branching and replay
rely on it). ``State`` is generic over the environment-private ``hidden`` type.

Example:
    >>> obs = Observation(prompt="What is 2 + 2?")
    >>> s = State(observation=obs, hidden={"answer": "4"},
    ...           metadata=StateMetadata(step=0, episode_id="ep-1"))
    >>> s.with_metadata(step=1, is_terminal=True).metadata.step
    1
    >>> Action.from_text("4").is_text_only
    True
    >>> find_ground_truth(s.hidden)
    '4'

Hot paths (an adapter's ``step``) build these with ``_make``: every field positional, no
defaults, no checks, for values the caller has already built; the result is equal to the
public constructor's. The generated ``__init__`` of a frozen dataclass sets each field with
its own ``object.__setattr__`` call, which a per-step State, Observation and StepResult pay
several times over; ``_make`` fills the instance ``__dict__`` directly.

    >>> fast = State._make(obs, {"answer": "4"}, StateMetadata._make(0, "ep-1", False, {}))
    >>> fast == s, repr(fast) == repr(s)
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from twinkle.core.tools import ToolCall, ToolDefinition, ToolResult

__all__ = [
    "GROUND_TRUTH_KEYS",
    "Action",
    "ImageContent",
    "Observation",
    "ObservationContent",
    "ObservationImages",
    "State",
    "StateMetadata",
    "find_ground_truth",
]

HiddenT = TypeVar("HiddenT")

_new = object.__new__

#: Names under which a hidden state may hold the reference answer, in lookup order.
GROUND_TRUTH_KEYS = ("expected_answer", "answer", "ground_truth", "target")


@dataclass(frozen=True)
class StateMetadata:
    """Bookkeeping of a state: step number (0-based), episode id, terminal flag, extra info.

    Example:
        >>> meta = StateMetadata(step=0, episode_id="ep-1")
        >>> meta.is_terminal, meta.info
        (False, {})
    """

    step: int
    episode_id: str
    is_terminal: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def _make(
        cls, step: int, episode_id: str, is_terminal: bool, info: dict[str, Any]
    ) -> StateMetadata:
        """The fast constructor (see the module docstring): ``info`` is kept, not copied."""
        self = _new(cls)
        d = self.__dict__
        d["step"] = step
        d["episode_id"] = episode_id
        d["is_terminal"] = is_terminal
        d["info"] = info
        return self


@dataclass(frozen=True)
class ImageContent:
    """A base64-encoded image; ``source`` is ``"task"`` or ``"state"`` once collected.

    Example:
        >>> ImageContent(data="iVBORw0KGgo=").media_type
        'image/png'
    """

    data: str
    media_type: str = "image/png"
    source: str = ""


@dataclass(frozen=True)
class ObservationImages:
    """Images of an observation split by origin; truthy when there is at least one.

    Example:
        >>> bool(ObservationImages()), len(ObservationImages(task=(ImageContent("AA=="),)).all)
        (False, 1)
    """

    task: tuple[ImageContent, ...] = ()
    state: tuple[ImageContent, ...] = ()

    @property
    def all(self) -> tuple[ImageContent, ...]:
        return self.task + self.state

    def __bool__(self) -> bool:
        return bool(self.task or self.state)


@dataclass(frozen=True)
class ObservationContent:
    """Structured content: the static task (``Observation.task``) or per-turn state.

    ``data`` carries machine-readable state next to the text; tool environments put the
    serialised tool results under ``data['tool_results']`` (see
    :meth:`Observation.with_tool_results`).

    Example:
        >>> content = ObservationContent(text="board: ..X", data={"turn": 3})
        >>> content.data["turn"], content.images
        (3, ())
    """

    text: str = ""
    images: tuple[ImageContent, ...] = ()
    data: dict[str, Any] | None = None

    @classmethod
    def _make(
        cls, text: str, images: tuple[ImageContent, ...], data: dict[str, Any] | None
    ) -> ObservationContent:
        """The fast constructor (see the module docstring)."""
        self = _new(cls)
        d = self.__dict__
        d["text"] = text
        d["images"] = images
        d["data"] = data
        return self


@dataclass(frozen=True)
class Observation:
    """What the model sees: prompt, chat history, tool results and tools, task/state contents.

    Example:
        >>> from twinkle.core.tools import ToolResult
        >>> obs = Observation(prompt="q").with_tool_results(
        ...     (ToolResult(call_id="c1", tool_name="search", output="hit"),), text="hit")
        >>> obs.state.data["tool_results"][0]["output"]
        'hit'
    """

    prompt: str
    messages: tuple[dict[str, Any], ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    available_tools: tuple[ToolDefinition, ...] = ()
    images: tuple[ImageContent, ...] = ()
    task: ObservationContent | None = None
    state: ObservationContent | None = None

    @classmethod
    def _make(
        cls,
        prompt: str,
        messages: tuple[dict[str, Any], ...],
        tool_results: tuple[ToolResult, ...],
        available_tools: tuple[ToolDefinition, ...],
        images: tuple[ImageContent, ...],
        task: ObservationContent | None,
        state: ObservationContent | None,
    ) -> Observation:
        """The fast constructor (see the module docstring)."""
        self = _new(cls)
        d = self.__dict__
        d["prompt"] = prompt
        d["messages"] = messages
        d["tool_results"] = tool_results
        d["available_tools"] = available_tools
        d["images"] = images
        d["task"] = task
        d["state"] = state
        return self

    def get_images(self) -> ObservationImages:
        """All task and state images, each copied with its ``source`` set."""
        task = tuple(replace(i, source="task") for i in self.task.images) if self.task else ()
        state = tuple(replace(i, source="state") for i in self.state.images) if self.state else ()
        return ObservationImages(task=task, state=state)

    def with_tool_results(
        self, results: tuple[ToolResult, ...], *, text: str | None = None
    ) -> Observation:
        """A copy holding ``results`` in ``tool_results`` and in ``state.data['tool_results']``.

        Existing ``state.data`` keys are kept (adapters may add their own); ``text`` replaces
        the state text when given.
        """
        results = tuple(results)
        old = self.state or ObservationContent()
        data = dict(old.data or {})
        data["tool_results"] = [r.to_dict() for r in results]
        state = ObservationContent(
            text=old.text if text is None else text, images=old.images, data=data
        )
        return replace(self, tool_results=results, state=state)

    def strip_images(self) -> Observation:
        """A copy without any image (top level, task and state)."""
        task = replace(self.task, images=()) if self.task else None
        state = replace(self.state, images=()) if self.state else None
        return replace(self, images=(), task=task, state=state)


@dataclass(frozen=True)
class State(Generic[HiddenT]):
    """An environment state: the observation, the env-private hidden part and metadata.

    Example:
        >>> s = State(Observation("2 + 2?"), {"answer": "4"}, StateMetadata(0, "ep"))
        >>> s.with_metadata(is_terminal=True).metadata.is_terminal, s.metadata.is_terminal
        (True, False)
    """

    observation: Observation
    hidden: HiddenT
    metadata: StateMetadata

    @classmethod
    def _make(
        cls, observation: Observation, hidden: HiddenT, metadata: StateMetadata
    ) -> State[HiddenT]:
        """The fast constructor (see the module docstring)."""
        self = _new(cls)
        d = self.__dict__
        d["observation"] = observation
        d["hidden"] = hidden
        d["metadata"] = metadata
        return self

    def with_metadata(self, **changes: Any) -> State[HiddenT]:
        """A new State whose metadata fields are overridden by ``changes``.

        Unknown field names raise ``TypeError``; ``info`` is copied, never shared.
        """
        fields = {
            "step": self.metadata.step,
            "episode_id": self.metadata.episode_id,
            "is_terminal": self.metadata.is_terminal,
            "info": dict(self.metadata.info),
        }
        fields.update(changes)
        return State(self.observation, self.hidden, StateMetadata(**fields))


@dataclass(frozen=True)
class Action:
    """A model turn: optional text and optional tool calls.

    ``Action(text="")`` is legal and still counts as having text.

    Example:
        >>> from twinkle.core.tools import ToolCall
        >>> Action.from_tool_call(ToolCall("c1", "search", {"q": "x"})).has_tool_calls
        True
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def from_text(cls, text: str) -> Action:
        return cls(text=text)

    @classmethod
    def from_tool_call(cls, call: ToolCall) -> Action:
        return cls(text=None, tool_calls=(call,))

    @classmethod
    def from_tool_calls(cls, calls: tuple[ToolCall, ...] | list[ToolCall]) -> Action:
        return cls(text=None, tool_calls=tuple(calls))

    @property
    def is_text_only(self) -> bool:
        return self.text is not None and not self.tool_calls

    @property
    def has_tool_calls(self) -> bool:
        return len(self.tool_calls) > 0

    @property
    def has_text(self) -> bool:
        return self.text is not None


def find_ground_truth(hidden: Any) -> str | None:
    """The reference answer held by a hidden state, or None.

    Looks for :data:`GROUND_TRUTH_KEYS` in order, as dict keys or attributes, and returns
    the first value that is not None as ``str``. One
    lookup shared by the judge and the dataset provider, so both agree.
    """
    if hidden is None:
        return None
    if isinstance(hidden, dict):
        for key in GROUND_TRUTH_KEYS:
            if hidden.get(key) is not None:
                return str(hidden[key])
        return None
    for key in GROUND_TRUTH_KEYS:
        value = getattr(hidden, key, None)
        if value is not None:
            return str(value)
    return None
