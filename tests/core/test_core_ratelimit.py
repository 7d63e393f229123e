"""AdaptiveLimiter: bounds, AIMD adaptation, cancellation, threads and loops together."""

import asyncio
import threading

import pytest

from twinkle.core.ratelimit import AdaptiveLimiter


def test_validation():
    for kwargs in (
        {"max_concurrency": 0},
        {"min_concurrency": 0},
        {"max_concurrency": 2, "min_concurrency": 3},
        {"decrease": 1.0},
        {"increase": 0},
    ):
        with pytest.raises(ValueError):
            AdaptiveLimiter(**kwargs)


def test_aimd():
    lim = AdaptiveLimiter(max_concurrency=16, min_concurrency=2, cooldown_s=3600)
    assert lim.limit == 16.0
    lim.on_success()
    assert lim.limit == 16.0  # never above the bound
    lim.on_rate_limited()
    lim.on_rate_limited()  # within the cooldown: one burst, one cut
    assert lim.limit == 8.0 and lim.rate_limited == 2
    for _ in range(5):
        lim.on_rate_limited(force=True)
    assert lim.limit == 2.0  # never below the floor
    for _ in range(4):
        lim.on_success()
    assert 3.0 < lim.limit < 4.0  # about +1 per window of `limit` successes


async def test_bound_is_respected_and_order_kept():
    lim = AdaptiveLimiter(max_concurrency=3)
    active, peak, order = 0, 0, []

    async def work(i):
        nonlocal active, peak
        async with lim.slot():
            active += 1
            peak = max(peak, active)
            order.append(i)
            await asyncio.sleep(0.001)
            active -= 1

    await asyncio.gather(*(work(i) for i in range(20)))
    assert peak == 3 and lim.peak_in_flight == 3 and lim.in_flight == 0
    assert order == list(range(20))  # FIFO hand-over


async def test_shrinking_limit_throttles_new_work():
    lim = AdaptiveLimiter(max_concurrency=4, cooldown_s=0)
    lim.on_rate_limited()
    lim.on_rate_limited()
    assert lim.limit == 1.0
    active, peak = 0, 0

    async def work():
        nonlocal active, peak
        async with lim.slot():
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0)
            active -= 1

    await asyncio.gather(*(work() for _ in range(10)))
    assert peak == 1


async def test_cancelled_waiters_do_not_leak_slots():
    lim = AdaptiveLimiter(max_concurrency=1)
    await lim.acquire()
    waiters = [asyncio.ensure_future(lim.acquire()) for _ in range(5)]
    await asyncio.sleep(0)
    waiters[0].cancel()
    waiters[2].cancel()
    lim.release()
    for _ in range(5):
        await asyncio.sleep(0)
    done = [w for w in waiters if w.done() and not w.cancelled()]
    assert len(done) == 1 and lim.in_flight == 1
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    lim.release()
    for _ in range(5):
        await asyncio.sleep(0)
    assert lim.in_flight == 0
    await asyncio.wait_for(lim.acquire(), 5)  # the slot is free again
    lim.release()


def test_threads_and_event_loops_share_one_bound():
    lim = AdaptiveLimiter(max_concurrency=2)
    active, peak, lock = 0, 0, threading.Lock()

    def enter():
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)

    def leave():
        nonlocal active
        with lock:
            active -= 1

    def thread_work():
        for _ in range(20):
            with lim.sync_slot():
                enter()
                threading.Event().wait(0.0005)
                leave()

    def loop_work():
        async def one():
            async with lim.slot():
                enter()
                await asyncio.sleep(0.0005)
                leave()

        async def main():
            await asyncio.gather(*(one() for _ in range(20)))

        asyncio.run(main())

    threads = [threading.Thread(target=f) for f in (thread_work, thread_work, loop_work, loop_work)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak <= 2 and lim.in_flight == 0
    assert lim.acquire_sync(timeout=1)
    assert lim.acquire_sync(timeout=1)
    assert not lim.acquire_sync(timeout=0.01)  # full: times out instead of hanging
    lim.release()
    lim.release()
