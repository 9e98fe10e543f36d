"""A blocking caller interrupted (a signal's `KeyboardInterrupt`) gives its wait up.

The calls it waited for end `cancelled`, once, wherever the interruption
landed: in the wait, or after the calls were handed to the scheduler but
before the wait began (inside `execute`'s own submission), where the caller
does not hold them yet. The interruption is raised at those points by
wrapping them, as a signal handler raising there would.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus._executor._waiting import Waiting
from toolbus.actors import Scheduler, _admission
from toolbus.actors._messages import WaitGivenUp
from toolbus.backends import ThreadBackend, _thread
from toolbus.pipeline._waiters import ThreadWaiter

INTERRUPTED = "the caller was interrupted"


@pytest.fixture
def started() -> threading.Semaphore:
    """Released once by each `hold` call as its tool starts."""
    return threading.Semaphore(0)


def _registry(started: threading.Semaphore) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def hold(i: int, ctx: ToolContext) -> int:
        started.release()
        # Until its call is cancelled (a thread tool is told so); the 30 s are a hang guard.
        ctx.wait_cancelled(30)
        return i

    @reg.tool()
    def write(i: int) -> int:
        return i

    return reg


def _interrupting(after: Callable[..., Any]) -> Callable[..., Any]:
    """`after`, then a KeyboardInterrupt, as a signal landing just after it returned."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        after(*args, **kwargs)
        raise KeyboardInterrupt

    return wrapped


def _ended_cancelled(recorder: bus.Recorder, ids: list[str]) -> None:
    """Each of `ids` finishes once, `cancelled` for its caller's interruption."""
    finished = recorder.wait_for(
        bus.FINISHED, len(ids), timeout=20, where=lambda e: e.call_id in ids
    )
    assert sorted(e.call_id for e in finished) == sorted(ids)
    for e in finished:
        assert e.result.status == "cancelled"
        assert e.result.error_code == ErrorCode.CANCELLED
        assert INTERRUPTED in (e.result.error or "")


@pytest.fixture
def ex(make_executor: MakeExecutor, started: threading.Semaphore) -> Executor:
    return make_executor(_registry(started))


