"""A Ctrl-C on the main thread while it handles the scheduler's messages for
another thread's calls loses none of them (`toolbus/actors/_mend.py`).

The `KeyboardInterrupt` a signal handler would raise is raised here once, on
the main thread, where the test chooses: as a function is entered (a
signal's lands at a call), or just after it returned. The main thread is
made to handle another thread's message by holding the lock in `stats()`
until that message is queued behind it. Each call of the other thread must
still get exactly one result and one `tool:finished`, and nothing hangs.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.actors import _mend, _scheduler
from toolbus.actors._capacity import Capacity
from toolbus.actors._messages import Report, Reports
from toolbus.bus import _signals as sig
from toolbus.bus._delivery import Announcer
from toolbus.bus._publisher import Emitter
from toolbus.pipeline import Run
from toolbus.pipeline._waiters import ThreadWaiter

WAIT = 20  # every wait's hang guard


class Gates:
    started: threading.Semaphore
    go: threading.Event

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.go = threading.Event()


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def ex(make_executor: MakeExecutor, gates: Gates) -> Executor:
    reg = ToolRegistry()

    @reg.tool()
    def gate(i: int) -> int:
        gates.started.release()
        assert gates.go.wait(WAIT)
        return i

    @reg.tool(read_only=True)
    def hold(i: int, ctx: ToolContext) -> int:
        gates.started.release()
        ctx.wait_cancelled(WAIT)  # until cancelled (the wait is a hang guard)
        return i

    @reg.tool()
    def write(i: int) -> int:
        return i

    return make_executor(reg)


def _interrupt_once(
    monkeypatch: pytest.MonkeyPatch,
    owner: Any,
    name: str,
    *,
    after: bool = False,
    times: int = 1,
    when: Callable[..., bool] = lambda *a, **k: True,
) -> list[int]:
    """Patch `owner.name` to raise KeyboardInterrupt on the main thread, as
    it is entered (or just after it returned), `times` times; the count of
    raises so far is returned (a list of one)."""
    real = getattr(owner, name)
    raised = [0]

    def patched(*args: Any, **kwargs: Any) -> Any:
        hit = (
            raised[0] < times
            and threading.current_thread() is threading.main_thread()
            and when(*args, **kwargs)
        )
        if hit and not after:
            raised[0] += 1
            raise KeyboardInterrupt
        value = real(*args, **kwargs)
        if hit:
            raised[0] += 1
            raise KeyboardInterrupt
        return value

    monkeypatch.setattr(owner, name, patched)
    return raised


class _Watched(deque[Any]):
    """The scheduler's queue, telling when a message of `kinds` joins it."""

    def __init__(self, kinds: tuple[type, ...], came: threading.Event) -> None:
        super().__init__()
        self.kinds = kinds
        self.came = came

    def append(self, message: Any) -> None:
        super().append(message)
        if type(message) in self.kinds:
            self.came.set()


def _main_handles(
    ex: Executor, gates: Gates, monkeypatch: pytest.MonkeyPatch, *kinds: type
) -> Callable[[], None]:
    """Returns `hold`: once a tool started, the main thread holds the
    scheduler's lock (in `stats()`), lets the tools return, waits for a
    message of `kinds` to be queued behind it, and handles it there."""
    came = threading.Event()
    ex._scheduler._pending = _Watched(kinds, came)
    real = _scheduler.status
    once = [True]

    def status(s: Any) -> Any:
        if once[0]:
            once[0] = False
            gates.go.set()
            assert came.wait(WAIT)
        return real(s)

    monkeypatch.setattr(_scheduler, "status", status)

    def hold() -> None:
        assert gates.started.acquire(timeout=WAIT)
        ex.stats()

    return hold


@pytest.fixture
def main_handles_report(
    ex: Executor, gates: Gates, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], None]:
    """`_main_handles` of a backend's report: the running `gate` tool's."""
    return _main_handles(ex, gates, monkeypatch, Report, Reports)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def _finished_once(ex: Executor, recorder: bus.Recorder, ids: list[str]) -> None:
    recorder.wait_for(bus.FINISHED, len(ids), timeout=WAIT, where=lambda e: e.call_id in ids)
    assert ex.drain_events(WAIT)  # (a second one would be delivered by now)
    got = [e.call_id for e in recorder.of(bus.FINISHED) if e.call_id in ids]
    assert sorted(got) == sorted(ids), got


