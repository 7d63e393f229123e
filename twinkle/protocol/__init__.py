"""Chat-completion clients: the ``API`` contract, ``OpenAI`` and ``ReplayAPI``.

Each client lives in its submodule (``twinkle.protocol.base``, ``twinkle.protocol.openai``,
``twinkle.protocol.replay``); the names are also available here, loaded on first access.
None of these modules imports the ``openai`` SDK until a client makes its first call.

Example:
    >>> from twinkle.protocol import API, OpenAI
    >>> issubclass(OpenAI, API)
    True
"""

from typing import TYPE_CHECKING

from twinkle.utils.lazy import lazy_getattr

if TYPE_CHECKING:
    from twinkle.protocol.base import API, APICallError, Completion
    from twinkle.protocol.openai import OpenAI
    from twinkle.protocol.replay import ReplayAPI

_LAZY = {
    "API": "twinkle.protocol.base",
    "APICallError": "twinkle.protocol.base",
    "Completion": "twinkle.protocol.base",
    "OpenAI": "twinkle.protocol.openai",
    "ReplayAPI": "twinkle.protocol.replay",
}

__all__ = ["API", "APICallError", "Completion", "OpenAI", "ReplayAPI"]


__getattr__ = lazy_getattr(__name__, _LAZY)
