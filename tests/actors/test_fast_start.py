"""A lone call that finds nothing queued and room starts inside its own
submission, without the ready queue (`_admission.py`). That must decide what
the queue and one pump would have: these tests post messages while another
thread holds the scheduler's lock (as a worker reporting, `stats()` or any
handler would), so that they are handled together, and check the outcome
is the queue's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry
from toolbus.backends import Job, ThreadBackend
from toolbus.bus import EXECUTING, FINISHED, Recorder


@contextmanager
def lock_held(ex: Executor) -> Iterator[None]:
    """Hold the scheduler's lock as a handler would; on leaving, let go and
    handle what was posted meanwhile, as the holder does before it returns."""
    scheduler = ex._scheduler
    scheduler.lock.acquire()
    scheduler.owner = threading.get_ident()
    try:
        yield
    finally:
        scheduler.owner = None
        scheduler.lock.release()
        scheduler._settle()


def _on_a_thread(work: object) -> None:
    t = threading.Thread(target=work)  # type: ignore[arg-type]
    t.start()
    t.join(10)
    assert not t.is_alive()


def test_a_higher_priority_call_posted_behind_a_lone_call_still_starts_first() -> None:
    started: list[str] = []
    first, gate = threading.Event(), threading.Event()
    reg = ToolRegistry()

    @reg.tool
    def work(tag: str) -> str:
        started.append(tag)
        first.set()
        gate.wait(10)
        return tag

    with Executor(reg, max_parallel=1, backend="thread") as ex:
        gate.set()
        assert ex.execute(ToolCall(name="work", arguments={"tag": "warm"})).status == "ok"
        gate.clear()
        first.clear()
        started.clear()
        handles = []
        with lock_held(ex):
            for tag, priority in (("low", 0), ("high", 5)):
                call = ToolCall(id=tag, name="work", arguments={"tag": tag})
                _on_a_thread(lambda c=call, p=priority: handles.append(ex.submit(c, priority=p)))
            assert len(ex._scheduler._pending) == 2  # both wait to be handled together
        assert first.wait(10)
        assert started == ["high"]  # the queue's choice: the higher priority first
        gate.set()
        assert [h.result(10).status for h in handles] == ["ok", "ok"]
        assert started == ["high", "low"]


def test_a_call_cancelled_before_its_submission_was_handled_never_starts() -> None:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool(backend="thread")
    def side_effect(tag: str) -> str:
        ran.append(tag)
        return tag

    with Executor(reg, max_parallel=4) as ex, Recorder(EXECUTING, FINISHED, sender=ex) as rec:
        assert ex.execute(ToolCall(name="side_effect", arguments={"tag": "warm"})).status == "ok"
        ran.clear()
        handles = []
        with lock_held(ex):

            def submit_then_cancel() -> None:
                h = ex.submit(ToolCall(id="c1", name="side_effect", arguments={"tag": "c1"}))
                h.cancel()
                handles.append(h)

            _on_a_thread(submit_then_cancel)
            assert len(ex._scheduler._pending) == 2  # its Submit, then its Cancel
        r = handles[0].result(10)
        assert (r.status, r.attempts) == ("cancelled", 0)
        assert ex.stats().abandoned_total == 0
        rec.wait_for(FINISHED, 2, timeout=10)  # the warm-up's and c1's
        assert [n for n, e in rec.events if e.call_id == "c1"] == [FINISHED]
    assert ran == []


def test_a_backend_letting_a_base_exception_through_leaves_the_rest_of_its_batch_to_run() -> None:
    # A backend's CancelledError (a BaseException) as it takes a job ends
    # that call at once, as an Exception would (its job was never taken: it
    # would otherwise hold its slot until its deadline, or for ever without
    # one). The batch's later calls, which start inside its submission when
    # they have room, still start.
    class Flaky(ThreadBackend):
        raised = False

        def submit(self, job: Job) -> None:
            if not self.raised:
                self.raised = True
                raise asyncio.CancelledError("submit interrupted")
            super().submit(job)

    reg = ToolRegistry()
    flaky = Flaky()
    flaky.name = "flaky"

    @reg.tool(read_only=True, backend="flaky", timeout=0.2)
    def t(tag: str) -> str:
        return tag

    with Executor(reg, backends={"flaky": flaky}, max_parallel=4) as ex:
        results = ex.execute_batch(
            [ToolCall(id=f"c{i}", name="t", arguments={"tag": f"c{i}"}) for i in range(4)]
        )
        assert [r.status for r in results] == ["rejected", "ok", "ok", "ok"]
        assert results[0].error_code == ErrorCode.TOOL_UNAVAILABLE
        assert "its backend failed (CancelledError)" in (results[0].error or "")
        assert ex.stats().in_flight == 0
