"""Faulty subscribers and hooks change nothing but what they own."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from tests.concurrency_tools import finished as _finished
from tests.concurrency_tools import in_thread as _in_thread
from tests.concurrency_tools import ok_registry as _ok_registry
from tests.conftest import HANG_TIMEOUT, MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, ToolResult, bus


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo(text: str) -> str:
        return text

    @reg.tool
    def fail() -> None:
        raise RuntimeError("tool failed")

    return reg


CALLS = [
    ToolCall(id="a", name="echo", arguments={"text": "one"}),
    ToolCall(id="b", name="fail"),
    ToolCall(id="c", name="nope"),
    ToolCall(id="d", name="echo", arguments='{"text": '),
    ToolCall(id="e", name="echo", arguments={"text": "two"}),
]


def _outcome(ex: Executor) -> list[tuple[str, Any, Any]]:
    return [(r.status, r.output, r.error_code) for r in ex.execute_batch(CALLS)]


def test_raising_subscribers_change_nothing(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    baseline_ex = make_executor(_registry())
    with bus.Recorder(sender=baseline_ex) as base:
        expected = _outcome(baseline_ex)
        baseline_ex.drain_events()

    ex = make_executor(_registry())

    def explode(sender: object, **kw: object) -> None:
        raise RuntimeError("subscriber bug")

    for name in bus.ALL_SIGNALS:
        bus.signal(name).connect(explode, sender=ex, weak=False)
    try:
        with bus.Recorder(sender=ex) as rec, caplog.at_level(logging.ERROR, "toolbus.bus"):
            assert _outcome(ex) == expected
            ex.drain_events()
    finally:
        for name in bus.ALL_SIGNALS:
            bus.signal(name).disconnect(explode)
    # The other receiver saw exactly what it sees without the faulty one.
    assert sorted(rec.names()) == sorted(base.names())
    assert any("subscriber bug" in r.getMessage() for r in caplog.records)


def test_a_hanging_subscriber_never_delays_results(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry())
    stuck = threading.Event()
    unblock = threading.Event()

    def hang(sender: object, **kw: object) -> None:
        stuck.set()
        unblock.wait(30)

    bus.signal(bus.EXECUTING).connect(hang, sender=ex, weak=False)
    try:
        first = ex.execute(ToolCall(name="echo", arguments={"text": "x"}))
        assert stuck.wait(5)
        # The bus thread is stuck in the subscriber; results still flow.
        assert _outcome(ex)[0] == ("ok", "one", None)
        assert first.status == "ok"
    finally:
        unblock.set()
        bus.signal(bus.EXECUTING).disconnect(hang)


def test_a_slow_subscriber_is_slow_alone(make_executor: MakeExecutor) -> None:
    # A plain subscription: `isolated=True` is no longer needed (and changes nothing).
    ex = make_executor(_registry())
    gate = threading.Event()
    slow_seen: list[str] = []

    def slow(sender: object, *, event: Any, signal: str) -> None:
        gate.wait(10)
        slow_seen.append(signal)

    with (
        bus.subscribe(slow, bus.FINISHED, sender=ex),
        bus.Recorder(bus.FINISHED, sender=ex) as fast,
    ):
        _outcome(ex)
        fast.wait_for(bus.FINISHED, 5)  # others are served while `slow` is blocked
        assert slow_seen == []
        gate.set()
        assert ex.drain_events()
    assert slow_seen == [bus.FINISHED] * 5


def test_raising_hooks_are_contained(make_executor: MakeExecutor) -> None:
    def pre(call: ToolCall) -> ToolCall:
        if call.id == "a":
            raise PermissionError("user may not echo")
        return call

    def post(call: ToolCall, result: ToolResult) -> ToolResult:
        if call.id == "e":
            raise KeyError("post hook bug")
        return result

    def masker(call: ToolCall) -> Any:
        raise RuntimeError("masker bug")

    def concurrency(calls: Sequence[ToolCall]) -> int:
        raise RuntimeError("concurrency bug")

    ex = make_executor(
        _registry(), pre_call=[pre], post_call=[post], masker=masker, concurrency=concurrency
    )
    with bus.Recorder(bus.EXECUTING, sender=ex) as rec:
        out = ex.execute_batch(CALLS)
        ex.drain_events()
    a, b, c, d, e = out
    assert (a.status, a.error_code, a.error) == (
        "rejected", ErrorCode.TOOL_NOT_ALLOWED, "PermissionError: user may not echo"
    )  # fmt: skip
    assert (b.status, b.error) == ("error", "RuntimeError: tool failed")
    assert c.error_code is ErrorCode.TOOL_NOT_FOUND
    assert d.error_code is ErrorCode.INVALID_ARGUMENTS
    assert (e.status, e.error) == ("error", "post-call hook failed: KeyError: 'post hook bug'")
    # A broken masker publishes no arguments rather than raw ones.
    assert [ev.arguments for ev in rec.of(bus.EXECUTING)] == [None, None]


def test_raising_authorize_rejects(make_executor: MakeExecutor) -> None:
    def authorize(call: ToolCall) -> bool:
        raise LookupError("policy service down")

    ex = make_executor(_registry(), authorize=authorize)
    r = ex.execute(ToolCall(name="echo", arguments={"text": "x"}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert r.error == "LookupError: policy service down"


def test_hooks_returning_garbage(make_executor: MakeExecutor) -> None:
    ex = make_executor(
        _registry(),
        pre_call=[lambda call: None if call.id == "a" else call],  # type: ignore[arg-type,return-value]
        post_call=[lambda call, result: "nope" if call.id == "e" else result],  # type: ignore[arg-type,return-value]
    )
    a, *_, e = ex.execute_batch(CALLS)
    assert a.status == "rejected" and a.error is not None and "not a ToolCall" in a.error
    assert e.status == "error" and e.error is not None and "not a ToolResult" in e.error


def test_hanging_hooks_end_in_timeouts(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    def pre(call: ToolCall) -> ToolCall:
        if call.id == "pre":
            release.wait()
        return call

    def post(call: ToolCall, result: ToolResult) -> ToolResult:
        if call.id == "post":
            release.wait()
        return result

    ex = make_executor(_registry(), timeout=60, hook_grace=0.2, pre_call=[pre], post_call=[post])
    # Each call its own timeout, as a busy machine needs: the hung pre-call
    # hook's short one; 2 s for the call whose tool must return before its deadline
    # (so that its post-call hook is what hangs); 60 s for the one that must end ok.
    handles = [
        ex.submit(ToolCall(id="pre", name="echo", arguments={"text": "x"}), timeout=HANG_TIMEOUT),
        ex.submit(ToolCall(id="post", name="echo", arguments={"text": "y"}), timeout=2),
        ex.submit(ToolCall(id="ok", name="echo", arguments={"text": "z"})),
    ]
    hung_pre, hung_post, fine = (h.result(60) for h in handles)
    assert (hung_pre.status, hung_pre.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert (
        hung_pre.error is not None
        and "pre-call steps (hooks, masking, content scanning) did not return" in hung_pre.error
    )
    assert (hung_post.status, hung_post.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert hung_post.error is not None and "hooks did not return" in hung_post.error
    assert fine.output == "z"


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, GeneratorExit])
def test_base_exceptions_in_tools_stop_no_actor(make_executor: MakeExecutor, exc: type) -> None:
    import pykka

    class HostActor(pykka.ThreadingActor):  # an actor of the embedding application
        use_daemon_thread = True

        def on_receive(self, message: Any) -> Any:
            return "alive"

    host = HostActor.start()
    reg = ToolRegistry()

    @reg.tool
    def nasty() -> None:
        raise exc("from a tool")

    @reg.tool(read_only=True)
    def fine() -> str:
        return "fine"

    try:
        ex = make_executor(reg)
        r = ex.execute(ToolCall(name="nasty"))
        assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
        assert r.error is not None and exc.__name__ in r.error
        assert host.ask("ping", timeout=5) == "alive"
        assert ex.execute(ToolCall(name="fine")).output == "fine"
        assert ex.execute(ToolCall(name="nasty")).status == "error"  # the same worker again
    finally:
        host.stop()


def test_no_toolbus_thread_keeps_the_process_alive(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def a() -> int:
        return 1

    @reg.tool(read_only=True)
    def s() -> int:
        return 2

    before = set(threading.enumerate())
    ex = make_executor(reg)
    ex.execute_batch([ToolCall(name="a"), ToolCall(name="s")])
    new = set(threading.enumerate()) - before
    assert new, "the executor should have started its threads"
    assert all(t.daemon for t in new), [t.name for t in new if not t.daemon]


def test_stop_on_error_lets_running_calls_finish(make_executor: MakeExecutor) -> None:
    started = threading.Barrier(3, timeout=5)
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def slow_ok(i: int) -> int:
        started.wait()
        return i

    @reg.tool(read_only=True)
    def quick_fail() -> None:
        started.wait()
        raise RuntimeError("first failure")

    @reg.tool
    def later_write() -> str:
        return "must not run"

    ex = make_executor(reg, max_parallel=3)
    out = ex.execute_batch(
        [
            ToolCall(name="slow_ok", arguments={"i": 1}),
            ToolCall(name="quick_fail"),
            ToolCall(name="slow_ok", arguments={"i": 2}),
            ToolCall(name="later_write"),
            ToolCall(name="slow_ok", arguments={"i": 3}),
        ],
        stop_on_error=True,
    )
    assert [r.status for r in out] == ["ok", "error", "ok", "cancelled", "cancelled"]
    assert [r.error_code for r in out][3:] == [ErrorCode.ABORTED, ErrorCode.ABORTED]
    assert out[3].error is not None and "ended error" in out[3].error
    assert out.summary.executed == 3


def test_closed_subscriptions_leave_no_receiver_behind(make_executor: MakeExecutor) -> None:
    # Receivers of earlier tests' executors leave blinker when those executors
    # are collected: collected now, whatever ran before (tests run in any order).
    gc.collect()
    ex = make_executor(_registry())
    before = len(bus.signal(bus.EXECUTED).receivers)
    for isolated in (False, True):
        sub = bus.subscribe(lambda *a, **k: None, bus.EXECUTED, sender=ex, isolated=isolated)
        assert ex._emitter.wants(bus.EXECUTED)
        sub.close()
    with bus.Recorder(bus.EXECUTED, sender=ex):
        pass
    assert len(bus.signal(bus.EXECUTED).receivers) == before
    # Nothing of ours makes the emitter want the signal (it would only for a
    # receiver some other test's executor still has, which `before` counts).
    assert ex._emitter.wants(bus.EXECUTED) is (before > 0)


def test_null_publisher_builds_no_events(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry(), publisher=bus.NullPublisher())
    with bus.Recorder(sender=ex) as rec:
        assert not ex._emitter.wants(bus.FINISHED)
        assert ex.execute(ToolCall(name="echo", arguments={"text": "x"})).output == "x"
        ex.drain_events()
    assert rec.events == []


def _subprocess(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]


def test_subscriber_raising_base_exception_is_contained() -> None:
    """A subscriber raising SystemExit hung the batch and stopped other executors' actors
    (concurrency review)."""
    out = _subprocess(
        """
        import threading, time
        from toolbus import Executor, ToolRegistry, ToolCall, bus
        reg = ToolRegistry()
        @reg.tool(read_only=True)
        def slowok(i: int) -> int:
            time.sleep(0.1); return i  # tool under test
        other = Executor(reg)
        ex = Executor(reg, max_parallel=1)
        def rx(sender, event, signal):
            if event.call_id == "c0":
                raise SystemExit("a subscriber called sys.exit()")
        sub = bus.subscribe(rx, "tool:executing", sender=ex)
        out = {}
        calls = [ToolCall(id=f"c{i}", name="slowok", arguments={"i": i}) for i in range(3)]
        th = threading.Thread(target=lambda: out.setdefault("b", ex.execute_batch(calls)), daemon=True)
        th.start(); th.join(30)  # a hang guard: the defect hangs the batch for good
        print("b" in out, other._supervisor.is_alive())
        """
    )
    assert out == "True True", out


def test_async_tool_raising_system_exit_does_not_kill_the_loop() -> None:
    """An async tool raising SystemExit killed the loop the other async tools run on
    (concurrency review)."""
    out = _subprocess(
        """
        import asyncio
        from toolbus import Executor, ToolRegistry, ToolCall
        reg = ToolRegistry()
        @reg.tool(read_only=True)
        async def quitter(i: int) -> int:
            await asyncio.sleep(0)
            raise SystemExit("tool calls sys.exit()")
        @reg.tool(read_only=True)
        async def aok(i: int) -> int:
            await asyncio.sleep(0)
            return i
        ex = Executor(reg, timeout=10.0)  # a hang guard, should the loop die
        a = ex.execute(ToolCall(name="quitter", arguments={"i": 1}))
        b = ex.execute(ToolCall(name="aok", arguments={"i": 1}))
        print(a.status, b.status)
        """
    )
    assert out == "error ok", out


def test_worker_start_failure_still_ends_the_call(monkeypatch: Any) -> None:
    """A worker thread that could not start lost its run: the call never ended (concurrency review)."""
    from toolbus.backends import _thread

    real = _thread.ToolWorker.start
    fail = {"n": 1}

    def start(*a: Any, **k: Any) -> Any:
        if fail["n"]:
            fail["n"] -= 1
            raise RuntimeError("can't start new thread")
        return real(*a, **k)

    monkeypatch.setattr(_thread.ToolWorker, "start", start)
    ex = Executor(_ok_registry())
    try:
        th, out = _in_thread(lambda: ex.execute(ToolCall(name="ok", arguments={"i": 1})))
        assert _finished(th, out), "execute hangs"
    finally:
        ex.close(timeout=1)


@pytest.mark.parametrize("tool_name", ["s", "a"])
@pytest.mark.parametrize("where", ["pre", "pre_async", "post"])
def test_a_hook_raising_cancelled_error_is_a_failing_hook(
    make_executor: MakeExecutor, tool_name: str, where: str
) -> None:
    """A hook raising CancelledError left the call never ending (Engine v2 review)."""
    reg = ToolRegistry()

    @reg.tool
    def s() -> str:
        return "s"

    @reg.tool
    async def a() -> str:
        return "a"

    def raise_sync(*_: Any) -> Any:
        raise asyncio.CancelledError()

    async def raise_async(*_: Any) -> Any:
        raise asyncio.CancelledError()

    hooks: dict[str, Any] = {
        "pre": {"pre_call": [raise_sync]},
        "pre_async": {"pre_call": [raise_async]},
        "post": {"post_call": [raise_sync]},
    }[where]
    ex = make_executor(reg, timeout=None, **hooks)
    t, out = _in_thread(lambda: ex.execute(ToolCall(name=tool_name)))
    t.join(10)
    assert not t.is_alive(), "the call never ends"
    # CancelledError means cancellation: in a post-call hook the call ends
    # cancelled, in a pre-call hook it is refused.
    expected = (
        ("cancelled", ErrorCode.CANCELLED)
        if where == "post"
        else ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    )
    assert (out["r"].status, out["r"].error_code) == expected


class _Stop(BaseException):
    pass


def test_a_concurrency_hook_raising_a_base_exception_is_contained(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    """A concurrency hook raising a BaseException escaped, and its message (a secret) was logged
    (Engine v2 review)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(key: str) -> str:
        return "ok"

    def hook(calls: Any) -> int:
        raise _Stop(f"gave up on {calls[0].arguments['key']}")

    ex = make_executor(reg, concurrency=hook)
    with caplog.at_level(logging.DEBUG):
        batch = ex.execute_batch([ToolCall(name="ok", arguments={"key": "hunter2-very-secret"})])
    assert [r.status for r in batch] == ["ok"]
    assert "hunter2-very-secret" not in caplog.text  # 14: no traceback, no message logged


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, asyncio.CancelledError])
@pytest.mark.parametrize("hook", ["pre_call", "authorize"])
def test_a_hook_raising_a_base_exception_refuses_the_call(
    make_executor: MakeExecutor, exc: type[BaseException], hook: str
) -> None:
    # Raising is how a pre-call hook or an authorizer refuses a call: any
    # exception its code raises (it runs on a worker, where no signal lands).
    def refuse(call: ToolCall) -> Any:
        raise exc("not this one")

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def fine() -> str:
        return "fine"

    ex = make_executor(reg, **{hook: [refuse] if hook == "pre_call" else refuse})
    r = ex.execute(ToolCall(name="fine"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED), r.error


def test_a_sync_tool_raising_cancelled_error_is_said_to_have_raised_it(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def gives_up() -> None:
        raise asyncio.CancelledError  # (a sync wrapper of a coroutine that was cancelled)

    r = make_executor(reg).execute(ToolCall(name="gives_up"))
    assert (r.status, r.error_code) == ("cancelled", ErrorCode.CANCELLED)
    assert r.error == "the tool raised asyncio.CancelledError"  # not a loop shutting down