def _settled(ex: Executor) -> None:
    st = ex.stats()
    assert st.in_flight == 0 and st.queued == 0
    ended = st.ok + st.error + st.timeout + st.cancelled + st.rejected + st.deferred
    assert ended == st.submitted
    assert not ex._scheduler.runs_open


# -- a cancel of another thread's call, cut short -------------------------------------


def test_a_cancel_cut_short_after_its_claim_still_ends_the_call(
    ex: Executor, gates: Gates, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `Run.interrupt` is entered (the async job's `call_soon_threadsafe`
    # in the storm): the attempt is claimed, its cancel never told to it.
    raised = _interrupt_once(monkeypatch, Run, "interrupt")
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="a", name="hold", arguments={"i": 1})))
    assert gates.started.acquire(timeout=WAIT)
    with pytest.raises(KeyboardInterrupt):
        ex.cancel(call_id="a")
    assert raised[0] == 1
    _caller_done(
        ex,
        recorder,
        t,
        ["a"],
        "the caller of the cancelled call was never released",
        out=out,
        status="cancelled",
    )


@pytest.mark.parametrize("after", [False, True], ids=["entering", "returned"])
def test_a_cancel_cut_short_before_tool_finished_announces_it_once(
    ex: Executor,
    gates: Gates,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    after: bool,
) -> None:
    # `finish` set the result, then was cut short announcing `tool:cancelled`
    # (its `tool:finished` comes after).
    raised = _interrupt_once(
        monkeypatch, Emitter, "emit", after=after, when=lambda self, name, e: name == sig.CANCELLED
    )
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="b", name="hold", arguments={"i": 1})))
    assert gates.started.acquire(timeout=WAIT)
    with pytest.raises(KeyboardInterrupt):
        ex.cancel(call_id="b")
    assert raised[0] == 1
    _caller_done(ex, recorder, t, ["b"], out=out, status="cancelled")


def test_a_finish_cut_short_once_tool_finished_was_queued_does_not_announce_it_again(
    ex: Executor, gates: Gates, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Numbered and queued for its receivers (`Announcer.announce` returned).
    real = Announcer.announce
    raised = [0]

    def announce(self: Announcer, name: str, event: Any) -> None:
        real(self, name, event)
        main = threading.current_thread() is threading.main_thread()
        if name == sig.FINISHED and main and not raised[0]:
            raised[0] += 1
            raise KeyboardInterrupt

    monkeypatch.setattr(Announcer, "announce", announce)
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="c", name="hold", arguments={"i": 1})))
    assert gates.started.acquire(timeout=WAIT)
    with pytest.raises(KeyboardInterrupt):
        ex.cancel(call_id="c")
    assert raised[0] == 1
    _caller_done(ex, recorder, t, ["c"], out=out, status="cancelled")


# -- another thread's report, handled by the main thread --------------------------------


@pytest.mark.parametrize("times", [1, 2], ids=["once", "again-while-mending"])
def test_a_close_cut_short_before_waking_the_caller_still_wakes_it(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
    times: int,
) -> None:
    raised = _interrupt_once(monkeypatch, ThreadWaiter, "release", times=times)
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="d", name="gate", arguments={"i": 4})))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert raised[0] == times
    _caller_done(
        ex,
        recorder,
        t,
        ["d"],
        "the call's result was made, its caller never woken",
        out=out,
        status="ok",
        output=4,
    )


def test_a_batch_whose_books_were_cut_short_starts_its_next_call(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
) -> None:
    # Two mutating calls, one after the other: the first one's end queues the
    # second, and is cut short as it does.
    raised = _interrupt_once(monkeypatch, Capacity, "enqueue")
    _two_in_a_row_end(ex, recorder, main_handles_report, raised, "e")


_ANY = object()


def _caller_done(
    ex: Executor,
    recorder: bus.Recorder,
    t: threading.Thread,
    ids: list[str],
    why: str = "",
    *,
    out: list[Any] | None = None,
    status: str = "",
    output: Any = _ANY,
) -> None:
    """The caller's thread `t` returned (`why`, if not); with `out`, its
    result has `status` (and `output`); each call of `ids` was announced
    once, and nothing is left open."""
    t.join(WAIT)
    assert not t.is_alive(), why
    if out is not None:
        assert out[0].status == status
        if output is not _ANY:
            assert out[0].output == output
    _finished_once(ex, recorder, ids)
    _settled(ex)


