"""Deadlines and backoffs as timers on one thread, so the supervisor never sleeps.

`threading.Timer` would start a thread per deadline (tens of microseconds each,
on every call). Here one daemon thread keeps a heap; arming a timer later than
the earliest one does not even wake it. Callbacks must be tiny: they only `tell`
an actor.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["TimerHandle", "TimerService"]

log = logging.getLogger("toolbus.actors")

_MAX_DELAY = min(threading.TIMEOUT_MAX, 365 * 24 * 3600.0)


class TimerHandle:
    """A timer as armed: made by `TimerService.schedule` (without an
    `__init__`, whose frame every call's deadline would pay)."""

    __slots__ = ("args", "callback", "cancelled", "in_heap", "when")

    when: float
    callback: Callable[..., Any]
    args: tuple[Any, ...]
    cancelled: bool
    in_heap: bool


_new_handle = object.__new__


class TimerService:
    """Runs callbacks after delays, on one daemon thread."""

    def __init__(self, name: str = "toolbus-timers") -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        # The condition shares the lock: hot paths take the bare lock (C code)
        # and only touch the condition to wake the timer thread.
        self._cond = threading.Condition(self._lock)
        self._cancelled = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Call `callback(*args)` after `delay` seconds; cancel with the returned handle."""
        # Clamped: a wait beyond threading.TIMEOUT_MAX raises in the timer thread.
        delay = 0.0 if math.isnan(delay) else min(max(0.0, delay), _MAX_DELAY)
        handle: TimerHandle = _new_handle(TimerHandle)
        handle.when = time.monotonic() + delay
        handle.callback = callback
        handle.args = args
        handle.cancelled = False
        handle.in_heap = True
        with self._lock:
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (handle.when, next(self._seq), handle))
            if earliest is None or handle.when < earliest:
                self._cond.notify()
        return handle

    def cancel(self, handle: TimerHandle | None) -> None:
        if handle is None or handle.cancelled:
            return
        # Lazy deletion; rebuild when cancelled entries dominate (a 30 s deadline
        # per call at high call rates would otherwise pile up).
        with self._lock:
            handle.cancelled = True
            # A cancelled entry stays in the heap until it would have fired (or
            # a rebuild): it must not keep its call's state alive that long.
            handle.args = ()
            if not handle.in_heap:
                return  # already fired (or fell out at close): nothing to delete
            self._cancelled += 1
            if self._cancelled > 1024 and self._cancelled > len(self._heap) // 2:
                self._heap = [e for e in self._heap if not e[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def __len__(self) -> int:
        with self._lock:  # (the bare lock, here and below: see `_sync.py`)
            return len(self._heap) - self._cancelled

    def close(self) -> None:
        """Drop every timer and end the thread: gone when this returns (but
        called from a timer's own callback, which cannot wait for itself)."""
        with self._lock:
            self._closed = True
            for _, _, handle in self._heap:
                handle.in_heap = False
            self._heap.clear()
            self._cancelled = 0
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            # It only has to wake and return: a callback it is running `tell`s.
            self._thread.join(1.0)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    heap = self._heap
                    # Cancelled at the top: gone now, not each at its own time
                    # (a wake-up apiece), so the thread sleeps until a live one.
                    while heap and heap[0][2].cancelled:
                        heapq.heappop(heap)[2].in_heap = False
                        self._cancelled -= 1
                    if not heap:
                        self._cond.wait()
                        continue
                    delay = heap[0][0] - time.monotonic()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)
                if self._closed:
                    return
                _, _, handle = heapq.heappop(self._heap)
                handle.in_heap = False
                if handle.cancelled:
                    self._cancelled -= 1
                    continue
                callback, args = handle.callback, handle.args  # as armed, not as cancelled
            try:
                callback(*args)
            except BaseException:  # the timer thread must outlive any callback
                log.exception("timer callback failed")
