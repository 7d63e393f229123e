"""Tools the model can call during a rollout, and the dispatcher that routes its calls.

Example:
    >>> from twinkle.tools import Tool, ToolManager
    >>> class Echo(Tool):
    ...     def __call__(self, tool_name, arguments):
    ...         return arguments.get('text', '')
    ...     def tool_info(self):
    ...         return {'type': 'function', 'function': {'name': 'echo', 'parameters': {}}}
    >>> ToolManager([Echo()])({'function': {'name': 'echo', 'arguments': '{"text": "hi"}'}})
    'hi'
"""

from twinkle.tools.base import Tool
from twinkle.tools.tool_manager import ToolManager

__all__ = ["Tool", "ToolManager"]