def _two_in_a_row_end(
    ex: Executor,
    recorder: bus.Recorder,
    main_handles_report: Callable[[], None],
    raised: list[int],
    prefix: str,
) -> None:
    """A batch of two mutating calls (`gate`, then `write`), the first one's end
    cut short once on the main thread (`raised`): the second still starts,
    both end `ok`, each announced once, nothing left open."""
    calls = [
        ToolCall(id=f"{prefix}1", name="gate", arguments={"i": 1}),
        ToolCall(id=f"{prefix}2", name="write", arguments={"i": 2}),
    ]
    t, out = _in_thread(lambda: ex.execute_batch(calls))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert raised[0] == 1
    _caller_done(
        ex, recorder, t, [f"{prefix}1", f"{prefix}2"], "the batch's second call never started"
    )
    assert [r.status for r in out[0].results] == ["ok", "ok"]


def test_a_bug_in_mending_is_logged_and_never_raised_nor_left_owed(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Mending the call raises an ordinary exception (after doing its work): the
    # interrupted thread gets its KeyboardInterrupt, the bug is logged, and
    # later calls on any thread are not handed it.
    raised = _interrupt_once(monkeypatch, ThreadWaiter, "release")
    real = _mend._mend_run

    def buggy(sv: Any, run: Run, torn: Any) -> None:
        real(sv, run, torn)
        raise RuntimeError("a bug in the mending")

    monkeypatch.setattr(_mend, "_mend_run", buggy)
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="g", name="gate", arguments={"i": 4})))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert raised[0] == 1
    assert ex._scheduler._interrupt is None
    assert "supervisor error mending call g" in caplog.text
    assert "a bug in the mending" in caplog.text
    t.join(WAIT)
    assert not t.is_alive() and out[0].status == "ok"
    t2, out2 = _in_thread(lambda: ex.execute(ToolCall(id="h", name="write", arguments={"i": 5})))
    t2.join(WAIT)
    assert not t2.is_alive() and out2[0].status == "ok"
    assert ex.execute(ToolCall(id="i", name="write", arguments={"i": 6})).status == "ok"
    _finished_once(ex, recorder, ["g", "h", "i"])
    _settled(ex)


def test_a_second_ctrl_c_as_mending_begins_still_mends_without_a_later_post(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
) -> None:
    # The first lands as the report's handler wakes the caller, the second as
    # `mend` is entered: nothing else is posted after, and no timeout backs
    # the caller's wait up; the interrupted thread mends once it let go.
    raised = _interrupt_once(monkeypatch, ThreadWaiter, "release")
    again = _interrupt_once(monkeypatch, _scheduler, "mend")
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="j", name="gate", arguments={"i": 7})))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert (raised[0], again[0]) == (1, 1)
    assert ex._scheduler._interrupt is None
    _caller_done(
        ex,
        recorder,
        t,
        ["j"],
        "mending was left owed, the caller never woken",
        out=out,
        status="ok",
        output=7,
    )


def test_a_batch_end_cut_short_before_waking_its_caller_still_wakes_it(
    ex: Executor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    main_handles_report: Callable[[], None],
) -> None:
    # Its last call's close ends the batch (`finish_batch`), cut short as it
    # wakes the batch's caller.
    raised = _interrupt_once(monkeypatch, ThreadWaiter, "release")
    calls = [ToolCall(id="k", name="gate", arguments={"i": 1})]
    t, out = _in_thread(lambda: ex.execute_batch(calls))
    with pytest.raises(KeyboardInterrupt):
        main_handles_report()
    assert raised[0] == 1
    t.join(WAIT)
    assert not t.is_alive(), "the batch ended, its caller never woken"
    assert [r.status for r in out[0].results] == ["ok"]
    _finished_once(ex, recorder, ["k"])
    _settled(ex)


def test_mending_finds_nothing_to_do_on_the_common_path(ex: Executor) -> None:
    # Nothing torn is kept once calls end normally.
    assert ex.execute(ToolCall(id="f", name="write", arguments={"i": 1})).status == "ok"
    assert ex._scheduler._torn == {} and ex._scheduler._interrupt is None


@pytest.fixture(autouse=True)
def _no_leftovers(ex: Executor) -> Iterator[None]:
    yield
    assert ex._scheduler._interrupt is None
