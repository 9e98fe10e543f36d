"""Where a caller waits for its result, and what can stop a running attempt.

A caller blocks on a `ThreadWaiter` or awaits a `LoopWaiter`; either is
released once, from any thread, with the call's result (or a batch's).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .._sync import Latch

__all__ = ["Cancellable", "LoopWaiter", "ThreadWaiter", "Waiter"]


class Cancellable(Protocol):
    """Whatever runs an attempt's user code and can be told to stop (thread-safe)."""

    def cancel(self) -> None: ...


class Waiter:
    """Something a caller blocks or awaits on; released once with a value."""

    __slots__ = ()

    def release(self, value: Any) -> None:
        raise NotImplementedError


class ThreadWaiter(Latch, Waiter):
    """A blocked thread's waiter: made on the thread that will block on it.

    It is its own latch (`flag`: released; `wait`), one object a call rather
    than two: every `execute` makes one."""

    __slots__ = ("looking", "owner", "value")

    def __init__(self) -> None:
        Latch.__init__(self)
        self.value: Any = None
        self.owner = threading.get_ident()
        # Set by the waiting thread once it first looks at its calls' deadlines:
        # until then, a deadline set on that thread is sure to be seen by it.
        self.looking = False

    def release(self, value: Any) -> None:
        self.value = value
        self.set()

    @property
    def released(self) -> bool:
        return self.flag


class LoopWaiter(Waiter):
    """Resolves an asyncio future from any thread without blocking its loop."""

    __slots__ = ("future", "loop", "unwatch", "watch")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        # Run on the loop once released: its deadline watch forgets the calls
        # (the watch holds them, and through them this loop).
        self.unwatch: Callable[[], object] | None = None
        # That watch, while it watches them (`actors/_loopwatch.py`): told of
        # the deadline of an attempt dispatched on this loop afterwards.
        self.watch: Any = None

    def release(self, value: Any) -> None:
        try:
            if asyncio._get_running_loop() is self.loop:
                # On its loop: set now (the awaiting task resumes a turn later
                # all the same; setting a future runs none of its callbacks here).
                self._set(value)
            else:
                self.loop.call_soon_threadsafe(self._set, value)
        except RuntimeError:
            # The caller's loop is closed: nobody is waiting any more, and
            # nothing runs on it, so its watch may let go of the calls here.
            self._forgotten()

    def _set(self, value: Any) -> None:
        self._forgotten()
        if not self.future.done():
            self.future.set_result(value)

    def _forgotten(self) -> None:
        """Its watch forgets the calls, once. (`unwatch` holds them, and they
        hold this waiter: kept, that would be a cycle for the garbage
        collector to find.)"""
        unwatch = self.unwatch
        if unwatch is not None:
            self.unwatch = self.watch = None
            unwatch()
