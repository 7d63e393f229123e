"""Model backends for judges: chat messages in, one generation out.

:class:`ModelBackend` is the small protocol :class:`~twinkle.core.judge.JudgeReward` needs.
:class:`APIBackend` implements it over any ``twinkle.protocol.API``; with
``APIBackend.openai(...)`` that is ``twinkle.protocol.OpenAI``, i.e. the official ``openai``
SDK (``AsyncOpenAI`` for async calls) against any OpenAI-compatible endpoint (vLLM, SGLang,
OpenAI). Every call holds a slot of an :class:`~twinkle.core.ratelimit.AdaptiveLimiter`;
retries live here rather than in the client so that each 429 reaches the limiter and
shrinks the concurrency instead of being retried blindly.

Example:
    >>> backend = APIBackend.openai(model="judge", base_url="http://127.0.0.1:9/v1")
    >>> backend.limiter.max_concurrency
    64
    >>> ChatMessage("user", "Rate this.").to_dict()
    {'role': 'user', 'content': 'Rate this.'}
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from twinkle.core.ratelimit import AdaptiveLimiter
from twinkle.data_format import SamplingParams

__all__ = ["APIBackend", "ChatMessage", "GenerationResult", "ModelBackend"]


@dataclass(frozen=True)
class ChatMessage:
    """One chat message sent to a backend.

    Example:
        >>> ChatMessage("system", "You are a strict grader.").role
        'system'
    """

    role: str
    content: str

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class GenerationResult:
    """A backend's answer: the text, token usage when known, and why it stopped.

    Example:
        >>> GenerationResult("Score: 7", completion_tokens=3, finish_reason="stop").text
        'Score: 7'
    """

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@runtime_checkable
class ModelBackend(Protocol):
    """Anything that turns chat messages into one generation.

    Backends may also offer ``async agenerate_chat(messages, sampling_params)``; judges use
    it for batches and otherwise run ``generate_chat`` in a worker thread.

    Example:
        >>> class Fixed:
        ...     def generate_chat(self, messages, sampling_params=None):
        ...         return GenerationResult("Score: 10")
        >>> isinstance(Fixed(), ModelBackend), Fixed().generate_chat([]).text
        (True, 'Score: 10')
    """

    def generate_chat(
        self, messages: Sequence[ChatMessage], sampling_params: SamplingParams | None = None
    ) -> GenerationResult: ...


class APIBackend:
    """A :class:`ModelBackend` over a ``twinkle.protocol.API`` client, rate-limited.

    Args:
        api: the chat client (``twinkle.protocol.OpenAI`` or any ``API``).
        limiter: bounds calls in flight; default ``AdaptiveLimiter(max_concurrency=64)``.
        max_attempts: tries per call for transient failures (429, 5xx, timeouts).
        backoff_s: first back-off; attempt k waits up to ``backoff_s * 2**k`` (full jitter).
        backoff_max_s: cap on one back-off.

    Example:
        >>> from twinkle.protocol.openai import OpenAI
        >>> b = APIBackend(OpenAI("m", base_url="http://127.0.0.1:9/v1", max_retries=0),
        ...                max_attempts=2)
        >>> b.max_attempts
        2
    """

    def __init__(
        self,
        api: Any,
        limiter: AdaptiveLimiter | None = None,
        *,
        max_attempts: int = 4,
        backoff_s: float = 0.25,
        backoff_max_s: float = 8.0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.api = api
        self.limiter = limiter or AdaptiveLimiter()
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s

    @classmethod
    def openai(
        cls,
        model: str,
        base_url: str,
        api_key: str = "EMPTY",
        *,
        timeout_s: float = 60.0,
        max_concurrency: int = 64,
        max_attempts: int = 4,
    ) -> APIBackend:
        """A backend for an OpenAI-compatible endpoint through the official SDK."""
        from twinkle.protocol.openai import OpenAI

        api = OpenAI(
            model,
            api_key=api_key,
            base_url=base_url,
            client_kwargs={"timeout": timeout_s},
            max_retries=0,
        )
        return cls(api, AdaptiveLimiter(max_concurrency), max_attempts=max_attempts)

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _trajectory(messages: Sequence[ChatMessage]) -> dict[str, Any]:
        return {
            "messages": [m.to_dict() if isinstance(m, ChatMessage) else dict(m) for m in messages]
        }

    @staticmethod
    def _result(completion: Any) -> GenerationResult:
        message = completion.messages[0] if completion.messages else {}
        content = message.get("content")
        return GenerationResult(
            text=content if isinstance(content, str) else "",
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            finish_reason=message.get("finish_reason"),
        )

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before retrying after ``exc``, or None if it is not retryable."""
        kind = getattr(exc, "kind", None)
        if kind == "rate_limit":
            self.limiter.on_rate_limited()
        if attempt + 1 >= self.max_attempts or kind not in (
            "rate_limit",
            "server",
            "timeout",
            "connection",
        ):
            return None
        return random.uniform(0.0, min(self.backoff_max_s, self.backoff_s * 2**attempt))

    async def aclose(self) -> None:
        """Close the running loop's HTTP client; call it before a loop you own ends."""
        get_client = getattr(self.api, "async_client", None)
        if get_client is not None:
            await get_client().close()

    # -- calls -----------------------------------------------------------------------------
    async def agenerate_chat(
        self, messages: Sequence[ChatMessage], sampling_params: SamplingParams | None = None
    ) -> GenerationResult:
        """Generate on the running event loop (``AsyncOpenAI`` for OpenAI endpoints)."""
        trajectory = self._trajectory(messages)
        for attempt in range(self.max_attempts):
            async with self.limiter.slot():
                try:
                    completion = await self.api.acomplete(trajectory, sampling_params)
                except Exception as exc:
                    delay = self._retry_delay(exc, attempt)
                    if delay is None:
                        raise
                else:
                    self.limiter.on_success()
                    return self._result(completion)
            await asyncio.sleep(delay)  # outside the slot: a waiting retry holds no capacity
        raise AssertionError("unreachable")

    def generate_chat(
        self, messages: Sequence[ChatMessage], sampling_params: SamplingParams | None = None
    ) -> GenerationResult:
        """Blocking twin of :meth:`agenerate_chat` (the SDK's synchronous client)."""
        trajectory = self._trajectory(messages)
        complete = getattr(self.api, "complete", None)
        for attempt in range(self.max_attempts):
            with self.limiter.sync_slot():
                try:
                    if complete is not None:
                        completion = complete(trajectory, sampling_params)
                    else:
                        completion = asyncio.run(self.api.acomplete(trajectory, sampling_params))
                except Exception as exc:
                    delay = self._retry_delay(exc, attempt)
                    if delay is None:
                        raise
                else:
                    self.limiter.on_success()
                    return self._result(completion)
            time.sleep(delay)
        raise AssertionError("unreachable")
