"""VersionedSlot: versions only grow; wait_for returns at the version, at a timeout, on
close and when the caller's liveness check fails; a waiter in another thread wakes."""

from __future__ import annotations

import threading
import time

from skurl.weights.slot import VersionedSlot


def test_only_newer_versions_are_taken() -> None:
    slot: VersionedSlot[str] = VersionedSlot()
    assert slot.held() is None and slot.version is None
    assert slot.offer(3, "a")
    assert not slot.offer(3, "b") and not slot.offer(2, "c")
    assert slot.held() == (3, "a")
    assert slot.offer(7, "d") and slot.version == 7


def test_wait_for_returns_the_newest_at_or_above_the_version() -> None:
    slot: VersionedSlot[str] = VersionedSlot()
    slot.offer(5, "x")
    assert slot.wait_for(4, timeout=0) == (5, "x")
    assert slot.wait_for(6, timeout=0.05) is None


def test_a_waiter_wakes_when_the_version_arrives() -> None:
    slot: VersionedSlot[int] = VersionedSlot()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(slot.wait_for(2, timeout=10)))
    waiter.start()
    slot.offer(1, 10)
    time.sleep(0.05)
    assert not got  # version 1 is not enough
    slot.offer(2, 20)
    waiter.join(timeout=10)
    assert got == [(2, 20)]


def test_close_and_a_dead_caller_end_the_wait() -> None:
    slot: VersionedSlot[int] = VersionedSlot()
    assert slot.wait_for(1, timeout=None, alive=lambda: False, poll_s=0.01) is None
    done: list[object] = []
    waiter = threading.Thread(target=lambda: done.append(slot.wait_for(1, timeout=None)))
    waiter.start()
    slot.close()
    waiter.join(timeout=10)
    assert done == [None] and slot.closed


def test_nan_timeouts_are_refused_and_huge_ones_do_not_overflow() -> None:
    import math

    import pytest

    slot: VersionedSlot[int] = VersionedSlot()
    with pytest.raises(ValueError, match="NaN"):
        slot.wait_for(1, timeout=math.nan)
    for timeout in (1e12, math.inf):  # no OverflowError; the waiter still notices its caller
        answers = iter([True, False])
        assert slot.wait_for(1, timeout=timeout, alive=answers.__next__, poll_s=0.01) is None
