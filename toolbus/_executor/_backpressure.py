"""`on_full="wait"`: a synchronous producer waits for room before it submits.

With `Executor(on_full="wait")`, `execute` and `execute_batch` called from a
plain thread (no event loop running on it, not from inside one of the
executor's own calls) submit their calls only if they fit in the bounded
queues they may join (`max_queued`, a group's `max_queued`): the scheduler
checks and takes them in one step (`SubmitIfRoom`, under its lock). If they
do not fit, the caller sleeps on the scheduler's condition
(`Scheduler.room`), which the scheduler notifies when a bounded queue got
shorter or a slot came free (`actors/_backpressure.py`), and tries again: no
polling. It waits at most until the earliest whole-call deadline of its
calls (`call_timeout`), or without one the executor's `timeout` (None: until
there is room or the executor closes). Then it submits anyway: calls that
still find their queue full are refused (`OVERLOADED`) as with
`on_full="reject"`.

Who never waits here: async callers (`aexecute*`: blocking would stall their
loop), a blocking call made on a thread running an event loop, nested calls
(their callers hold slots: waiting could deadlock), and `submit`/
`submit_batch` (they return at once by contract). Their calls are refused or
shed as with "reject".
"""

from __future__ import annotations

import asyncio
import threading
import time

from ..actors import Scheduler
from ..actors._messages import Cancel, Submit, SubmitIfRoom
from ..models import ErrorCode

__all__ = ["submit_when_room"]


def submit_when_room(scheduler: Scheduler, submit: Submit, timeout: float | None) -> None:
    """Hand `submit` to the scheduler once its calls fit in their bounded
    queues, the executor closes, or `timeout` seconds passed (None: no
    bound); at once for a caller that must not block (see the module's doc)."""
    if (
        not scheduler.bounded
        or submit.runs[0].parent is not None
        or asyncio._get_running_loop() is not None
    ):
        scheduler.post(submit)
        return
    message = SubmitIfRoom(submit)
    if scheduler.ask(message):
        return
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    room, lock = scheduler.room, scheduler.room_lock  # (the bare lock: see `_sync.py`)
    with lock:
        if not scheduler.blocked:
            # The first to wait: what the scheduler last saw is stale, so it
            # wakes us at its next look, and compares from there on.
            scheduler.room_seen = None
        scheduler.blocked += 1
    try:
        while True:
            # Read before trying: a wake-up after the answer moves it on, and
            # the wait below then returns at once instead of missing it.
            seen = scheduler.room_gen
            if scheduler.ask(message):
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            with lock:
                if scheduler.room_gen == seen:
                    # (A huge timeout would make the wait raise OverflowError.)
                    room.wait(None if left is None else min(left, threading.TIMEOUT_MAX))
    except BaseException:
        # Interrupted (Ctrl-C in the producer): its calls were made and shown
        # to the submission hooks, and hold what they took at submission (a
        # quota's unit): they end `cancelled` through the scheduler, as any;
        # unless the interrupt cut its look for room short (the scheduler
        # ended them then: they have their tickets).
        if any(r.ticket is not None for r in submit.runs):
            raise
        scheduler.post(submit)
        why = "the caller was interrupted"
        if submit.batch is not None:
            scheduler.post(Cancel(submit.batch, None, ErrorCode.CANCELLED, why))
        else:
            scheduler.post(Cancel(None, submit.runs[0], ErrorCode.CANCELLED, why))
        raise
    finally:
        with lock:
            scheduler.blocked -= 1
    scheduler.post(submit)  # out of time: refused if its queue is still full
