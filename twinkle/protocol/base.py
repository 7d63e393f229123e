"""The ``API`` contract: a trajectory and sampling parameters in, assistant message(s) out.

``__call__`` is the synchronous surface, for callers without an event loop. Rollouts use
``acomplete``, a coroutine that also reports token usage and the number of attempts; the base
class runs ``__call__`` in a worker thread for it, so any synchronous subclass works with the
async rollout, and ``OpenAI`` overrides it with the SDK's native async client.

Errors, one family, raised after any retries::

    APICallError               the chat call failed; ``kind`` says how
        kind='rate_limit'      HTTP 429
        kind='server'          HTTP 5xx (and 408/409, which servers use for overload)
        kind='timeout'         no answer within the client's timeout
        kind='connection'      refused or dropped connection
        kind='client'          any other HTTP 4xx (bad request, auth): never retried
        kind='invalid_response' a reply that is not a usable chat completion

Example:
    >>> class Constant(API):
    ...     def __call__(self, trajectory, sampling_params, **kwargs):
    ...         return {'role': 'assistant', 'content': 'hi', 'finish_reason': 'stop'}
    >>> import asyncio
    >>> asyncio.run(Constant().acomplete({'messages': []}, None)).messages[0]['content']
    'hi'
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from twinkle.data_format import Message, SamplingParams, Trajectory, normalize_tool_calls
from twinkle.errors import ProtocolError

#: Kinds of ``APICallError`` that are worth retrying.
TRANSIENT_KINDS = frozenset({"rate_limit", "server", "timeout", "connection"})


class APICallError(ProtocolError, RuntimeError):
    """A chat call that failed, after ``attempts`` tries.

    Example:
        >>> str(APICallError('rate_limit', 'slow down', status=429, attempts=3))
        'rate_limit (HTTP 429) after 3 attempts: slow down'
    """

    def __init__(
        self, kind: str, message: str, *, status: int | None = None, attempts: int = 1
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.attempts = attempts

    def __str__(self) -> str:
        http = f" (HTTP {self.status})" if self.status is not None else ""
        plural = "s" if self.attempts != 1 else ""
        return f"{self.kind}{http} after {self.attempts} attempt{plural}: {self.message}"

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT_KINDS


@dataclass(slots=True)
class Completion:
    """One answered chat call: a message per choice, token usage and attempts made."""

    messages: list[Message]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    attempts: int = 1


def request_message(message: Message, keep_reasoning: bool = False) -> dict[str, Any]:
    """A history message as a chat request wants it.

    Keeps role, content, name, tool calls (normalised, arguments as JSON strings) and
    ``tool_call_id``; drops bookkeeping such as ``finish_reason``, and drops
    ``reasoning_content`` unless ``keep_reasoning``, so earlier thoughts are not re-fed.
    """
    out: dict[str, Any] = {"role": message.get("role"), "content": message.get("content")}
    if out["content"] is None and out["role"] != "assistant":
        out["content"] = ""
    calls = normalize_tool_calls(message)
    if calls:
        out["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {
                    "name": (call.get("function") or {}).get("name"),
                    "arguments": _arguments_json((call.get("function") or {}).get("arguments")),
                },
            }
            for call in calls
        ]
    if message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    # OpenAI's schema has no ``name`` on tool messages; strict servers reject it.
    if message.get("name") is not None and out["role"] != "tool":
        out["name"] = message["name"]
    if keep_reasoning and message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    return out


def _arguments_json(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


class API(ABC):
    """Abstract chat client: Trajectory + SamplingParams -> assistant Message(s).

    Example:
        >>> class Echo(API):
        ...     def __call__(self, trajectory, sampling_params, **kwargs):
        ...         return {'role': 'assistant', 'content': trajectory['messages'][-1]['content']}
        >>> Echo()({'messages': [{'role': 'user', 'content': 'ping'}]}, SamplingParams())
        {'role': 'assistant', 'content': 'ping'}
    """

    @abstractmethod
    def __call__(
        self, trajectory: Trajectory, sampling_params: SamplingParams, **kwargs: Any
    ) -> Message | list[Message]:
        raise NotImplementedError()

    async def acomplete(
        self, trajectory: Trajectory, sampling_params: SamplingParams, **kwargs: Any
    ) -> Completion:
        """Answer asynchronously; by default ``__call__`` runs in a worker thread."""
        reply = await asyncio.to_thread(self, trajectory, sampling_params, **kwargs)
        return Completion(messages=list(reply) if isinstance(reply, list) else [reply])

    async def acall(
        self, trajectory: Trajectory, sampling_params: SamplingParams, **kwargs: Any
    ) -> Message | list[Message]:
        """Async twin of ``__call__``: a message, or a list when ``num_samples > 1``."""
        completion = await self.acomplete(trajectory, sampling_params, **kwargs)
        if sampling_params is not None and sampling_params.num_samples > 1:
            return completion.messages
        return completion.messages[0]
