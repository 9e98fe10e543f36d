"""Process calls sent from the dispatching thread (backends/_direct.py).

A warm call whose steps up to the tool run no user code is sent by the thread
that dispatches it and finished on the executor's loop by its reply. These
tests check that it is taken when it should be, that what follows the send
(hooks, failures) runs on the loop, and force, with events and patches and no
sleeps, the two races it brings: the reply landing before the dispatching
thread is out of the steps, and the reply against the deadline both ways.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests import process_tools as pt
from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolResult, bus
from toolbus.actors._scheduler import Scheduler
from toolbus.backends import ProcessBackend
from toolbus.backends._direct import Direct
from toolbus.backends._procs import WorkerProcess

# The slow tier (tests/README.md): process and Ray workers started and killed.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


# The calls that must finish in time are warm calls of a tiny function; on a
# loaded machine one may take longer than 0.5 s. The hung ones wait this out.
WARM_BOUND = 2.0


def call(name: str, id: str = "", **arguments: object) -> ToolCall:
    c = ToolCall(name=name, arguments=arguments)
    return c.model_copy(update={"id": id}) if id else c


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The call ids of the jobs started as direct calls."""
    started: list[str] = []
    original = Direct.start

    def start(self: Direct) -> None:
        started.append(self.job.run.call.id)
        original(self)

    monkeypatch.setattr(Direct, "start", start)
    return started


def _on_loop(ex: Executor, seen: list[bool]) -> Callable[[ToolCall, ToolResult], ToolResult]:
    def post(c: ToolCall, result: ToolResult) -> ToolResult:
        seen.append(ex._loop.owns_current_thread())
        return result

    return post


def test_a_warm_call_is_sent_directly_and_finished_on_the_loop(
    make_executor: MakeExecutor, direct: list[str]
) -> None:
    seen: list[bool] = []
    hooks: list[Any] = []
    ex = make_executor(pt.registry, timeout=20, post_call=hooks)
    hooks.append(_on_loop(ex, seen))
    ex._post_call = tuple(hooks)
    first = ex.execute(call("pid_or_hang", id="cold"))
    assert first.status == "ok"
    assert direct == []  # the tool's pool did not exist yet: the loop path started it
    second = ex.execute(call("pid_or_hang", id="warm"))
    assert (second.status, second.output) == ("ok", first.output)  # the same worker
    assert direct == ["warm"]
    assert seen == [True, True]  # post-call hooks ran on the loop both times
    r = ex.execute(call("fails", id="fails1"))  # cold
    r = ex.execute(call("fails", id="fails2"))
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert "bad input value" in (r.error or "")
    assert direct == ["warm", "fails2"]
    assert ex.stats().late_results == 0


def test_user_code_before_the_tool_keeps_the_call_on_the_loop(
    make_executor: MakeExecutor, direct: list[str]
) -> None:
    threads: list[bool] = []

    def pre(c: ToolCall) -> ToolCall:
        threads.append(ex._loop.owns_current_thread())
        return c

    ex = make_executor(pt.registry, timeout=20, pre_call=[pre])
    for _ in range(3):
        assert ex.execute(call("square", x=3)).output == 9
    assert direct == []
    assert threads == [True, True, True]


def test_a_hung_warm_call_is_killed_and_its_caller_freed(
    make_executor: MakeExecutor, direct: list[str], recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=WARM_BOUND)
    pid = ex.execute(call("pid_or_hang")).output
    r = ex.execute(call("pid_or_hang", id="hung", hang=True))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert direct == ["hung"]
    [killed] = recorder.wait_for(bus.KILLED)
    assert (killed.pid, killed.reason, killed.call_id) == (pid, "timeout", "hung")
    ex.drain_events(timeout=10)
    assert [e.call_id for e in recorder.of(bus.FINISHED)].count("hung") == 1
    stats = ex.stats()
    assert (stats.killed_workers, stats.late_results, stats.timeouts) == (1, 0, 1)
    again = ex.execute(call("pid_or_hang"))  # in the replacement
    assert again.status == "ok"
    assert again.output != pid


def test_a_warm_worker_that_exits_is_a_crash_said_by_its_exit_status(
    make_executor: MakeExecutor, direct: list[str]
) -> None:
    ex = make_executor(pt.registry, timeout=20)
    pid = ex.execute(call("pid_or_exit")).output
    r = ex.execute(call("pid_or_exit", id="exits", code=7))
    assert direct == ["exits"]
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_CRASHED)
    assert "its worker process exited with code 7" in (r.error or "")
    again = ex.execute(call("pid_or_exit"))
    assert again.status == "ok"
    assert again.output != pid


def test_a_call_that_cannot_be_sent_fails_on_the_loop_and_keeps_its_worker(
    make_executor: MakeExecutor, direct: list[str]
) -> None:
    seen: list[bool] = []
    hooks: list[Any] = []
    backend = ProcessBackend(context_vars=[pt.tenant])
    ex = make_executor(pt.registry, backends={"process": backend}, timeout=20, post_call=hooks)
    hooks.append(_on_loop(ex, seen))
    ex._post_call = tuple(hooks)
    pid = ex.execute(call("worker_pid")).output
    token = pt.tenant.set(lambda: None)  # type: ignore[arg-type]  # cannot be pickled
    try:
        r = ex.execute(call("worker_pid", id="unsendable"))
    finally:
        pt.tenant.reset(token)
    assert direct == ["unsendable"]
    assert r.status == "error"
    assert "cannot be sent to its worker process" in (r.error or "")
    assert seen == [True, True]  # its post-call hook too, though the send failed on the caller's
    assert ex.execute(call("worker_pid")).output == pid  # the worker was given back


