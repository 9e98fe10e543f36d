"""A Ctrl-C on the main thread that would lose a message or a run outright:
a grouped `Reports` cut after its first report, a handler cut as it is
entered, a run taken off the ready queue and not started, a retry cut before
it is queued (`toolbus/actors/_lost.py`), and a call's close cut before its
batch's books (`toolbus/actors/_mend.py`).

As in `test_interrupted_handlers.py`, the `KeyboardInterrupt` a signal
handler would raise is raised once, on the main thread, where the test
chooses; every wait is bounded, and nothing is synchronized by sleeping.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import Executor, Journal, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.actors import _capacity, _scheduler
from toolbus.actors._capacity import Capacity
from toolbus.actors._completion import Completion
from toolbus.actors._supervisor import SupervisorHost
from toolbus.journal._session import Session
from toolbus.pipeline import Run
from toolbus.pipeline._waiters import ThreadWaiter

from . import test_interrupted_handlers as _handlers
from . import test_interrupted_mending as _mending
from .test_interrupted_handlers import (
    WAIT,
    Gates,
    _caller_done,
    _finished_once,
    _in_thread,
    _interrupt_once,
    _settled,
    _two_in_a_row_end,
)

# Their fixtures, used here too.
ex = _handlers.ex
gates = _handlers.gates
main_handles_report = _handlers.main_handles_report
retried = _mending.retried


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _is(call_id: str) -> Callable[..., bool]:
    """`when` for `_interrupt_once`: the run (its first argument but `self`) is `call_id`'s."""
    return lambda _self, run, *a, **k: run.call.id == call_id


# -- messages -------------------------------------------------------------------------


