"""``ToolManager``: a registry of tools and a dispatcher for the model's tool calls.

Dispatch never raises: an unknown tool, broken arguments or a tool that throws all come
back as an ``Error: ...`` string, which the rollout hands to the model as the tool's
output so it can recover (bounded by ``max_turns``). The exact strings:

============================  ==============================================================
case                          result
============================  ==============================================================
call is not a dict            ``Error: tool_call must be an object, got <Type>.``
``function`` not a dict       ``Error: tool_call missing "function" object.``
no name                       ``Error: tool_call missing "function.name".``
unknown tool                  ``Error: unknown tool 'x'. Available: a, b.`` (``(none)``)
invalid JSON arguments        ``Error: invalid JSON in arguments: <reason>``
other argument types          ``Error: "arguments" must be a JSON string or object, got <Type>.``
the tool raises               ``Error: tool 'x' raised <ExcType>: <message>``
============================  ==============================================================

One exception is let through: ``twinkle.errors.EnvironmentFailure``, raised when the
environment behind a tool died (its sandbox gone, its server unreachable). That is no
result for the model; the rollout ends the trajectory with ``stop_reason='error'``.

``None`` or a blank string as ``arguments`` means ``{}``.

Example:
    >>> from twinkle.tools.base import Tool
    >>> class Upper(Tool):
    ...     def __call__(self, tool_name, arguments):
    ...         return arguments['text'].upper()
    ...     def tool_info(self):
    ...         return {'type': 'function', 'function': {'name': 'upper', 'parameters': {}}}
    >>> manager = ToolManager([Upper()])
    >>> call = {'name': 'upper', 'arguments': '{"text": "ok"}'}
    >>> manager({'id': 'c1', 'type': 'function', 'function': call})
    'OK'
    >>> manager({'function': {'name': 'nope', 'arguments': '{}'}})
    "Error: unknown tool 'nope'. Available: upper."
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from twinkle.data_format import Tool as ToolInfo
from twinkle.errors import EnvironmentFailure


def _extract_name(info: Any) -> str | None:
    """``info['function']['name']`` when it is a non-empty string, else None."""
    if not isinstance(info, Mapping):
        return None
    function = info.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) and name else None


def _tool_name(tool: Any) -> str:
    info = tool.tool_info() if callable(getattr(tool, "tool_info", None)) else None
    name = _extract_name(info)
    if name is None:
        raise ValueError(
            f'tool {type(tool).__name__} must expose a non-empty tool_info()["function"]["name"]'
        )
    return name


def parse_arguments(arguments: Any) -> Any:
    """Decode a tool call's ``arguments``; raises ValueError with the message the model sees."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        # json, not orjson: orjson turns integers past 64 bits into floats.
        if not arguments.strip():
            return {}
        try:
            return json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Error: invalid JSON in arguments: {exc}") from exc
    if isinstance(arguments, Mapping):
        return arguments
    raise ValueError(
        f'Error: "arguments" must be a JSON string or object, got {type(arguments).__name__}.'
    )


class ToolManager:
    """Registry and dispatcher of ``Tool`` objects, keyed by their function name.

    Args:
        tools: a list of tools (names taken from ``tool_info()``), a ``{name: tool}`` dict,
            or None for an empty manager.

    Example:
        >>> manager = ToolManager()
        >>> manager.names()
        []
        >>> manager({'function': {'name': 'search', 'arguments': '{}'}})
        "Error: unknown tool 'search'. Available: (none)."
    """

    def __init__(self, tools: Mapping[str, Any] | Iterable[Any] | None = None) -> None:
        self._tools: dict[str, Any] = {}
        if tools is None:
            return
        if isinstance(tools, Mapping):
            self._tools = dict(tools)
        elif isinstance(tools, (list, tuple)):
            for tool in tools:
                self.register(tool)
        else:
            raise TypeError(
                f"ToolManager expects dict | Iterable[Tool] | None; got {type(tools).__name__}"
            )

    def register(self, tool: Any) -> None:
        """Add ``tool`` under its ``tool_info()`` name, replacing any tool of that name."""
        self._tools[_tool_name(tool)] = tool

    def unregister(self, name: str) -> Any | None:
        """Remove and return the tool called ``name`` (None when there is none)."""
        return self._tools.pop(name, None)

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._tools)

    def copy(self) -> ToolManager:
        """A new manager over the same tool objects (a shallow copy)."""
        return ToolManager(dict(self._tools))

    def tool_infos(self) -> list[ToolInfo]:
        """Every tool's schema, for the ``tools`` field of a chat request."""
        return [tool.tool_info() for tool in self._tools.values()]

    def is_blocking(self, tool_call: Any) -> bool:
        """Whether dispatching ``tool_call`` may block (run it in a worker thread).

        True unless the tool declares ``blocking = False``; a call that names no registered
        tool is answered at once with an error, so it is not blocking.
        """
        function = (
            tool_call.get("function")
            if type(tool_call) is dict or isinstance(tool_call, Mapping)
            else None
        )
        name = (
            function.get("name")
            if type(function) is dict or isinstance(function, Mapping)
            else None
        )
        tool = self._tools.get(name) if isinstance(name, str) else None
        return tool is not None and bool(getattr(tool, "blocking", True))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __call__(self, tool_call: Any) -> str:
        """Run one OpenAI-shaped tool call; raises only ``EnvironmentFailure`` (see the module
        docstring)."""
        # type() first: isinstance against the Mapping ABC is slow, and calls are dicts.
        if type(tool_call) is not dict and not isinstance(tool_call, Mapping):
            return f"Error: tool_call must be an object, got {type(tool_call).__name__}."
        function = tool_call.get("function")
        if type(function) is not dict and not isinstance(function, Mapping):
            return 'Error: tool_call missing "function" object.'
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return 'Error: tool_call missing "function.name".'
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "(none)"
            return f"Error: unknown tool {name!r}. Available: {available}."
        try:
            arguments = parse_arguments(function.get("arguments"))
        except ValueError as exc:
            return str(exc)
        try:
            return str(tool(name, arguments))
        except EnvironmentFailure:
            raise  # the environment died: no tool result, the rollout ends the trajectory
        except Exception as exc:  # noqa: BLE001 - a failing tool is reported to the model, not raised
            return f"Error: tool {name!r} raised {type(exc).__name__}: {exc}"