@pytest.fixture
def interrupt_hand_on(ex: Executor, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller is interrupted as soon as its calls are handed on."""
    monkeypatch.setattr(ex, "_hand_on", _interrupting(ex._hand_on))


def test_an_interrupt_once_the_call_is_handed_on_cancels_it(
    ex: Executor, recorder: bus.Recorder, interrupt_hand_on: None
) -> None:
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="a", name="hold", arguments={"i": 1}))
    _ended_cancelled(recorder, ["a"])
    assert ex.stats().in_flight == 0


def test_an_interrupt_before_the_wait_begins_cancels_the_call(
    ex: Executor,
    recorder: bus.Recorder,
    started: threading.Semaphore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def block(self: Waiting, waiter: Any, runs: Any) -> None:
        assert started.acquire(timeout=20)  # its tool runs: the call is under way
        raise KeyboardInterrupt

    monkeypatch.setattr(Waiting, "block", block)
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="b", name="hold", arguments={"i": 1}))
    _ended_cancelled(recorder, ["b"])


def test_an_interrupted_batch_cancels_every_call_left(
    ex: Executor, recorder: bus.Recorder, interrupt_hand_on: None
) -> None:
    # Two calls that run, a mutating one that waits for them, one after it.
    calls = [
        ToolCall(id="r1", name="hold", arguments={"i": 1}),
        ToolCall(id="r2", name="hold", arguments={"i": 2}),
        ToolCall(id="w", name="write", arguments={"i": 3}),
        ToolCall(id="r3", name="hold", arguments={"i": 4}),
    ]
    with pytest.raises(KeyboardInterrupt):
        ex.execute_batch(calls)
    _ended_cancelled(recorder, ["r1", "r2", "w", "r3"])
    assert ex.stats().in_flight == 0


def test_an_interrupt_spares_other_callers_calls(
    ex: Executor,
    recorder: bus.Recorder,
    started: threading.Semaphore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = ex.submit(ToolCall(id="other", name="hold", arguments={"i": 0}))
    assert started.acquire(timeout=20)
    monkeypatch.setattr(ex, "_hand_on", _interrupting(ex._hand_on))
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="mine", name="hold", arguments={"i": 1}))
    _ended_cancelled(recorder, ["mine"])
    assert not other.done()  # still running: only the interrupted caller's call ended
    other.cancel()
    assert other.result(timeout=20).status == "cancelled"


def test_an_interrupt_before_anything_is_handed_on_ends_the_call_made_unrun(
    ex: Executor, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hand_on(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ex, "_hand_on", hand_on)
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="c", name="hold", arguments={"i": 1}))
    monkeypatch.undo()
    # Made, never handed on: it ends `cancelled`, once, never run (a quota
    # that counted it gets its unit back), and the executor goes on.
    (made,) = recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "c")
    assert (made.result.status, made.result.attempts) == ("cancelled", 0)
    assert "its submission was interrupted" in (made.result.error or "")
    assert ex.execute(ToolCall(id="d", name="write", arguments={"i": 2})).output == 2
    recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "d")
    assert [e.call_id for e in recorder.of(bus.FINISHED)] == ["c", "d"]


# -- interrupted while acting for the scheduler -------------------------------------------
# A caller submitting a call admits and dispatches it itself, under the
# scheduler's lock: an interruption there is its own, raised once it lets go.


def test_an_interrupt_as_a_worker_is_started_reaches_the_caller_and_leaves_the_pool_whole(
    ex: Executor,
    recorder: bus.Recorder,
    started: threading.Semaphore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def spawn(*args: Any) -> Any:
        raise KeyboardInterrupt  # as starting the worker's thread waits

    monkeypatch.setattr(_thread, "_spawn", spawn)
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="a", name="write", arguments={"i": 1}))
    monkeypatch.undo()
    _ended(recorder, "a")
    # The tool's pool serves its next call (no worker counted that never came).
    assert ex.execute(ToolCall(id="b", name="write", arguments={"i": 2})).output == 2
    assert ex.stats().in_flight == 0


def test_an_interrupt_once_the_backend_took_the_job_ends_the_call_once(
    ex: Executor,
    recorder: bus.Recorder,
    started: threading.Semaphore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submit = ThreadBackend.submit

    def interrupted(self: ThreadBackend, job: Any) -> None:
        submit(self, job)
        raise KeyboardInterrupt

    monkeypatch.setattr(ThreadBackend, "submit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="a", name="write", arguments={"i": 1}))
    monkeypatch.undo()
    _ended(recorder, "a", or_ran=True)
    assert ex.execute(ToolCall(id="b", name="write", arguments={"i": 2})).output == 2
    recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "b")
    assert [e.call_id for e in recorder.of(bus.FINISHED)].count("a") == 1
    assert ex.stats().in_flight == 0


def _ended(recorder: bus.Recorder, call_id: str, *, or_ran: bool = False) -> None:
    """`call_id` ends `cancelled`, once (it was never started, or is given up);
    `or_ran`: or `ok`, its job handed to its backend before the interruption
    (a worker may take it and finish first)."""
    (e,) = recorder.wait_for(bus.FINISHED, timeout=20, where=lambda e: e.call_id == call_id)
    if or_ran and e.result.status == "ok":
        return
    assert e.result.status == "cancelled" and e.result.error_code == ErrorCode.CANCELLED


def test_an_interrupt_as_the_loop_is_asked_to_start_a_call_leaves_its_mailbox_drained(
    make_executor: MakeExecutor, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def ping(i: int) -> int:
        return i

    ex = make_executor(reg)
    assert ex.execute(ToolCall(id="warm", name="ping", arguments={"i": 0})).output == 0
    loop = ex._loop._loop
    assert loop is not None
    ask = loop.call_soon_threadsafe

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.undo()  # once
        raise KeyboardInterrupt  # as the loop is asked to drain its mailbox

    monkeypatch.setattr(loop, "call_soon_threadsafe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ex.execute(ToolCall(id="a", name="ping", arguments={"i": 1}))
    assert loop.call_soon_threadsafe == ask
    _ended(recorder, "a", or_ran=True)
    # The mailbox is drained again: later calls of async tools start.
    for i in range(2, 5):
        assert ex.execute(ToolCall(id=f"c{i}", name="ping", arguments={"i": i})).output == i
    assert ex.stats().in_flight == 0


@pytest.mark.parametrize("where", ["lone", "batch"])
def test_an_interrupt_while_the_caller_admits_its_calls_ends_each_once(
    ex: Executor, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # Cut short part way through admission (every call has its ticket, none
    # is dispatched yet): the caller gets the interruption, its calls end.
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    if where == "lone":  # (as its tool's capacity group is made, on its first call)
        monkeypatch.setattr(Scheduler, "_pool", interrupted)
        ids = ["a"]
        with pytest.raises(KeyboardInterrupt):
            ex.execute(ToolCall(id="a", name="write", arguments={"i": 1}))
    else:
        monkeypatch.setattr(_admission, "schedule_batch", interrupted)
        ids = ["b1", "b2", "b3"]
        with pytest.raises(KeyboardInterrupt):
            ex.execute_batch([ToolCall(id=i, name="write", arguments={"i": 1}) for i in ids])
    monkeypatch.undo()
    for call_id in ids:
        _ended(recorder, call_id)
    assert ex.execute(ToolCall(id="next", name="write", arguments={"i": 2})).output == 2
    assert ex.stats().in_flight == 0 and ex.stats().queued == 0


# -- interrupted as it takes the scheduler's lock, or between queued messages -------------
# A signal's exception is raised as a call returns: `acquire` may have taken
# the lock by then, and a message may be between the queue and its handler.


class _SprungLock:
    """The scheduler's lock, with a signal landing (once, on the main thread)
    as `acquire` returns, after it took the lock."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.sprung = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        taken: bool = self.real.acquire(blocking, timeout)
        if taken and not self.sprung and threading.current_thread() is threading.main_thread():
            self.sprung = True
            raise KeyboardInterrupt
        return taken

    def release(self) -> None:
        self.real.release()

    def _is_owned(self) -> bool:
        return bool(self.real._is_owned())

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("where", ["post", "settle"])
def test_an_interrupt_as_the_caller_takes_the_lock_leaves_it_free(
    ex: Executor, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    scheduler = ex._scheduler
    assert ex.execute(ToolCall(id="warm", name="write", arguments={"i": 0})).output == 0
    lock = _SprungLock(scheduler.lock)
    monkeypatch.setattr(scheduler, "lock", lock)
    if where == "settle":  # the lock is tried again for a message queued meanwhile
        scheduler.owner = -1  # as if another thread were handling: the message is queued
        try:
            scheduler.post(WaitGivenUp(ThreadWaiter(), "nobody"))
        finally:
            scheduler.owner = None
        assert len(scheduler._pending) == 1 and not lock.sprung
        with pytest.raises(KeyboardInterrupt):
            scheduler._settle()
        assert not scheduler._pending
    else:
        with pytest.raises(KeyboardInterrupt):
            ex.execute(ToolCall(id="a", name="write", arguments={"i": 1}))
        _ended(recorder, "a", or_ran=True)
    assert lock.sprung
    # Nobody holds the lock: another thread's call is admitted and ends.
    results: list[Any] = []
    other = threading.Thread(
        target=lambda: results.append(
            ex.execute(ToolCall(id="b", name="write", arguments={"i": 2}))
        ),
        daemon=True,  # (on a hang, the test fails without holding the process)
    )
    other.start()
    other.join(30)
    assert [r.output for r in results] == [2]
    assert ex.stats().in_flight == 0


def _queued_from_another_thread(ex: Executor, results: list[Any]) -> threading.Thread:
    """Another thread's call "b", its submission left queued for this thread
    to handle (held here as a handler would); its result goes to `results`."""
    scheduler = ex._scheduler
    scheduler.lock.acquire()
    scheduler.owner = threading.get_ident()
    try:
        worker = threading.Thread(
            target=lambda: results.append(
                ex.execute(ToolCall(id="b", name="write", arguments={"i": 2}))
            ),
            daemon=True,  # (on a hang, the test fails without holding the process)
        )
        worker.start()
        wait_until(lambda: len(scheduler._pending) == 1, timeout=30)
    finally:
        scheduler.owner = None
        scheduler.lock.release()
    return worker


def test_an_interrupt_as_a_queued_message_is_taken_loses_none(
    ex: Executor, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The main thread handles another thread's queued submission; the signal
    # lands as its handler is entered: the submission is handled all the same.
    scheduler = ex._scheduler
    assert ex.execute(ToolCall(id="warm", name="write", arguments={"i": 0})).output == 0
    results: list[Any] = []
    worker = _queued_from_another_thread(ex, results)
    handle = scheduler._handle

    def entered(message: Any, pump: bool = True) -> Any:
        if message is not None:
            monkeypatch.undo()
            raise KeyboardInterrupt
        return handle(message, pump=pump)

    monkeypatch.setattr(scheduler, "_handle", entered)
    with pytest.raises(KeyboardInterrupt):
        scheduler._settle()
    worker.join(30)
    assert not worker.is_alive()
    assert [r.output for r in results] == [2]
    recorder.wait_for(bus.FINISHED, timeout=20, where=lambda e: e.call_id == "b")
    assert [e.call_id for e in recorder.of(bus.FINISHED)].count("b") == 1
    assert ex.stats().in_flight == 0 and not scheduler._pending


def test_an_interrupt_out_of_a_handler_part_way_does_not_handle_its_message_twice(
    ex: Executor, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second signal as the handler deals with the first: the message was
    # handled as far as it got (its call ended), and is not handled again.
    scheduler = ex._scheduler
    assert ex.execute(ToolCall(id="warm", name="write", arguments={"i": 0})).output == 0
    submitted: list[Any] = []
    ended = Scheduler._submission_interrupted
    results: list[Any] = []

    def first(self: Scheduler, message: Any) -> None:
        submitted.append(message)
        raise KeyboardInterrupt

    def second(self: Scheduler, message: Any) -> None:
        ended(self, message)
        raise KeyboardInterrupt

    worker = _queued_from_another_thread(ex, results)
    monkeypatch.setattr(Scheduler, "_on_submit", first)
    monkeypatch.setattr(Scheduler, "_submission_interrupted", second)
    with pytest.raises(KeyboardInterrupt):
        scheduler._settle()
    monkeypatch.undo()
    worker.join(30)
    assert not worker.is_alive()
    assert len(submitted) == 1 and not scheduler._pending
    assert [r.status for r in results] == ["cancelled"]
    recorder.wait_for(bus.FINISHED, timeout=20, where=lambda e: e.call_id == "b")
    assert [e.call_id for e in recorder.of(bus.FINISHED)].count("b") == 1


# -- no lock a caller's thread takes is entered through a Condition -----------------------
# `threading.Condition.__enter__` is Python code: a signal's exception raised
# as its inner `acquire` returns leaves the lock held for good (every later
# call, `stats()` and `close()` hung). toolbus enters the bare lock instead.


def test_no_lock_a_caller_takes_is_entered_through_a_condition(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered_by: list[str] = []
    enter = threading.Condition.__enter__

    def watched(self: threading.Condition) -> bool:
        module = sys._getframe(1).f_globals.get("__name__", "")
        if module.startswith("toolbus") and threading.current_thread() is threading.main_thread():
            entered_by.append(module)
        return enter(self)

    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=30)
    def quick(i: int) -> int:
        return i

    ex = make_executor(reg, max_parallel=1, max_queued=4, on_full="wait")
    monkeypatch.setattr(threading.Condition, "__enter__", watched)
    with bus.Recorder(bus.FINISHED, sender=ex) as recorder:
        assert ex.execute(ToolCall(id="a", name="quick", arguments={"i": 1})).output == 1
        batch = [ToolCall(id=f"b{i}", name="quick", arguments={"i": i}) for i in range(3)]
        assert [r.output for r in ex.execute_batch(batch).results] == [0, 1, 2]
        ex.submit(ToolCall(id="c", name="quick", arguments={"i": 3})).cancel()
        recorder.wait_for(bus.FINISHED, 5, timeout=30)
        assert ex.stats().in_flight == 0
        ex.drain_events(10)
    ex.close()
    assert entered_by == []