@pytest.fixture
def grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first two reports of sync tools reach the scheduler as one
    `Reports` (as an event loop's turn reports its jobs), once the second
    comes."""
    real = SupervisorHost.report
    held: list[tuple[Any, Any, Any]] = []
    lock = threading.Lock()

    def report(self: SupervisorHost, job: Any, outcome: Any, worker: Any = None) -> bool:
        with lock:
            if len(held) < 2:
                held.append((job, outcome, worker))
                if len(held) == 1:
                    return True
                return self.report_many(list(held))
        return real(self, job, outcome, worker)

    monkeypatch.setattr(SupervisorHost, "report", report)


def test_a_grouped_report_cut_after_its_first_still_handles_the_rest(
    ex: Executor,
    gates: Gates,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    grouped: None,
    main_handles_report: Callable[[], None],
) -> None:
    # The main thread handles both reports, and is cut short waking the first
    # one's caller: the second one's call must end too.
    raised = _interrupt_once(monkeypatch, ThreadWaiter, "release")
    t1, out1 = _in_thread(lambda: ex.execute(ToolCall(id="a1", name="gate", arguments={"i": 1})))
    assert gates.started.acquire(timeout=WAIT)
    t2, out2 = _in_thread(lambda: ex.execute(ToolCall(id="a2", name="gate", arguments={"i": 2})))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()  # (the second start: both run)
    assert raised[0] == 1
    t1.join(WAIT)
    t2.join(WAIT)
    assert not t1.is_alive() and not t2.is_alive(), "a report after the first was lost"
    assert (out1[0].status, out2[0].status) == ("ok", "ok")
    _finished_once(ex, recorder, ["a1", "a2"])
    _settled(ex)
    assert ex._scheduler._interrupt is None


def test_a_report_cut_as_its_handler_is_entered_is_still_handled(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
) -> None:
    raised = _interrupt_once(monkeypatch, _scheduler.Scheduler, "_on_report")
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="b", name="gate", arguments={"i": 3})))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert raised[0] == 1
    _caller_done(
        ex,
        recorder,
        t,
        ["b"],
        "the report was lost with its handler's entry",
        out=out,
        status="ok",
        output=3,
    )
    assert ex._scheduler._interrupt is None


# -- a run taken off the ready queue, not started -----------------------------------


class _Popped(deque[Run]):
    """The ready queue's default level, raising KeyboardInterrupt on the main
    thread (once) as `popleft` returns `c2`: before its caller even names it."""

    armed = True

    def popleft(self) -> Run:
        run = super().popleft()
        if self.armed and _main() and run.call.id == "c2":
            self.armed = False
            raise KeyboardInterrupt
        return run


@pytest.mark.parametrize(
    "where",
    ["popleft", "dispatch", "begun", "take", "taking", "taken"],
    ids=lambda w: f"cut-at-{w}",
)
def test_a_queued_call_let_out_as_the_main_thread_is_cut_short_still_ends(
    ex: Executor,
    gates: Gates,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
    where: str,
) -> None:
    # `c1` holds the only slot; `c2` waits for it in the ready queue. The
    # main thread handles `c1`'s report, and its pump takes `c2` off the
    # queue: cut as `popleft` returns, as `_dispatch` or `take` is entered,
    # as its attempt was begun (queued again: it runs, its attempt counted
    # once), or as `take` returned (its slot taken, its job not handed to
    # its backend: cancelled, as one cut as its backend takes it is; or
    # cut inside `take`, once it counted the call in flight, before its
    # groups: cancelled so, and every group's count right after).
    sv = ex._scheduler
    sv.slots.max_parallel = 1
    q = sv.slots.ready
    popped = _Popped(q.default)
    q.default = q._levels[0] = q._queues[0] = popped
    queued = threading.Event()
    real_enqueue = Capacity.enqueue

    def enqueue(self: Capacity, run: Run, *, front: bool = False) -> None:
        real_enqueue(self, run, front=front)
        if run.call.id == "c2":
            queued.set()

    monkeypatch.setattr(Capacity, "enqueue", enqueue)
    if where == "taking":
        popped.armed = False
        raised = [0]

        def cut_max(a: int, b: int) -> int:
            if _main() and not raised[0]:
                raised[0] += 1
                raise KeyboardInterrupt
            return a if a > b else b

        monkeypatch.setattr(_capacity, "max", cut_max, raising=False)
    elif where != "popleft":
        popped.armed = False
        owner, name = {
            "dispatch": (_scheduler.Scheduler, "_dispatch"),
            "begun": (Run, "begin_attempt"),
        }.get(where, (Capacity, "take"))
        when = _is("c2") if owner is not Run else lambda run, n: run.call.id == "c2"
        after = where in ("taken", "begun")
        raised = _interrupt_once(monkeypatch, owner, name, after=after, when=when)
    t1, out1 = _in_thread(lambda: ex.execute(ToolCall(id="c1", name="gate", arguments={"i": 1})))
    t2, out2 = _in_thread(lambda: ex.execute(ToolCall(id="c2", name="write", arguments={"i": 2})))
    assert queued.wait(WAIT)
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert not popped.armed and (where == "popleft" or raised[0] == 1)
    t1.join(WAIT)
    t2.join(WAIT)
    assert not t1.is_alive() and not t2.is_alive(), "the call let out never started"
    assert out1[0].status == "ok"
    if where in ("taken", "taking"):
        assert out2[0].status == "cancelled", out2[0]
        assert "interrupted as it was handed to its backend" in (out2[0].error or "")
    else:
        assert (out2[0].status, out2[0].output, out2[0].attempts) == ("ok", 2, 1), out2[0]
    _finished_once(ex, recorder, ["c1", "c2"])
    _settled(ex)
    assert ex._scheduler._interrupt is None
    assert sv.slots.ready.size == 0
    assert ex.stats().retries == 0
    assert [g.in_flight for g in sv.pools.values()] == [0] * len(sv.pools)


def test_a_retry_cut_before_it_is_queued_still_runs(
    retried: Any, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `r` timed out and backs off; its `RetryDue` is handled by the main
    # thread (held in `stats()` until the timer posts it), cut as the ready
    # queue's `enqueue` is entered for it.
    ex, state = retried(max_parallel=1)
    raised = _interrupt_once(
        monkeypatch, Capacity, "enqueue", when=lambda s, run, **k: run.call.id == "r"
    )
    real_status = _scheduler.status

    def status(s: Any) -> Any:
        if _main() and not state.retry_due.is_set():
            state.retry_due.set()  # (the supervisor's thread posts it: the main one holds the lock)
            assert state.retry_posted.wait(WAIT)
        return real_status(s)

    monkeypatch.setattr(_scheduler, "status", status)
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="r", name="slow", arguments={"i": 1})))
    assert state.first.wait(WAIT)
    assert state.retry_waits.wait(WAIT)
    with pytest.raises(KeyboardInterrupt):
        ex.stats()
    assert raised[0] == 1
    t.join(WAIT)
    assert not t.is_alive(), "the retry was never queued"
    assert (out[0].status, out[0].output, out[0].attempts) == ("ok", 1, 2), out[0]
    _finished_once(ex, recorder, ["r"])
    _settled(ex)
    assert ex._scheduler._interrupt is None


# -- a call's close cut before its batch's books --------------------------------------


@pytest.mark.parametrize("where", ["release", "books"], ids=["slot-given-back", "books-entered"])
def test_a_close_cut_before_its_batch_books_still_starts_the_next_call(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
    where: str,
) -> None:
    # Two mutating calls, one after the other: `d1`'s close is cut as it
    # gives back its slot, or as its batch's books begin; `d2` must start.
    if where == "release":
        raised = _interrupt_once(monkeypatch, Capacity, "release", when=_is("d1"))
    else:
        raised = _interrupt_once(
            monkeypatch, Completion, "_batch_books", when=lambda s, b, run, r: run.call.id == "d1"
        )
    _two_in_a_row_end(ex, recorder, main_handles_report, raised, "d")
    assert ex._scheduler._interrupt is None


# -- the journal ------------------------------------------------------------------------


def test_a_cancel_cut_short_before_its_journal_write_still_writes_the_end(
    make_executor: MakeExecutor,
    tmp_path: Path,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A journaled call cancelled by the main thread, whose `finish` is cut as
    # the journal's `ended` is entered: the caller is told `cancelled`, and
    # the journal must not keep the call in doubt.
    reg = ToolRegistry()
    started = threading.Event()

    @reg.tool()
    def pay(i: int, ctx: ToolContext) -> int:
        started.set()
        ctx.wait_cancelled(WAIT)  # until cancelled (the wait is a hang guard)
        return i

    path = tmp_path / "journal.sqlite"
    ex = make_executor(reg, journal=path)
    raised = _interrupt_once(monkeypatch, Session, "ended")
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="j", name="pay", arguments={"i": 1})))
    assert started.wait(WAIT)
    with pytest.raises(KeyboardInterrupt):
        ex.cancel(call_id="j")
    assert raised[0] == 1
    _caller_done(ex, recorder, t, ["j"], out=out, status="cancelled")
    assert ex._scheduler._interrupt is None
    ex.close()
    with Journal(path) as journal:
        assert [r.call_id for r in journal.in_doubt()] == [], "the journal never had its end"
