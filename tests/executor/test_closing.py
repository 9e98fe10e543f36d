"""`close()` cut short (a signal's `KeyboardInterrupt` on the closing thread)
is finished by the next `close()`.

Each step of closing is interrupted in turn, before it begins and just after
it ends (a signal landing there), by wrapping it as a signal handler raising
there would. The next `close()` must leave the executor wholly closed: its
calls ended once, its journal closed, its timer and loop threads gone.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.concurrency_tools import finished, in_thread
from tests.conftest import MakeExecutor
from toolbus import ErrorCode, ToolCall, ToolContext, ToolRegistry, bus
from toolbus._executor import _closing


def _registry(started: threading.Event) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def hold(ctx: ToolContext) -> str:
        started.set()
        ctx.wait_cancelled(30)  # until cancelled (the 30 s are a hang guard)
        return "held"

    @reg.tool()
    def write(x: int) -> int:
        return x

    return reg


STEPS = [step.__name__ for step in _closing._STEPS]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("step", STEPS)
def test_a_close_cut_short_is_finished_by_the_next(
    make_executor: MakeExecutor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    step: str,
    when: str,
) -> None:
    started = threading.Event()
    ex = make_executor(_registry(started), journal=str(tmp_path / "journal.db"))
    assert ex.execute(ToolCall(id="w", name="write", arguments={"x": 1})).output == 1
    th, out = in_thread(lambda: ex.execute(ToolCall(id="h", name="hold", arguments={})))
    assert started.wait(20)
    threads = (ex._timers._thread, ex._loop._thread)

    i = STEPS.index(step)
    real = _closing._STEPS[i]

    def interrupted(*args: Any) -> None:
        if when == "after":
            real(*args)
        raise KeyboardInterrupt

    steps = list(_closing._STEPS)
    steps[i] = interrupted
    monkeypatch.setattr(_closing, "_STEPS", tuple(steps))
    with pytest.raises(KeyboardInterrupt):
        ex.close()
    assert ex.closed
    monkeypatch.undo()

    ex.close()
    assert finished(th, out)
    held = out["r"]
    assert (held.status, held.error_code) == ("cancelled", ErrorCode.CANCELLED)
    ends = recorder.wait_for(bus.FINISHED, 2, timeout=20)
    assert sorted(e.call_id for e in ends) == ["h", "w"]  # each once
    assert ex.journal is not None and ex.journal.closed
    for thread in threads:
        if thread is not None:
            thread.join(5)
            assert not thread.is_alive(), thread.name
    # Closed for good: a third close returns at once, a call ends cancelled.
    ex.close()
    after = ex.execute(ToolCall(id="late", name="write", arguments={"x": 2}))
    assert after.status == "cancelled"
    assert recorder.of(bus.FINISHED)[-1].call_id == "late"


def test_a_close_cut_short_inside_the_scheduler_ends_every_call_on_the_next(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut short while the scheduler ends the open calls (the closing thread
    acts for it): the next `close()` ends those it had not reached."""
    from toolbus.actors._completion import Completion

    started = threading.Event()
    ex = make_executor(_registry(started), max_parallel=4)
    callers = []
    for i in range(3):
        started.clear()
        callers.append(in_thread(lambda i=i: ex.execute(ToolCall(id=f"h{i}", name="hold"))))
        assert started.wait(20)
    real = Completion._cancel_run
    calls = [0]

    def cancel_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:  # the first call ended, the second not yet
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Completion, "_cancel_run", cancel_run)
    with pytest.raises(KeyboardInterrupt):
        ex.close()
    monkeypatch.undo()
    ex.close()
    for th, out in callers:
        assert finished(th, out)
        assert out["r"].status == "cancelled", out["r"]


def test_a_close_cut_short_before_its_first_step_is_finished_by_the_next(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C as `close()` reads the clock for its budget (a signal's
    handler runs as a call returns): the next `close()` does it all."""
    import time

    ex = make_executor(_registry(threading.Event()))
    threads = (ex._timers._thread, ex._loop._thread)

    class Clock:
        def monotonic(self) -> float:
            monkeypatch.undo()  # once
            raise KeyboardInterrupt

    monkeypatch.setattr(_closing, "time", Clock())
    with pytest.raises(KeyboardInterrupt):
        ex.close()
    assert _closing.time is time
    ex.close()
    assert ex._close_step == len(_closing._STEPS)
    assert ex.execute(ToolCall(id="late", name="write", arguments={"x": 2})).status == "cancelled"
    for thread in threads:
        if thread is not None:
            thread.join(5)
            assert not thread.is_alive(), thread.name