def test_an_async_post_call_hook_finishes_a_direct_call_as_a_task(
    make_executor: MakeExecutor, direct: list[str]
) -> None:
    async def post(c: ToolCall, result: ToolResult) -> ToolResult:
        await asyncio.sleep(0)
        return result.model_copy(update={"metadata": {"hooked": True}})

    ex = make_executor(pt.registry, timeout=20, post_call=[post])
    ex.execute(call("square", x=1))
    r = ex.execute(call("square", id="hooked", x=4))
    assert direct == ["hooked"]
    assert (r.output, r.metadata) == (16, {"hooked": True})


# -- the races, forced ----------------------------------------------------------------


def test_a_reply_that_lands_before_the_send_returns_resumes_the_steps_once(
    make_executor: MakeExecutor, direct: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = make_executor(pt.registry, timeout=20)
    assert ex.execute(call("square", x=2)).output == 4
    order: list[str] = []
    replied = threading.Event()
    original_replied, original_sent = Direct.replied, Direct._sent
    original_send = WorkerProcess.send_now

    def on_replied(self: Direct, reply: Any) -> None:
        order.append("replied")
        original_replied(self, reply)
        replied.set()

    def on_sent(self: Direct) -> None:
        order.append("sent")
        original_sent(self)

    def send_now(self: WorkerProcess, data: bytes) -> bool:
        sent = original_send(self, data)
        # The dispatching thread holds on, still inside the steps, until the
        # reply has landed on the loop thread.
        assert replied.wait(30), "the reply never came"
        return sent

    monkeypatch.setattr(Direct, "replied", on_replied)
    monkeypatch.setattr(Direct, "_sent", on_sent)
    monkeypatch.setattr(WorkerProcess, "send_now", send_now)
    r = ex.execute(call("square", id="raced", x=5))
    assert (r.status, r.output) == ("ok", 25)
    assert direct == ["raced"]
    assert order == ["replied", "sent"]
    monkeypatch.undo()
    assert ex.execute(call("square", x=6)).output == 36  # its worker went back to the pool


def test_a_reply_held_past_the_deadline_is_a_late_result_never_a_second_result(
    make_executor: MakeExecutor,
    direct: list[str],
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ex = make_executor(pt.registry, timeout=WARM_BOUND)
    pid = ex.execute(call("worker_pid")).output  # mutating: a timeout is never retried
    held: list[tuple[Direct, Any]] = []
    arrived = threading.Event()
    original = Direct.replied

    def hold(self: Direct, reply: Any) -> None:
        if self.job.run.call.id != "raced":
            original(self, reply)
            return
        held.append((self, reply))  # the worker's reply, then its end once killed
        arrived.set()

    monkeypatch.setattr(Direct, "replied", hold)
    # The reply is in, held back from the steps, until the deadline has
    # settled the attempt, killed the worker and freed the caller.
    r = ex.execute(call("worker_pid", id="raced"))
    assert arrived.is_set()
    assert direct == ["raced"]
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    [killed] = recorder.wait_for(bus.KILLED)
    assert (killed.call_id, killed.pid) == ("raced", pid)
    first, reply = held[0]
    assert reply["kind"] == "ok"
    monkeypatch.undo()
    original(first, reply)  # now the reply reaches the steps (from this thread, as Ray's does)
    [late] = recorder.wait_for(bus.LATE_RESULT)
    assert (late.call_id, late.status) == ("raced", "ok")
    ex.drain_events(timeout=10)
    finished = [e for e in recorder.of(bus.FINISHED) if e.call_id == "raced"]
    assert [e.result.status for e in finished] == ["timeout"]
    stats = ex.stats()
    assert (stats.timeouts, stats.late_results, stats.killed_workers) == (1, 1, 1)
    assert (stats.ok, stats.timeout) == (1, 1)
    again = ex.execute(call("worker_pid"))  # the killed worker was not put back
    assert again.status == "ok"
    assert again.output != pid


def test_a_reply_that_settles_before_the_deadline_stands_and_its_worker_lives(
    make_executor: MakeExecutor,
    direct: list[str],
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handled = threading.Event()
    original = Scheduler._on_deadline

    def on_deadline(self: Scheduler, msg: Any) -> None:
        original(self, msg)
        if msg.run.call.id == "raced":
            handled.set()

    monkeypatch.setattr(Scheduler, "_on_deadline", on_deadline)

    def post(c: ToolCall, result: ToolResult) -> ToolResult:
        # The reply settled the attempt; its post-call hook holds the call
        # until the deadline has fired and been handled.
        if c.id == "raced":
            assert handled.wait(30), "the deadline never fired"
        return result

    ex = make_executor(pt.registry, timeout=WARM_BOUND, post_call=[post])
    pid = ex.execute(call("worker_pid")).output
    r = ex.execute(call("worker_pid", id="raced"))
    assert handled.is_set()
    assert direct == ["raced"]
    assert (r.status, r.output) == ("ok", pid)
    ex.drain_events(timeout=10)
    assert recorder.of(bus.KILLED) == []
    assert recorder.of(bus.LATE_RESULT) == []
    stats = ex.stats()
    assert (stats.timeouts, stats.late_results, stats.killed_workers) == (0, 0, 0)
    assert ex.execute(call("worker_pid")).output == pid  # the same worker, never killed
