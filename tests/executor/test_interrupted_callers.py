"""A blocking caller interrupted (a signal's `KeyboardInterrupt`) gives its wait up.

The calls it waited for end `cancelled`, once, wherever the interruption
landed: in the wait, or after the calls were handed to the scheduler but
before the wait began (inside `execute`'s own submission), where the caller
does not hold them yet. The interruption is raised at those points by
wrapping them, as a signal handler raising there would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus._executor._waiting import Waiting
from toolbus.actors import Scheduler, _admission
from toolbus.backends import ThreadBackend, _thread

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
