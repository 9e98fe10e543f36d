"""One receiver's queue is drained by one thread at a time (review helper-163).

A queue is taken for delivery with a token (`EventQueue.busy.setdefault(0,
token) is token`): a thread that let it go and takes it back must use a
token of its own, or two drain threads could each find the queue theirs and
call the receiver at once, out of `seq` order. And a queue is in a signal's
plan once, or one announcement would take it twice."""

from __future__ import annotations

import threading
from typing import Any

from tests.bus.echo import echo_call, echo_registry
from toolbus import Executor, bus
from toolbus.bus._queues import EventQueue, Plan

WAIT = 10.0


def test_a_queue_is_in_a_signals_plan_once() -> None:
    q = EventQueue.__new__(EventQueue)
    q.items, q.busy = [], {}  # type: ignore[assignment]
    other = EventQueue.__new__(EventQueue)
    other.items, other.busy = [], {}  # type: ignore[assignment]
    plan = Plan(1, [(print, q), (print, other), (print, q)])
    assert [t[1] for t in plan.targets] == [q, other]


def test_a_drain_thread_taking_its_queue_back_never_shares_it() -> None:
    """Thread 1 lets the queue go; an event comes, thread 2 drains it (C, held
    in the receiver), an event D comes; thread 1 then looks again. It must not
    take the queue thread 2 holds: D waits for C to return."""
    ex = Executor(echo_registry())
    inside, most = [0], [0]
    lock = threading.Lock()
    c_in, d_in, looked = threading.Event(), threading.Event(), threading.Event()

    def receiver(sender: Any, *, event: Any, signal: str) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        if event.call_id == "d":
            d_in.set()
        if event.call_id == "c":
            c_in.set()
            # Until thread 1 has looked again (and let it be) or, wrongly, D is
            # delivered beside this one.
            while not (looked.is_set() or d_in.is_set()):
                looked.wait(0.01)
        with lock:
            inside[0] -= 1

    sub = bus.subscribe(receiver, bus.FINISHED, sender=ex)
    try:
        ex.execute(echo_call(0))
        assert ex.drain_events(WAIT)
        plan = ex._announcer._plans[bus.FINISHED]  # type: ignore[attr-defined]
        # (Ours: receivers of every sender another test left count here too.)
        ((at, (recv, q, items, _)),) = [
            (i, t) for i, t in enumerate(plan.targets) if t[0].owner is sub
        ]
        first_clear, go_first = threading.Event(), threading.Event()
        second_clear, go_second = threading.Event(), threading.Event()
        clears = [0]
        first_thread: list[int] = []

        class Busy(dict[int, object]):
            def clear(self) -> None:
                clears[0] += 1
                if clears[0] == 1:  # thread 1, done with A: lets go, then waits
                    first_thread.append(threading.get_ident())
                    super().clear()
                    first_clear.set()
                    go_first.wait(WAIT)
                elif clears[0] == 2:  # thread 2, done with B: waits, then lets go
                    second_clear.set()
                    go_second.wait(WAIT)
                    super().clear()
                else:
                    super().clear()

            def setdefault(self, key: int, default: object = None) -> object:
                got = super().setdefault(key, default)
                if first_thread and threading.get_ident() == first_thread[0]:
                    looked.set()
                return got

        q.busy = Busy()
        plan.targets[at] = (recv, q, items, q.busy.setdefault)

        def call(name: str) -> Any:
            return echo_call(0).model_copy(update={"id": name})

        ex.execute(call("a"))
        assert first_clear.wait(WAIT)
        ex.execute(call("b"))  # announced while nobody holds it: thread 2
        assert second_clear.wait(WAIT)
        ex.execute(call("c"))  # left to thread 2, which holds it
        ex.execute(call("d"))
        go_second.set()
        assert c_in.wait(WAIT)
        go_first.set()  # thread 1 looks again, with C and D queued or in delivery
        assert ex.drain_events(WAIT)
        assert d_in.is_set() and most[0] == 1
    finally:
        sub.close()
        ex.close()
