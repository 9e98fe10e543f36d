"""Admission control over named capacity groups (toolbus/actors/_capacity.py), pure."""

from __future__ import annotations

import contextvars

from toolbus import ToolCall, tool
from toolbus.actors._capacity import Capacity as Slots
from toolbus.actors._capacity import Group
from toolbus.actors._capacity import ToolGroup as Pool
from toolbus.actors._ticket import Ticket
from toolbus.pipeline import BatchRun, Run
from toolbus.retry import RetryPolicy


def _tool(name: str, limit: int | None = None) -> Pool:
    @tool(name=name, read_only=True, max_concurrency=limit)
    def f() -> None:
        return None

    return Pool(f)


def _run(pool: Pool, batch: BatchRun | None = None, index: int = 0) -> Run:
    run = Run(
        ToolCall(id=f"{pool.tool.name}-{index}", name=pool.tool.name),
        pool.tool,
        index=index,
        batch=batch,
        context=contextvars.copy_context(),
        timeout=None,
        policy=RetryPolicy(),
    )
    run.ticket = Ticket()
    run.ticket.pool = pool
    if batch is not None and batch.sv_group is None:
        batch.sv_group = Group(f"batch:{batch.batch_id}", batch.limit)
    run.ticket.groups = (batch.sv_group, pool) if batch is not None else (pool,)
    return run


def _start_all(slots: Slots) -> list[Run]:
    started = []
    while (run := slots.next_startable()) is not None:
        slots.take(run)
        started.append(run)
    return started


def test_global_limit() -> None:
    pool = _tool("a")
    slots = Slots(max_parallel=2)
    runs = [_run(pool, index=i) for i in range(5)]
    for r in runs:
        slots.enqueue(r)
    assert _start_all(slots) == runs[:2]
    slots.release(runs[0])
    assert _start_all(slots) == [runs[2]]
    assert (slots.in_flight, slots.peak) == (2, 2)


def test_tool_limit_parks_and_lets_out_in_order() -> None:
    narrow, wide = _tool("narrow", limit=1), _tool("wide")
    slots = Slots(max_parallel=8)
    n = [_run(narrow, index=i) for i in range(3)]
    w = _run(wide)
    for r in [*n, w]:
        slots.enqueue(r)
    assert _start_all(slots) == [n[0], w]  # n[1], n[2] wait; the other tool does not
    assert list(narrow.waiting) == [n[1], n[2]]
    slots.release(n[0])
    assert _start_all(slots) == [n[1]]
    slots.release(n[1])
    assert _start_all(slots) == [n[2]]


def test_batch_limit() -> None:
    pool = _tool("t")
    b = BatchRun("b", limit=2, stop_on_error=False, waiter=None)
    runs = [_run(pool, b, i) for i in range(4)]
    slots = Slots(max_parallel=8)
    for r in runs:
        slots.enqueue(r)
    assert _start_all(slots) == runs[:2]
    assert list(b.sv_group.waiting) == runs[2:]
    slots.release(runs[1])
    assert _start_all(slots) == [runs[2]]


def test_closed_waiting_run_does_not_swallow_room() -> None:
    pool = _tool("one", limit=1)
    slots = Slots(max_parallel=8)
    a, b, c = (_run(pool, index=i) for i in range(3))
    for r in (a, b, c):
        slots.enqueue(r)
    assert _start_all(slots) == [a]
    b.ticket.closed = True  # cancelled while waiting
    slots.closed(b)
    slots.release(a)
    assert _start_all(slots) == [c]


def test_run_let_out_then_closed_hands_its_room_on() -> None:
    pool = _tool("one", limit=1)
    slots = Slots(max_parallel=8)
    a, b, c = (_run(pool, index=i) for i in range(3))
    for r in (a, b, c):
        slots.enqueue(r)
    assert _start_all(slots) == [a]
    slots.release(a)  # lets b out into the ready queue...
    b.ticket.closed = True  # ...where it is aborted before it starts
    slots.closed(b)
    assert _start_all(slots) == [c]


