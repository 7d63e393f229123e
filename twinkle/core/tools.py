"""Tool types of the functional environment API: calls, results and definitions.

Plain frozen dataclasses (stdlib only) so that states holding them stay hashable-free,
immutable and cheap to copy into forked processes.

Example:
    >>> call = ToolCall(id="call_1", name="search", arguments={"query": "python"})
    >>> result = ToolResult(call_id=call.id, tool_name=call.name,
    ...                     status=ToolResultStatus.SUCCESS, output="3 hits")
    >>> result.to_dict()["status"]
    'SUCCESS'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["ToolCall", "ToolDefinition", "ToolResult", "ToolResultStatus"]


class ToolResultStatus(Enum):
    """Outcome of one tool call.

    Example:
        >>> ToolResultStatus("TIMEOUT") is ToolResultStatus.TIMEOUT
        True
    """

    SUCCESS = "SUCCESS"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"
    NOT_FOUND = "NOT_FOUND"


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for.

    Example:
        >>> ToolCall.from_openai({"id": "c", "function": {"name": "f", "arguments": '{"x": 1}'}})
        ToolCall(id='c', name='f', arguments={'x': 1})
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_openai(cls, call: dict[str, Any]) -> ToolCall:
        """Build from an OpenAI ``tool_calls`` item; JSON-string arguments are decoded."""
        fn = call.get("function") or {}
        args = fn.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                args = {"_raw": args}
        if not isinstance(args, dict):
            args = {"_raw": args}
        return cls(id=str(call.get("id") or ""), name=str(fn.get("name") or ""), arguments=args)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` item form (arguments as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass(frozen=True)
class ToolResult:
    """What an environment answered to one :class:`ToolCall`.

    Example:
        >>> r = ToolResult("c1", "search", ToolResultStatus.ERROR, error="no index")
        >>> r.to_dict()["status"], r.to_dict()["error"]
        ('ERROR', 'no index')
    """

    call_id: str
    tool_name: str
    status: ToolResultStatus = ToolResultStatus.SUCCESS
    output: Any = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The serialised form stored in ``observation.state.data['tool_results']``."""
        return {
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "status": self.status.value,
            "output": self.output,
            "error": self.error,
        }


@dataclass(frozen=True)
class ToolDefinition:
    """A tool the model may call: name, description and a JSON-schema for its arguments.

    Example:
        >>> ToolDefinition("search", "Web search").to_openai()["function"]["name"]
        'search'
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``tools`` item form."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }
