"""Bounded queues, shedding and the waits `tool:queued` announces
(toolbus/actors/_capacity.py, _queue.py), pure: no threads, no executor.

`pump` does what the scheduler's pump does with a `Capacity`: start what may
start (taking its slot), then shed one run at a time while a queue is over
its bound, starting again after each."""

from __future__ import annotations

import contextvars
from typing import Any

from toolbus import ToolCall, tool
from toolbus.actors._capacity import MAX_PARALLEL, Capacity, Group, ToolGroup
from toolbus.actors._queue import RunQueue
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
    priority: int = 0,
    *,
    pool: ToolGroup = POOL,
    groups: tuple[Group, ...] = (),
    parent: Run | None = None,
    batch: BatchRun | None = None,
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
    )
    run.ticket = Ticket()
    run.ticket.pool = pool
    run.ticket.groups = (pool, *groups)
    return run


def _ids(runs: Any) -> list[str]:
    return [r.call.id for r in runs]


def _close(slots: Capacity, run: Run) -> None:
    """What the scheduler does when a queued run ends (`_closed_run`)."""
    run.ticket.closed = True
    slots.closed(run)


def pump(slots: Capacity) -> tuple[list[Run], list[Run]]:
    """(started, shed) by one pump."""
    started: list[Run] = []
    shed: list[Run] = []
    while True:
        while (run := slots.next_startable()) is not None:
            slots.take(run)
            started.append(run)
        victim = slots.next_to_shed()
        if victim is None:
            return started, shed
        victim.ticket.closed = True
        shed.append(victim)


def _holding(max_parallel: int = 1, **kw: Any) -> tuple[Capacity, Run]:
    """A capacity whose every slot of max_parallel is held."""
    slots = Capacity(max_parallel, **kw)
    holders = [_run(f"holder{i}") for i in range(max_parallel)]
    for r in holders:
        slots.enqueue(r)
    assert pump(slots)[0] == holders
    return slots, holders[0]


def test_the_ready_queue_keeps_at_most_max_queued_and_refuses_the_newest() -> None:
    slots, holder = _holding(max_queued=2)
    runs = [_run(f"r{i}") for i in range(5)]
    for r in runs:
        slots.enqueue(r)
    started, shed = pump(slots)
    assert started == [] and _ids(shed) == ["r4", "r3", "r2"]  # the newest go
    assert _ids(slots.ready) == ["r0", "r1"]
    assert all(r.ticket.queued == 0 for r in shed)
    slots.release(holder)
    assert _ids(pump(slots)[0]) == ["r0"]


def test_a_bound_is_checked_once_the_pump_has_started_what_it_can() -> None:
    # Ten arrive at once with eight slots free: two wait, within a bound of two.
    slots = Capacity(8, max_queued=2)
    runs = [_run(f"r{i}") for i in range(10)]
    for r in runs:
        slots.enqueue(r)
    started, shed = pump(slots)
    assert len(started) == 8 and shed == []
    assert _ids(slots.ready) == ["r8", "r9"]


def test_a_higher_priority_arrival_sheds_the_lowest_queued() -> None:
    slots, _ = _holding(max_queued=2)
    low_a, low_b, mid = _run("low-a", -1), _run("low-b", -1), _run("mid", 0)
    for r in (low_a, mid, low_b):
        slots.enqueue(r)
    assert _ids(pump(slots)[1]) == ["low-b"]  # the newest of the lowest class
    high = _run("high", 5)
    slots.enqueue(high)
    assert _ids(pump(slots)[1]) == ["low-a"]
    assert _ids(slots.ready) == ["high", "mid"]
    # An arrival of the lowest priority there is is refused at once.
    late = _run("late", 0)
    slots.enqueue(late)
    assert pump(slots)[1] == [late]
    # A retry at the front of its class keeps its turn: the newest at the end goes.
    retry, fresh = _run("retry", 0), _run("fresh", 0)
    slots.enqueue(fresh)
    slots.enqueue(retry, front=True)
    assert _ids(pump(slots)[1]) == ["fresh", "mid"]
    assert _ids(slots.ready) == ["high", "retry"]


def test_nested_runs_are_never_shed() -> None:
    slots, holder = _holding(max_queued=1)
    other = _run("other")
    slots.enqueue(other)
    assert pump(slots) == ([], [])
    # Nested runs of the holder: one runs on its caller's share, the rest wait,
    # over the bound, and the run that is not nested goes.
    nested = [_run(f"n{i}", parent=holder) for i in range(3)]
    for r in nested:
        slots.enqueue(r, front=True)
    started, shed = pump(slots)
    assert len(started) == 1 and started[0] in nested
    assert shed == [other]
    assert sorted(_ids(slots.ready)) == sorted(_ids(r for r in nested if r not in started))
    # Only nested runs over the bound: they wait, and a pump changes nothing.
    assert slots.next_to_shed() is None and pump(slots) == ([], [])


def test_runs_that_ended_while_queued_do_not_count() -> None:
    slots, holder = _holding(max_queued=2)
    a, b, c = _run("a"), _run("b"), _run("c")
    for r in (a, b):
        slots.enqueue(r)
    pump(slots)
    _close(slots, a)  # cancelled while it waits: still in the deque, counted dead
    assert (slots.ready.size, slots.ready.dead) == (2, 1)
    slots.enqueue(c)
    assert pump(slots) == ([], [])  # b and c: two live runs, within the bound
    slots.release(holder)
    assert pump(slots)[0] == [b]  # a is dropped on the way out, uncounted
    assert (slots.ready.size, slots.ready.dead) == (1, 0)


def test_shedding_drops_the_runs_that_ended_at_the_tail() -> None:
    slots, _ = _holding(max_queued=1)
    a, b, c = _run("a"), _run("b"), _run("c")
    for r in (a, b, c):
        slots.enqueue(r)
    _close(slots, c)  # the tail ended while it waited
    assert pump(slots)[1] == [b]  # c, dead, is dropped on the way, not shed
    assert _ids(slots.ready) == ["a"]
    assert (slots.ready.size, slots.ready.dead) == (1, 0)


def test_a_group_keeps_at_most_its_max_queued_and_sheds_by_priority() -> None:
    db = Group("db", 1, max_queued=2)
    slots = Capacity(8)
    first = _run("first", groups=(db,))
    waiting = [_run(f"w{i}", groups=(db,)) for i in range(3)]
    for r in (first, *waiting):
        slots.enqueue(r)
    started, shed = pump(slots)
    assert started == [first] and shed == [waiting[2]]
    assert _ids(db.waiting) == ["w0", "w1"]
    assert slots.overfull == []
    high = _run("high", 3, groups=(db,))
    slots.enqueue(high)
    assert _ids(pump(slots)[1]) == ["w1"]
    assert _ids(db.waiting) == ["high", "w0"]
    # Calls of other tools, and calls waiting for max_parallel, are not its.
    free = _run("free")
    slots.enqueue(free)
    assert pump(slots)[0] == [free]


def test_a_shed_run_let_out_of_a_group_hands_its_room_on() -> None:
    one = Group("one", 1)
    slots = Capacity(2, max_queued=1)
    a, b, c = (_run(x, -1, groups=(one,)) for x in "abc")
    filler = _run("filler", -2)  # (it comes out last: b and c are parked by then)
    for r in (a, b, c, filler):
        slots.enqueue(r)
    assert pump(slots) == ([a, filler], [])  # b and c parked on the group
    slots.release(a)  # b is let out into the ready queue, with the group's room
    high, high2 = _run("high"), _run("high2")
    slots.enqueue(high)
    slots.enqueue(high2)
    started, shed = pump(slots)
    # high takes the free slot; high2 and b wait, one over the bound: b goes,
    # and the group's room it held goes to c, which waits and goes in turn.
    assert started == [high] and shed == [b, c]
    assert _ids(slots.ready) == ["high2"]
    assert one.waiting.size == 0 and one.in_flight == 0


def test_waits_name_the_queue_the_place_and_the_length() -> None:
    slots, _ = _holding()
    slots.listen = True
    a, b = _run("a"), _run("b")
    slots.enqueue(a)
    slots.enqueue(b)
    pump(slots)
    assert [(r.call.id, g, p, n) for r, g, p, n in slots.waits()] == [
        ("a", MAX_PARALLEL, 1, 2),
        ("b", MAX_PARALLEL, 2, 2),
    ]
    assert slots.waits() == []  # each wait once
    high, low, retry = _run("high", 5), _run("low", -1), _run("retry", 0)
    for r in (high, low):
        slots.enqueue(r)
    slots.enqueue(retry, front=True)
    pump(slots)
    # Queue now: high, retry, a, b, low.
    assert [(r.call.id, p, n) for r, _, p, n in slots.waits()] == [
        ("high", 1, 5),
        ("low", 5, 5),
        ("retry", 2, 5),
    ]


def test_waits_skip_runs_that_started_or_ended_and_list_parked_ones() -> None:
    narrow = _pool("narrow", limit=1)
    slots = Capacity(2)
    slots.listen = True
    a, b, c = (_run(x, pool=narrow) for x in "abc")
    free = _run("free")
    for r in (a, b, free, c):
        slots.enqueue(r)
    assert pump(slots)[0] == [a, free]
    _close(slots, c)
    assert [(r.call.id, g, p, n) for r, g, p, n in slots.waits()] == [
        ("b", "tool:narrow", 1, 1),
    ]


def test_a_run_parked_beyond_the_bound_is_not_announced() -> None:
    db = Group("db", 1, max_queued=1)
    slots = Capacity(4)
    slots.listen = True
    runs = [_run(f"r{i}", groups=(db,)) for i in range(3)]
    for r in runs:
        slots.enqueue(r)
    started, shed = pump(slots)
    assert started == [runs[0]] and shed == [runs[2]]
    assert [(r.call.id, g, p, n) for r, g, p, n in slots.waits()] == [("r1", "db", 1, 1)]


def test_nothing_is_noted_while_nobody_listens() -> None:
    slots, _ = _holding()
    slots.enqueue(_run("a"))
    pump(slots)
    assert slots.fresh == [] and slots.parked == [] and slots.waits() == []


def test_run_queue_pop_last_place_and_lowest() -> None:
    q = RunQueue()
    parent = _run("parent")
    runs = {n: _run(n, p) for n, p in (("a", 0), ("b", 2), ("c", -1), ("d", 0))}
    nested = _run("n", parent=parent)
    for r in runs.values():
        q.push(r)
    q.push(nested)
    assert _ids(q) == ["n", "b", "a", "d", "c"]
    assert q.lowest() == -1
    assert q.place(runs["d"], front=False) == 4
    assert q.place(runs["a"], front=False, later=1) == 3
    assert q.place(nested, front=False) == 1
    assert _ids([q.pop_last(), q.pop_last(), q.pop_last(), q.pop_last()]) == ["c", "d", "a", "b"]
    assert q.pop_last() is None and q.lowest() is None and _ids(q) == ["n"]
    assert q.size == 1 and q.others == 1
