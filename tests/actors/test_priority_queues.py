"""Priorities in the queues runs wait in (toolbus/actors/_queue.py and its users), pure:
no threads, no executor."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest

from toolbus import ToolCall, tool
from toolbus.actors._budget import ThreadBudget
from toolbus.actors._capacity import Capacity, Group, ToolGroup
from toolbus.actors._queue import MAX_LEVELS, RunQueue
from toolbus.actors._ticket import Ticket
from toolbus.pipeline import BatchRun, Run
from toolbus.retry import RetryPolicy


def _pool(name: str = "t", limit: int | None = None) -> ToolGroup:
    @tool(name=name, read_only=True, max_concurrency=limit)
    def f() -> None:
        return None

    return ToolGroup(f)


POOL = _pool()


def _run(
    name: str,
    priority: int | None = 0,
    *,
    pool: ToolGroup = POOL,
    parent: Run | None = None,
    batch: BatchRun | None = None,
    backend: Any = None,
) -> Run:
    run = Run(
        ToolCall(id=name, name=pool.tool.name),
        pool.tool,
        batch=batch,
        context=contextvars.copy_context(),
        timeout=None,
        policy=RetryPolicy(),
        parent=parent,
        priority=priority,
        backend=backend,
    )
    run.ticket = Ticket()
    run.ticket.pool = pool
    if batch is not None and batch.sv_group is None:
        batch.sv_group = Group(f"batch:{batch.batch_id}", batch.limit)
    run.ticket.groups = (batch.sv_group, pool) if batch is not None else (pool,)
    return run


def _ids(runs: Any) -> list[str]:
    return [r.call.id for r in runs]


def _drain(q: RunQueue) -> list[str]:
    out = []
    while q.size:
        out.append(q.pop().call.id)
    assert q.others == 0 and len(q) == 0
    return out


def _start_all(slots: Capacity) -> list[str]:
    started = []
    while (run := slots.next_startable()) is not None:
        slots.take(run)
        started.append(run.call.id)
    return started


# -- RunQueue ------------------------------------------------------------------------


def test_higher_priority_first_fifo_within_one() -> None:
    q = RunQueue()
    for name, p in [("a0", 0), ("b5", 5), ("c0", 0), ("d-1", -1), ("e5", 5), ("f9", 9)]:
        q.push(_run(name, p))
    assert _ids(q) == ["f9", "b5", "e5", "a0", "c0", "d-1"]  # iteration: the pop order
    assert _drain(q) == ["f9", "b5", "e5", "a0", "c0", "d-1"]


def test_default_priority_only_is_a_plain_fifo() -> None:
    q = RunQueue()
    runs = [_run(f"r{i}") for i in range(5)]
    for r in runs:
        q.push(r)
    assert q.others == 0  # the fast path: level 0 only
    assert _drain(q) == [f"r{i}" for i in range(5)]


def test_front_goes_ahead_of_its_class_only() -> None:
    q = RunQueue()
    for name, p in [("low", 0), ("high", 5), ("high2", 5)]:
        q.push(_run(name, p))
    q.push(_run("retry0", 0), front=True)  # a retry of priority 0
    q.push(_run("retry5", 5), front=True)
    assert _drain(q) == ["retry5", "high", "high2", "retry0", "low"]


def test_nested_runs_go_ahead_of_every_priority() -> None:
    q = RunQueue()
    caller_low, caller_high = _run("caller_low", 0), _run("caller_high", 9)
    q.push(_run("top", 100))
    q.push(_run("n_low", parent=caller_low, priority=None))  # inherits 0
    q.push(_run("n_high", parent=caller_high, priority=None))  # inherits 9
    q.push(_run("n_low2", parent=caller_low, priority=None))
    # Nested first: by priority, then newest first (as before priorities).
    assert _drain(q) == ["n_high", "n_low2", "n_low", "top"]


def test_nested_run_inherits_its_callers_priority_unless_given() -> None:
    caller = _run("caller", 7)
    assert _run("n", parent=caller, priority=None).priority == 7
    assert _run("n", parent=caller, priority=-2).priority == -2
    assert _run("n", parent=caller, priority=0).priority == 0
    assert _run("top", priority=None).priority == 0


def test_remove_keeps_the_counts() -> None:
    q = RunQueue()
    caller = _run("caller")
    runs = [_run("a", 0), _run("b", 3), _run("n", parent=caller), _run("c", -3)]
    for r in runs:
        q.push(r)
    assert (q.size, q.others) == (4, 3)
    q.remove(runs[1])
    q.remove(runs[2])
    assert (q.size, q.others) == (2, 1)
    with pytest.raises(ValueError):
        q.remove(runs[1])
    with pytest.raises(ValueError):
        q.remove(_run("never", 42))  # a level it never had
    assert _drain(q) == ["a", "c"]
    with pytest.raises(IndexError):
        q.pop()


def test_levels_that_come_and_go_stay_few_and_ordered() -> None:
    q = RunQueue()
    for p in range(1, 50):
        q.push(_run(f"p{p}", p))
        assert q.pop().priority == p
    assert len(q._queues) <= MAX_LEVELS + 1
    # And still in order with many levels live at once.
    for p in [3, -7, 12, 0, 12, 5, -1, 40, 2, 9, 1]:
        q.push(_run(str(p), p))
    got = [int(x) for x in _drain(q)]
    assert got == sorted(got, reverse=True)


# -- Capacity: the ready queue and the groups' waiting queues ------------------------


def test_ready_queue_orders_by_priority_across_batches() -> None:
    slots = Capacity(max_parallel=1)
    blocker = _run("blocker")
    slots.enqueue(blocker)
    assert _start_all(slots) == ["blocker"]
    low = BatchRun("low", limit=8, stop_on_error=False, waiter=None)
    high = BatchRun("high", limit=8, stop_on_error=False, waiter=None)
    for name in ("l1", "l2"):
        slots.enqueue(_run(name, 0, batch=low))
    for name in ("h1", "h2"):
        slots.enqueue(_run(name, 5, batch=high))
    slots.enqueue(_run("single_low", -1))
    assert _start_all(slots) == []  # the only slot is held
    order = []
    held = blocker
    while True:
        slots.release(held)
        started = slots.next_startable()
        if started is None:
            break
        slots.take(started)
        order.append(started.call.id)
        held = started
    assert order == ["h1", "h2", "l1", "l2", "single_low"]


def test_group_waiting_queue_lets_higher_priority_out_first() -> None:
    narrow = _pool("narrow", limit=1)
    slots = Capacity(max_parallel=8)
    first = _run("first", pool=narrow)
    low1, low2 = _run("low1", 0, pool=narrow), _run("low2", 0, pool=narrow)
    high = _run("high", 3, pool=narrow)
    slots.enqueue(first)
    assert _start_all(slots) == ["first"]
    for r in (low1, low2, high):
        slots.enqueue(r)
    assert _start_all(slots) == []
    assert _ids(narrow.waiting) == ["high", "low1", "low2"]
    for held, expected in [(first, "high"), (high, "low1"), (low1, "low2")]:
        slots.release(held)
        assert _start_all(slots) == [expected]


def test_a_let_out_run_overtaken_by_a_higher_one_keeps_its_turn() -> None:
    narrow = _pool("narrow", limit=1)
    slots = Capacity(max_parallel=8)
    first, low1, low2 = (_run(n, 0, pool=narrow) for n in ("first", "low1", "low2"))
    for r in (first, low1, low2):
        slots.enqueue(r)
    assert _start_all(slots) == ["first"]
    slots.release(first)  # lets low1 out, to the front of priority 0 in the ready queue
    slots.enqueue(_run("high", 5, pool=narrow))  # arrives before the scheduler pumps
    assert _start_all(slots) == ["high"]  # takes the room low1 was let out for...
    assert _ids(narrow.waiting) == ["low1", "low2"]  # ...and low1 waits at the front again


def test_retry_goes_ahead_of_its_class_but_not_of_higher_ones() -> None:
    slots = Capacity(max_parallel=1)
    holder = _run("holder")
    slots.enqueue(holder)
    assert _start_all(slots) == ["holder"]
    slots.enqueue(_run("low"))
    slots.enqueue(_run("high", 2))
    slots.enqueue(_run("retry", 0), front=True)  # its backoff is over
    slots.enqueue(_run("retry_high", 2), front=True)
    assert _ids(slots.ready) == ["retry_high", "high", "retry", "low"]


def test_nested_run_borrows_its_callers_share_ahead_of_higher_priorities() -> None:
    slots = Capacity(max_parallel=1)
    caller = _run("caller", 0)
    slots.enqueue(caller)
    assert _start_all(slots) == ["caller"]
    slots.enqueue(_run("urgent", 100))
    nested = _run("nested", parent=caller, priority=None)
    slots.enqueue(nested)
    # Full: only the nested call may start (on its caller's share).
    assert _start_all(slots) == ["nested"]
    assert nested.ticket.borrowed and caller.ticket.lent == 1
    assert _ids(slots.ready) == ["urgent"]


def test_nested_run_waits_first_in_a_group_whatever_the_priorities() -> None:
    narrow = _pool("narrow", limit=1)
    slots = Capacity(max_parallel=8)
    holder, caller = _run("holder", pool=narrow), _run("caller", 0)
    slots.enqueue(holder)
    slots.enqueue(caller)
    assert _start_all(slots) == ["holder", "caller"]
    slots.enqueue(_run("urgent", 100, pool=narrow))
    slots.enqueue(_run("nested", pool=narrow, parent=caller, priority=None))
    assert _start_all(slots) == []
    assert _ids(narrow.waiting) == ["nested", "urgent"]
    slots.release(holder)
    assert _start_all(slots) == ["nested"]


# -- the thread budget's waiting queue -------------------------------------------------


class _Threads:
    """A backend's thread counts, as the budget reads them."""

    def __init__(self) -> None:
        self.busy_now = 0

    def busy(self, tool: Any = None) -> int:
        return self.busy_now

    def abandoned(self, tool: Any = None) -> int:
        return 0


def test_thread_budget_lets_higher_priority_go_first() -> None:
    threads = _Threads()
    budget = ThreadBudget(limit=1, per_tool=1)
    budget.backends.append(threads)  # type: ignore[arg-type]
    threads.busy_now = 1  # the only thread is taken
    runs = [_run(n, p, backend=threads) for n, p in [("a", 0), ("b", 4), ("c", 0), ("d", 4)]]
    for r in runs:
        assert budget.room(r) == "wait"
        budget.park(r)
    runs[2].ticket.ahead = True  # (as if a retry) ...
    budget.waiting.remove(runs[2])
    budget.park(runs[2])  # ... keeps the front of its class
    order = []
    threads.busy_now = 0
    while (ready := budget.next_ready()) is not None:
        run, room = ready
        assert room == "start"
        order.append(run.call.id)
    assert order == ["b", "d", "c", "a"]