def test_room_left_by_a_run_blocked_elsewhere_is_passed_on() -> None:
    narrow = _tool("narrow", limit=1)
    other = _tool("other")
    batch = BatchRun("b", limit=1, stop_on_error=False, waiter=None)
    slots = Slots(max_parallel=8)
    busy_b = _run(other, batch, 0)  # holds the batch's only slot
    slots.enqueue(busy_b)
    assert _start_all(slots) == [busy_b]
    first = _run(narrow, index=1)
    slots.enqueue(first)
    assert _start_all(slots) == [first]  # holds the narrow tool's only slot
    in_batch = _run(narrow, batch, 2)  # waits for narrow (and then for its batch)
    single = _run(narrow, index=3)  # waits for narrow
    slots.enqueue(in_batch)
    slots.enqueue(single)
    assert _start_all(slots) == []
    slots.release(first)  # narrow frees: in_batch is let out but its batch is full...
    assert _start_all(slots) == [single]  # ...so the narrow room goes to the next one


def test_enqueue_is_idempotent() -> None:
    pool = _tool("t")
    slots = Slots(max_parallel=8)
    r = _run(pool)
    slots.enqueue(r)
    slots.enqueue(r, front=True)
    assert list(slots.ready) == [r]


def test_a_named_group_limits_the_tools_that_share_it() -> None:
    db = Group("db", 2)
    a, b, free = _tool("a"), _tool("b"), _tool("free")
    slots = Slots(max_parallel=8)
    runs = [_run(a, index=0), _run(b, index=1), _run(a, index=2), _run(free, index=3)]
    for r in runs[:3]:
        r.ticket.groups = (*r.ticket.groups, db)
    for r in runs:
        slots.enqueue(r)
    # The third db call waits for the group; the tool outside it goes ahead.
    assert _start_all(slots) == [runs[0], runs[1], runs[3]]
    assert list(db.waiting) == [runs[2]]
    slots.release(runs[1])  # a slot of db frees: the waiting call goes first
    assert _start_all(slots) == [runs[2]]
    assert db.in_flight == 2


def test_room_let_out_of_one_group_and_blocked_by_another_is_handed_on() -> None:
    db = Group("db", 1)
    narrow = _tool("narrow", limit=1)
    slots = Slots(max_parallel=8)
    hold_db = _run(_tool("x"), index=0)
    hold_db.ticket.groups = (*hold_db.ticket.groups, db)
    hold_narrow = _run(narrow, index=1)
    both = _run(narrow, index=2)
    both.ticket.groups = (*both.ticket.groups, db)
    other_db = _run(_tool("y"), index=3)
    other_db.ticket.groups = (*other_db.ticket.groups, db)
    for r in (hold_db, hold_narrow, both, other_db):
        slots.enqueue(r)
    assert _start_all(slots) == [hold_db, hold_narrow]
    # db frees while `both` still waits for `narrow`: the db slot must not idle.
    slots.release(hold_db)
    assert _start_all(slots) == [other_db]


def test_a_run_sharing_its_callers_slot_takes_no_room_of_max_parallel() -> None:
    pool = _tool("a")
    slots = Slots(max_parallel=1)
    caller = _run(pool, index=0)
    slots.enqueue(caller)
    assert _start_all(slots) == [caller]
    step = Run(
        ToolCall(id="a-0.0", name="a"),
        pool.tool,
        context=contextvars.copy_context(),
        timeout=None,
        policy=RetryPolicy(),
        parent=caller,
        shares_slot=True,
    )
    step.ticket = Ticket()
    step.ticket.groups = (pool,)
    waiting = _run(pool, index=1)
    slots.enqueue(waiting)
    slots.enqueue(step)
    # Full, but the step runs on its caller's slot (no loan needed), and the
    # top-level call still waits: the step took no room.
    assert _start_all(slots) == [step]
    assert (slots.in_flight, slots.shared, caller.ticket.lent, step.parent_call_id) == (
        2,
        1,
        0,
        "a-0",
    )
    slots.release(step)
    assert (slots.in_flight, slots.shared) == (1, 0)
    assert _start_all(slots) == []
    slots.release(caller)
    assert _start_all(slots) == [waiting]


def test_room_for_a_run_is_room_in_max_parallel_and_in_each_of_its_groups() -> None:
    """`has_room_for` answers as `next_startable` would for the run it takes."""
    pool = _tool("a", limit=2)
    other = _tool("b")
    slots = Slots(max_parallel=3)
    a1, a2, a3 = (_run(pool, index=i) for i in range(3))
    b1 = _run(other)
    assert slots.has_room_for(a1)
    slots.take(a1)
    slots.take(a2)
    assert not slots.has_room_for(a3)  # its tool's group is full
    assert slots.has_room_for(b1)
    slots.take(b1)
    assert not slots.has_room_for(_run(other, index=1))  # max_parallel is full
    slots.release(a1)
    assert slots.has_room_for(a3)
    slots.enqueue(a3)
    assert slots.next_startable() is a3
