"""A bounded, adaptive concurrency limiter (AIMD) for calls to model endpoints.

The limit starts at ``max_concurrency`` (a healthy endpoint is never slowed down), grows
additively after successes and is cut multiplicatively when the endpoint answers 429, at
most once per ``cooldown_s`` so one burst of rejections halves it once, like TCP's
congestion window. Slots are handed to waiters in arrival order.

Stdlib only. The state sits behind a ``threading.Lock`` and waiters are either asyncio
futures (woken with ``call_soon_threadsafe``) or ``threading.Event`` s, so one limiter
serves coroutines on any event loop and plain threads at the same time: a judge shared by
a synchronous scorer and an async batch still keeps one bound on its endpoint.

Example:
    >>> import asyncio
    >>> limiter = AdaptiveLimiter(max_concurrency=4)
    >>> async def call():
    ...     async with limiter.slot():
    ...         return limiter.in_flight
    >>> asyncio.run(call())
    1
    >>> limiter.on_rate_limited(); limiter.limit
    2.0
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

__all__ = ["AdaptiveLimiter"]


class _Waiter:
    __slots__ = ("event", "future", "handed", "loop")

    def __init__(self, loop=None, future=None, event=None) -> None:
        self.loop = loop
        self.future = future
        self.event = event
        self.handed = False


class AdaptiveLimiter:
    """At most ``limit`` calls in flight; ``limit`` adapts to 429s between the two bounds.

    Args:
        max_concurrency: upper bound on calls in flight (and the starting limit).
        min_concurrency: the limit never drops below this.
        increase: additive step per *window* of successes (``increase / limit`` per call).
        decrease: multiplicative factor applied on a 429 (0 < decrease < 1).
        cooldown_s: minimum time between two decreases.

    Example:
        >>> lim = AdaptiveLimiter(max_concurrency=8, min_concurrency=2)
        >>> for _ in range(3): lim.on_rate_limited(force=True)
        >>> lim.limit
        2.0
    """

    def __init__(
        self,
        max_concurrency: int = 64,
        min_concurrency: int = 1,
        *,
        increase: float = 1.0,
        decrease: float = 0.5,
        cooldown_s: float = 0.5,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if not 1 <= min_concurrency <= max_concurrency:
            raise ValueError(
                f"min_concurrency must be in [1, max_concurrency={max_concurrency}], "
                f"got {min_concurrency}"
            )
        if not 0 < decrease < 1:
            raise ValueError(f"decrease must be in (0, 1), got {decrease}")
        if increase <= 0:
            raise ValueError(f"increase must be > 0, got {increase}")
        self.max_concurrency = max_concurrency
        self.min_concurrency = min_concurrency
        self.increase = increase
        self.decrease = decrease
        self.cooldown_s = cooldown_s
        self.limit = float(max_concurrency)
        self.in_flight = 0
        self.peak_in_flight = 0
        self.rate_limited = 0
        self._last_decrease = float("-inf")
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()

    # -- feedback --------------------------------------------------------------------------
    def on_success(self) -> None:
        """Additive increase: about ``increase`` more slots per ``limit`` successful calls."""
        with self._lock:
            if self.limit < self.max_concurrency:
                self.limit = min(
                    float(self.max_concurrency), self.limit + self.increase / self.limit
                )
                self._wake()

    def on_rate_limited(self, force: bool = False) -> None:
        """Multiplicative decrease after a 429 (once per cooldown unless ``force``)."""
        with self._lock:
            self.rate_limited += 1
            now = time.monotonic()
            if force or now - self._last_decrease >= self.cooldown_s:
                self.limit = max(float(self.min_concurrency), self.limit * self.decrease)
                self._last_decrease = now

    # -- slots -----------------------------------------------------------------------------
    def _free(self) -> bool:
        return self.in_flight < max(int(self.limit), self.min_concurrency)

    def _take(self) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _wake(self) -> None:
        """Hand free slots to waiters in order (lock held)."""
        while self._waiters and self._free():
            waiter = self._waiters.popleft()
            if waiter.future is not None and waiter.future.cancelled():
                continue  # gave up already; its coroutine only has to notice
            self._take()
            waiter.handed = True
            if waiter.event is not None:
                waiter.event.set()
            else:
                waiter.loop.call_soon_threadsafe(self._resolve, waiter)

    def _resolve(self, waiter: _Waiter) -> None:
        # Runs on the waiter's loop; a waiter cancelled meanwhile gives its slot back.
        if waiter.future.cancelled():
            self.release()
        else:
            waiter.future.set_result(None)

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self._free():
                self._take()
                return
            waiter = _Waiter(loop=loop, future=loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if not waiter.handed:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                    raise
            # Handed a slot: _resolve gives it back if the future was cancelled first,
            # otherwise the result landed before the cancellation and we give it back here.
            if not waiter.future.cancelled():
                self.release()
            raise

    def acquire_sync(self, timeout: float | None = None) -> bool:
        """Blocking acquire for threads; False when ``timeout`` passed without a slot."""
        with self._lock:
            if not self._waiters and self._free():
                self._take()
                return True
            waiter = _Waiter(event=threading.Event())
            self._waiters.append(waiter)
        if waiter.event.wait(timeout):
            return True
        with self._lock:
            if not waiter.handed:
                self._waiters.remove(waiter)
                return False
        return True

    def release(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self._wake()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """``async with limiter.slot():`` holds one slot for the body."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    @contextmanager
    def sync_slot(self) -> Iterator[None]:
        """``with limiter.sync_slot():`` the blocking twin of :meth:`slot`."""
        self.acquire_sync()
        try:
            yield
        finally:
            self.release()

    def __repr__(self) -> str:
        return (
            f"AdaptiveLimiter(limit={self.limit:.1f}, in_flight={self.in_flight}, "
            f"bounds=[{self.min_concurrency}, {self.max_concurrency}])"
        )
