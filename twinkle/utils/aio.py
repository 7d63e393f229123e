"""Running a coroutine from synchronous code.

Stdlib only, so any layer (rollouts, judges, scorers) can import it without pulling in the
rest of Twinkle.

Example:
    >>> import asyncio
    >>> async def double(x):
    ...     await asyncio.sleep(0)
    ...     return 2 * x
    >>> run_sync(double(21))
    42
    >>> async def caller():  # already inside a running loop
    ...     return run_sync(double(4))
    >>> asyncio.run(caller())
    8
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion from synchronous code and return its result.

    With no loop running, ``asyncio.run``; inside a running loop (a notebook, an async
    caller) the coroutine gets its own loop in a worker thread rather than failing, and
    the calling thread blocks until it finishes.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # asyncio.run refuses to nest in a thread that runs a loop; a fresh thread has none.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
