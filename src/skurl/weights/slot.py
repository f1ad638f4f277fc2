"""The newest value of a growing version, and waiting for a version: the one
condition-guarded slot under every weight backend (in-process, Ray, the gRPC service and
its subscriber, the Redis subscriber, the collector server), so that "versions only grow"
and "wait until version V" are written and tested once.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class VersionedSlot(Generic[T]):
    def __init__(self) -> None:
        self._held: tuple[int, T] | None = None
        self._cond = threading.Condition()
        self._closed = False

    def offer(self, version: int, value: T) -> bool:
        """Hold `value` as `version` when that is newer than the held one (True), else
        keep what is held (False). Waiters wake."""
        with self._cond:
            if self._held is not None and version <= self._held[0]:
                return False
            self._held = (version, value)
            self._cond.notify_all()
            return True

    def held(self) -> tuple[int, T] | None:
        with self._cond:
            return self._held

    @property
    def version(self) -> int | None:
        held = self.held()
        return None if held is None else held[0]

    def wait_for(self, version: int, timeout: float | None = None, *,
                 alive: Callable[[], bool] | None = None, poll_s: float = 0.25) -> tuple[int, T] | None:
        """The held (version, value) once its version is >= `version`; None when `timeout`
        seconds pass (None: no limit), the slot is closed, or `alive()` (asked every
        `poll_s` seconds) turns False. A NaN timeout is a ValueError: `max(nan, 0)` is NaN
        and a NaN deadline never passes (issue 42, defect 1)."""
        if timeout is not None and math.isnan(timeout):
            raise ValueError("wait_for: timeout is NaN, expected seconds >= 0 or None")
        deadline = None if timeout is None or math.isinf(timeout) else time.monotonic() + timeout
        with self._cond:
            while self._held is None or self._held[0] < version:
                left = None if deadline is None else deadline - time.monotonic()
                if self._closed or (left is not None and left <= 0) or (alive is not None and not alive()):
                    return None
                # Never a single wait beyond poll_s: a huge `left` overflows the lock's timeout
                # (OverflowError: timestamp out of range), and a closed slot is noticed anyway.
                self._cond.wait(poll_s if left is None else min(left, poll_s))
            return self._held

    def close(self) -> None:
        """Wake every waiter for good (their wait_for returns None)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
