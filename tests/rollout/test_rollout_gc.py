"""``relaxed_gc``: the collector's threshold while rollouts run, and what it restores."""

import gc
import threading

import pytest

from twinkle.rollout.base import relaxed_gc


@pytest.fixture(autouse=True)
def default_thresholds():
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield
    gc.set_threshold(*saved)
    (gc.enable if enabled else gc.disable)()


def test_raised_inside_and_restored_after_even_on_error():
    with pytest.raises(KeyError), relaxed_gc(5000):
        assert gc.get_threshold() == (5000, 10, 10)
        raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_and_concurrent_rollouts_restore_once_the_last_leaves():
    inside, leave = threading.Event(), threading.Event()

    def other():
        with relaxed_gc(5000):
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    with relaxed_gc(5000), relaxed_gc(5000):
        assert gc.get_threshold()[0] == 5000
    assert gc.get_threshold()[0] == 5000  # the other thread's rollout still runs
    leave.set()
    thread.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_a_disabled_collector_is_left_alone():
    gc.set_threshold(50_000, 20, 20)
    with relaxed_gc(5000):
        assert gc.get_threshold() == (50_000, 20, 20)
    gc.set_threshold(700, 10, 10)
    gc.disable()
    with relaxed_gc(5000):
        assert gc.get_threshold() == (700, 10, 10)
    assert not gc.isenabled()


def test_a_threshold_changed_meanwhile_is_not_overwritten():
    with relaxed_gc(5000):
        gc.set_threshold(900, 10, 10)
    assert gc.get_threshold() == (900, 10, 10)
