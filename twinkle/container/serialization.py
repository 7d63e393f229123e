"""JSON forms of the functional API's types, shared by the container server and client.

Explicit encode/decode pairs (stdlib only) rather than pickle: the wire format must be
readable by any HTTP client and must not execute anything on decode. ``None`` action fields
are omitted and restored as ``None``. A hidden state travels as a plain dict and comes back
to the client as :class:`OpaqueHidden` (read-only attribute access); the server keeps the
real object and finds it again by the state's ``ref``.

Example:
    >>> from twinkle.core.signals import SignalBundle
    >>> decode_bundle(encode_bundle(SignalBundle.single(0.5, name="r"))).total
    0.5
    >>> h = OpaqueHidden({"expected_answer": "4"})
    >>> h.expected_answer
    '4'
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from twinkle.core.environment import EnvironmentSpec, StepResult
from twinkle.core.signals import RewardType, Signal, SignalBundle
from twinkle.core.state import (
    Action,
    ImageContent,
    Observation,
    ObservationContent,
    State,
    StateMetadata,
)
from twinkle.core.tools import ToolCall, ToolDefinition, ToolResult, ToolResultStatus

__all__ = [
    "OpaqueHidden",
    "decode_action",
    "decode_bundle",
    "decode_spec",
    "decode_state",
    "decode_step_result",
    "decode_tool",
    "encode_action",
    "encode_bundle",
    "encode_spec",
    "encode_state",
    "encode_step_result",
    "encode_tool",
    "plain",
]


class OpaqueHidden:
    """A hidden state received over the wire: attribute access to its keys, immutable.

    Example:
        >>> h = OpaqueHidden({"a": 1})
        >>> h.a, h == OpaqueHidden({"a": 1})
        (1, True)
    """

    __slots__ = ("_data", "_ref")

    def __init__(self, data: Mapping[str, Any] | None, ref: str | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))
        object.__setattr__(self, "_ref", ref)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("OpaqueHidden is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("OpaqueHidden is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpaqueHidden) and self._data == other._data

    def __hash__(self) -> int:
        return hash(tuple(sorted(map(str, self._data))))

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def __repr__(self) -> str:
        return f"OpaqueHidden({self._data!r})"


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready data: dataclasses and mappings to dicts, enums to values, others to
    str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 40:
        return repr(value)
    if isinstance(value, OpaqueHidden):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    return str(value)


# -- tools ---------------------------------------------------------------------------------
def encode_tool(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": plain(tool.parameters),
    }


def decode_tool(raw: Mapping[str, Any]) -> ToolDefinition:
    return ToolDefinition(
        raw["name"], raw.get("description", ""), dict(raw.get("parameters") or {})
    )


def _encode_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": plain(call.arguments)}


def _decode_call(raw: Mapping[str, Any]) -> ToolCall:
    return ToolCall(str(raw.get("id", "")), str(raw["name"]), dict(raw.get("arguments") or {}))


def _encode_result(r: ToolResult) -> dict[str, Any]:
    return {
        "call_id": r.call_id,
        "tool_name": r.tool_name,
        "status": r.status.value,
        "output": plain(r.output),
        "error": r.error,
    }


def _decode_result(raw: Mapping[str, Any]) -> ToolResult:
    return ToolResult(
        raw["call_id"],
        raw["tool_name"],
        ToolResultStatus(raw.get("status", "SUCCESS")),
        raw.get("output", ""),
        raw.get("error"),
    )


# -- observations and states ----------------------------------------------------------------
def _encode_image(i: ImageContent) -> dict[str, Any]:
    return {"data": i.data, "media_type": i.media_type, "source": i.source}


def _decode_images(raw: Any) -> tuple[ImageContent, ...]:
    return tuple(
        ImageContent(i["data"], i.get("media_type", "image/png"), i.get("source", ""))
        for i in raw or ()
    )


def _encode_content(c: ObservationContent | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"text": c.text, "images": [_encode_image(i) for i in c.images], "data": plain(c.data)}


def _decode_content(raw: Mapping[str, Any] | None) -> ObservationContent | None:
    if raw is None:
        return None
    return ObservationContent(
        raw.get("text", ""), _decode_images(raw.get("images")), raw.get("data")
    )


def _encode_observation(o: Observation) -> dict[str, Any]:
    return {
        "prompt": o.prompt,
        "messages": plain(list(o.messages)),
        "tool_results": [_encode_result(r) for r in o.tool_results],
        "available_tools": [encode_tool(t) for t in o.available_tools],
        "images": [_encode_image(i) for i in o.images],
        "task": _encode_content(o.task),
        "state": _encode_content(o.state),
    }


def _decode_observation(raw: Mapping[str, Any]) -> Observation:
    return Observation(
        prompt=raw.get("prompt", ""),
        messages=tuple(dict(m) for m in raw.get("messages") or ()),
        tool_results=tuple(_decode_result(r) for r in raw.get("tool_results") or ()),
        available_tools=tuple(decode_tool(t) for t in raw.get("available_tools") or ()),
        images=_decode_images(raw.get("images")),
        task=_decode_content(raw.get("task")),
        state=_decode_content(raw.get("state")),
    )


def encode_state(state: State[Any], ref: str | None = None) -> dict[str, Any]:
    m = state.metadata
    out = {
        "observation": _encode_observation(state.observation),
        "hidden": plain(state.hidden),
        "metadata": {
            "step": m.step,
            "episode_id": m.episode_id,
            "is_terminal": m.is_terminal,
            "info": plain(m.info),
        },
    }
    if ref is None and isinstance(state.hidden, OpaqueHidden):
        ref = state.hidden._ref
    if ref is not None:
        out["ref"] = ref
    return out


def decode_state(raw: Mapping[str, Any], hidden: Any = None) -> State[Any]:
    """A State from its JSON form; ``hidden`` replaces the (opaque) hidden part when given."""
    md = raw["metadata"]
    metadata = StateMetadata(
        int(md["step"]),
        str(md["episode_id"]),
        bool(md.get("is_terminal", False)),
        dict(md.get("info") or {}),
    )
    if hidden is None:
        h = raw.get("hidden")
        hidden = OpaqueHidden(h if isinstance(h, Mapping) else {"value": h}, raw.get("ref"))
    return State(_decode_observation(raw["observation"]), hidden, metadata)


# -- actions, rewards, results, specs -------------------------------------------------------
def encode_action(action: Action) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_calls": [_encode_call(c) for c in action.tool_calls]}
    if action.text is not None:
        out["text"] = action.text
    return out


def decode_action(raw: Mapping[str, Any]) -> Action:
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise TypeError(f"action text must be a string, got {type(text).__name__}")
    return Action(text=text, tool_calls=tuple(_decode_call(c) for c in raw.get("tool_calls") or ()))


def encode_bundle(bundle: SignalBundle) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "reward_type": s.reward_type.name,
            "reward": s.reward,
            "feedback": s.feedback,
            "metadata": plain(s.metadata),
            "weight": s.weight,
        }
        for s in bundle.signals
    ]


def decode_bundle(raw: Any) -> SignalBundle:
    return SignalBundle(
        tuple(
            Signal(
                s["name"],
                RewardType[s.get("reward_type", "OUTCOME")],
                s.get("reward"),
                s.get("feedback"),
                s.get("metadata"),
                float(s.get("weight", 1.0)),
            )
            for s in raw or ()
        )
    )


def encode_step_result(result: StepResult[Any], ref: str | None = None) -> dict[str, Any]:
    out = {
        "next_state": encode_state(result.next_state, ref),
        "rewards": encode_bundle(result.rewards),
        "terminated": result.terminated,
        "truncated": result.truncated,
        "info": plain(result.info),
    }
    for key in ("extracted_action", "resolved_action"):
        if getattr(result, key) is not None:
            out[key] = getattr(result, key)
    return out


def decode_step_result(raw: Mapping[str, Any]) -> StepResult[Any]:
    return StepResult(
        next_state=decode_state(raw["next_state"]),
        rewards=decode_bundle(raw.get("rewards")),
        terminated=bool(raw.get("terminated", False)),
        truncated=bool(raw.get("truncated", False)),
        extracted_action=raw.get("extracted_action"),
        resolved_action=raw.get("resolved_action"),
        info=dict(raw.get("info") or {}),
    )


def encode_spec(spec: EnvironmentSpec) -> dict[str, Any]:
    return plain(spec)


def decode_spec(raw: Mapping[str, Any]) -> EnvironmentSpec:
    known = {f.name for f in dataclasses.fields(EnvironmentSpec)}
    # Data from an older server lacks newer flags (pure_step): the dataclass defaults apply.
    return EnvironmentSpec(**{k: v for k, v in raw.items() if k in known})
