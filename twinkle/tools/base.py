"""The ``Tool`` interface: one callable capability described by an OpenAI function schema.

Example:
    >>> class Search(Tool):
    ...     def __call__(self, tool_name, arguments):
    ...         return f"Search results for: {arguments.get('query', '')}"
    ...     def tool_info(self):
    ...         return {'type': 'function', 'function': {
    ...             'name': 'search', 'description': 'Search the web.',
    ...             'parameters': {'type': 'object', 'properties': {'query': {'type': 'string'}}}}}
    >>> Search()('search', {'query': 'python'})
    'Search results for: python'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from twinkle.data_format import Tool as ToolInfo


class Tool(ABC):
    """A capability the model can call. ``__call__`` returns the text the model will read.

    Tools may block (HTTP calls to a sandbox, subprocesses), so rollouts run them in worker
    threads and a slow tool never stalls other trajectories. A tool that only computes
    something quick can set ``blocking = False`` to run inline and skip the thread hop
    (about half a millisecond of CPU per call on a busy two-core machine).

    Example:
        >>> class Add(Tool):
        ...     def __call__(self, tool_name, arguments):
        ...         return str(arguments['a'] + arguments['b'])
        ...     def tool_info(self):
        ...         return {'type': 'function', 'function': {'name': 'add', 'parameters': {}}}
        >>> Add()('add', {'a': 1, 'b': 2})
        '3'
    """

    #: False for quick, non-blocking tools that may run on the rollout's event loop.
    blocking: bool = True

    @abstractmethod
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """Execute the tool and return a string result."""
        raise NotImplementedError

    @abstractmethod
    def tool_info(self) -> ToolInfo:
        """Return the OpenAI-compatible tool schema."""
        raise NotImplementedError
