"""Two synchronisation primitives for the hot path, cheaper than the stdlib's defaults.

`threading.Event` and `queue.Queue` are built on `threading.Condition`, written
in Python: creating an Event costs ~1.9 µs and a Queue put+get ~1.1 µs, several
times per call. A bare lock used as a latch, and the C `queue.SimpleQueue`,
do the same jobs for a few hundredths of that.

A lock a caller's thread may take is entered as `with lock:`, never through a
`threading.Condition` (`with cond:`): the condition's `__enter__` is Python
code, and a signal's exception (Ctrl-C) raised as its inner `acquire`
returns would leave the lock held for good; the lock's own `__enter__` is C,
with no point between taking the lock and the `with` owning it. Wait on the
condition made over that lock.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any

__all__ = ["Latch", "simple_inbox"]


class Latch:
    """A one-way flag: `set()` once, then `is_set()` is true and `wait()` returns at once.

    A held lock that `set()` releases; waiters acquire and release it in turn.
    """

    __slots__ = ("_lock", "flag")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        # Read it where a call would cost (a caller's every `execute`); set it
        # only through `set()`.
        self.flag = False

    def set(self) -> None:
        if self.flag:
            return
        self.flag = True
        try:
            self._lock.release()
        except RuntimeError:
            pass  # two threads set it at once; it is set either way

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or `timeout` seconds pass; True if set."""
        if self.flag:
            return True
        if timeout is not None:
            # NaN, negative and huge waits would raise in acquire().
            timeout = 0.0 if math.isnan(timeout) else min(max(0.0, timeout), threading.TIMEOUT_MAX)
        if self._lock.acquire(timeout=-1 if timeout is None else timeout):
            self._lock.release()
            return True
        return self.flag


def simple_inbox() -> Any:
    """An actor inbox for pykka: the C `SimpleQueue` (it has pykka's put/get/empty)."""
    return queue.SimpleQueue()
