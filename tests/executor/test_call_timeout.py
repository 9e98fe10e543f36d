"""The whole call's budget (`call_timeout`, schedule-to-close) beside each
attempt's (`timeout`, start-to-close): what each bounds, which one wins, what
a call it ends looks like, and how it reaches work started inside a call.

Durations here are loose bounds on what the clocks promise; the tight figures
are the benchmark suite's.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from fractions import Fraction
from typing import Any

import pytest
import tenacity

from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.policies import BasePolicy, Delay, circuit_breaker, rate_limit
from toolbus.retry import RetryPolicy
from toolbus.tools import sequence

# Backoffs that never run out on their own in a test: only a budget ends them.
_NEVER = 60.0


def _retrying(backoff: float, retries: int = 3) -> RetryPolicy:
    return RetryPolicy(
        max_retries=retries,
        backoff_base=backoff,
        backoff_factor=1.0,
        max_backoff=backoff,
        jitter=0,
    )


def _hanging(reg: ToolRegistry, release: threading.Event, **options: Any) -> None:
    @reg.tool(name="hang", read_only=True, **options)
    def hang() -> str:
        release.wait(30)
        return "late"


def _hang_and_clock(release: threading.Event) -> ToolRegistry:
    """`hang`, and `clock`, which returns what its context has left."""
    reg = ToolRegistry()
    _hanging(reg, release)

    @reg.tool(read_only=True)
    def clock(ctx: ToolContext) -> float | None:
        return ctx.remaining

    return reg


# -- the options --------------------------------------------------------------------------


def test_call_timeout_is_checked_wherever_it_is_given(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo() -> str:
        return "ok"

    for bad, error in ((0, ValueError), (-1.0, ValueError), ("1", TypeError), (True, TypeError)):
        with pytest.raises(error, match="call_timeout"):
            Executor(reg, call_timeout=bad)
        with pytest.raises(error, match="call_timeout"):
            reg.tool(name=f"t{abs(hash(repr(bad)))}", call_timeout=bad)(lambda: None)
    ex = make_executor(reg)
    with pytest.raises(ValueError, match="call_timeout"):
        ex.execute(ToolCall(name="echo"), call_timeout=0)
    with pytest.raises(TypeError, match="timeout"):
        ex.execute_batch([ToolCall(name="echo")], timeout="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="call_timeout"):
        ex.submit(ToolCall(name="echo"), call_timeout=math.nan)
    # None and math.inf: no budget.
    for unbounded in (None, math.inf):
        assert ex.execute(ToolCall(name="echo"), call_timeout=unbounded).status == "ok"
    assert Executor(reg, call_timeout=math.inf).call_timeout is None


def test_the_tightest_budget_wins(make_executor: MakeExecutor) -> None:
    """The executor's, the tool's and the call's `call_timeout`: the smallest
    bounds the call, and the tool's context sees it."""
    reg = ToolRegistry()

    # The budgets 10 s apart: what a call has left when its tool runs tells
    # them apart however late a busy machine starts the tool.
    @reg.tool(read_only=True, call_timeout=10.0)
    def clock(ctx: ToolContext) -> float | None:
        return ctx.remaining

    @reg.tool(read_only=True, call_timeout=math.inf)
    def free(ctx: ToolContext) -> float | None:
        return ctx.remaining

    ex = make_executor(reg, timeout=30, call_timeout=20)

    def left(name: str, **clocks: Any) -> float:
        r = ex.execute(ToolCall(name=name), **clocks)
        assert r.status == "ok", r.error
        assert isinstance(r.output, float)
        return r.output

    assert 0 < left("clock") <= 10.0  # the tool's, under the executor's
    assert 0 < left("clock", call_timeout=2.0) <= 2.0  # the call's, tightest
    assert 2.0 < left("clock", call_timeout=40.0) <= 10.0  # a looser one does not widen it
    assert 10.0 < left("free") <= 20.0  # the tool sets no bound: the executor's
    # math.inf adds no bound of its own, and lifts none: the tightest still wins.
    assert 10.0 < left("free", call_timeout=math.inf) <= 20.0


def test_a_calls_own_timeout_replaces_the_tools(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    reg = ToolRegistry()
    _hanging(reg, release, timeout=30)

    @reg.tool(read_only=True, timeout=0.05)
    def clock(ctx: ToolContext) -> float | None:
        return ctx.deadline

    ex = make_executor(reg, retry=RetryPolicy(max_retries=0))
    r = ex.execute(ToolCall(name="hang"), timeout=0.2)
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert r.error == "Tool 'hang' timed out after 0.2s"
    # math.inf: this call's attempts have no deadline of their own.
    assert ex.execute(ToolCall(name="clock"), timeout=math.inf).output is None


# -- an attempt, a retry, a backoff ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_attempt_that_runs_into_the_call_deadline_ends_the_call(
    kind: str, make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    """Its attempt gets min(timeout, time left); at the whole call's deadline
    the call ends `DEADLINE_EXCEEDED` after its `tool:timeout`, and no retry
    follows, even where one would after the attempt's own timeout."""
    reg = ToolRegistry()
    if kind == "sync":
        _hanging(reg, release)
    else:

        @reg.tool(name="hang", read_only=True)
        async def hang() -> str:
            await asyncio.sleep(30)
            return "late"

    ex = make_executor(reg, timeout=30, retry=_retrying(0.01))
    r = ex.execute(ToolCall(id="c1", name="hang"), call_timeout=HANG_TIMEOUT)
    assert (r.status, r.error_code, r.attempts) == ("timeout", ErrorCode.DEADLINE_EXCEEDED, 1)
    assert f"call_timeout of {HANG_TIMEOUT:g}s" in (r.error or "")
    assert r.duration < 20  # the budget ended it, not the 30 s timeout
    assert ex.drain_events()
    assert [e.call_id for e in recorder.of(bus.TIMEOUT)] == ["c1"]
    assert recorder.of(bus.RETRY_ATTEMPT) == []
    assert ex.stats().timeout == 1


def test_a_retry_whose_backoff_outlasts_the_budget_is_not_started(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()
    seen: list[float | None] = []

    @reg.tool(read_only=True)
    def flaky(ctx: ToolContext) -> None:
        seen.append(ctx.remaining)
        raise ConnectionError("down")

    ex = make_executor(reg, timeout=30, retry=_retrying(_NEVER))
    r = ex.execute(ToolCall(name="flaky"), call_timeout=5.0)
    # The attempt's own failure, saying why it was not retried.
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_ERROR, 1)
    assert r.error == (
        "ConnectionError: down (not retried: its 60s backoff would end after the whole "
        "call's deadline)"
    )
    assert len(seen) == 1
    assert ex.drain_events()
    assert recorder.of(bus.RETRY_ATTEMPT) == []
    assert ex.stats().timers == 0  # no backoff left armed


def test_an_endless_backoff_is_not_started_and_says_so_in_words(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    endless = RetryPolicy(
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_fixed(math.inf),
        retry=tenacity.retry_if_exception_type(ConnectionError),
    )

    @reg.tool(read_only=True, retry=endless)
    def flaky() -> None:
        raise ConnectionError("down")

    r = make_executor(reg).execute(ToolCall(name="flaky"), call_timeout=5.0)
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_ERROR, 1)
    # Not "its infs backoff would end after ...".
    assert r.error == (
        "ConnectionError: down (not retried: its endless backoff would outlast the whole "
        "call's deadline)"
    )


def test_retries_that_fit_run_and_each_attempt_gets_what_is_left(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    seen: list[float] = []

    @reg.tool(read_only=True)
    def flaky(ctx: ToolContext) -> str:
        assert ctx.remaining is not None
        seen.append(ctx.remaining)
        if len(seen) < 3:
            raise ConnectionError("down")
        return "ok"

    ex = make_executor(reg, timeout=30, retry=_retrying(0.1))
    r = ex.execute(ToolCall(name="flaky"), call_timeout=20.0)
    assert (r.status, r.attempts) == ("ok", 3)
    # Each attempt's deadline is the call's (tighter than 30 s), less the
    # backoffs already waited out.
    assert seen[0] <= 20.0
    assert seen[1] <= seen[0] - 0.1
    assert seen[2] <= seen[1] - 0.1


# -- before an attempt: queued, delayed, throttled -------------------------------------------


@pytest.mark.parametrize("full", ["max_parallel", "group"])
def test_a_call_queued_past_its_budget_ends_without_a_timeout_event(
    full: str, make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    reg = ToolRegistry()
    _hanging(reg, release, groups=("db",))
    if full == "max_parallel":
        ex = make_executor(reg, max_parallel=1, groups={"db": 8}, timeout=30)
    else:
        ex = make_executor(reg, max_parallel=8, groups={"db": 1}, timeout=30)
    first = ex.submit(ToolCall(id="first", name="hang"))
    recorder.wait_for(bus.EXECUTING)
    r = ex.execute(ToolCall(id="second", name="hang"), call_timeout=0.2)
    assert (r.status, r.error_code, r.attempts) == ("timeout", ErrorCode.DEADLINE_EXCEEDED, 0)
    assert r.error == (
        "Tool 'hang' ran out of its call_timeout of 0.2s (the whole call: queueing, waits, "
        "every attempt and backoff); it was not tried again"
    )
    release.set()
    assert first.result(10).status == "ok"
    assert ex.drain_events()
    assert recorder.of(bus.TIMEOUT) == []
    finished = [e.call_id for e in recorder.of(bus.FINISHED)]
    assert sorted(finished) == ["first", "second"]
    stats = ex.stats()
    assert (stats.in_flight, stats.queued, stats.timers) == (0, 0, 0)


def test_a_call_delayed_by_a_policy_past_its_budget_is_no_breaker_failure(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """Ended before any attempt began: no `tool:timeout`, and its breaker
    (which admitted it, so is told how it ended) counts nothing."""

    class Later(BasePolicy):
        def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
            return Delay(_NEVER, "later")

    breaker = circuit_breaker(failures=1)
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[breaker, Later()])
    def echo() -> str:
        return "ok"

    ex = make_executor(reg)
    r = ex.execute(ToolCall(name="echo"), call_timeout=0.2)
    assert (r.status, r.error_code, r.attempts) == ("timeout", ErrorCode.DEADLINE_EXCEEDED, 0)
    assert breaker.state("echo") == "closed"
    assert ex.drain_events()
    assert recorder.of(bus.TIMEOUT) == []
    assert ex.stats().timers == 0


def test_a_rate_limit_wait_past_the_budget_ends_the_call_at_once(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[rate_limit("1/minute")])
    def search() -> str:
        return "ok"

    ex = make_executor(reg, timeout=_NEVER * 2)  # so the policy's own max_wait allows it
    assert ex.execute(ToolCall(name="search")).status == "ok"
    r = ex.execute(ToolCall(name="search"), call_timeout=30.0)
    # Refused when asked, not left to wait until its deadline.
    assert (r.status, r.error_code) == ("rejected", ErrorCode.RATE_LIMITED)
    assert "after its deadline (call_timeout)" in (r.error or "")
    assert r.duration < 30.0


def test_on_full_wait_is_bounded_by_the_budget(
    make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    reg = ToolRegistry()
    _hanging(reg, release)
    ex = make_executor(reg, max_parallel=1, max_queued=1, on_full="wait", timeout=None)
    running = ex.submit(ToolCall(id="running", name="hang"))
    recorder.wait_for(bus.EXECUTING)
    queued = ex.submit(ToolCall(id="queued", name="hang"))
    wait_until(lambda: ex.stats().queued == 1, what="one call queued")
    # No room, and no timeout to end the wait: only its budget does.
    r = ex.execute(ToolCall(id="third", name="hang"), call_timeout=0.3)
    assert r.status in ("rejected", "timeout")
    assert r.error_code in (ErrorCode.OVERLOADED, ErrorCode.DEADLINE_EXCEEDED)
    release.set()
    assert running.result(10).status == "ok"
    assert queued.result(10).status == "ok"


# -- work started inside a call ---------------------------------------------------------------


def test_an_async_tools_nested_call_inherits_what_it_has_left(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    reg = _hang_and_clock(release)
    holder: dict[str, Executor] = {}
    results: dict[str, Any] = {}

    @reg.tool(read_only=True, timeout=30)
    async def outer(ctx: ToolContext) -> str:
        results["left"] = ctx.remaining
        results["inner"] = await holder["ex"].aexecute(ToolCall(id="in1", name="clock"))
        await holder["ex"].aexecute(ToolCall(id="in2", name="hang"))
        return "done"

    # The call has 2 s (as below): the nested clock call must end ok within
    # it, which 0.5 s did not leave room for on a busy machine.
    ex = holder["ex"] = make_executor(reg, timeout=30)
    r = ex.execute(ToolCall(id="out", name="outer"), call_timeout=2.0)
    inner = results["inner"]
    assert inner.status == "ok"
    assert 0 < inner.output <= results["left"] <= 2.0
    # It ran out while it awaited the hung call, which its end cancelled.
    assert (r.status, r.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)
    assert ex.drain_events()
    wait_until(lambda: ex.stats().in_flight == 0, what="the nested call ended too")


def test_a_nested_call_ends_within_its_callers_budget(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    reg = _hang_and_clock(release)
    holder: dict[str, Executor] = {}
    results: dict[str, Any] = {}

    @reg.tool(read_only=True)
    def outer(ctx: ToolContext) -> str:
        results["left"] = ctx.remaining
        results["inner"] = holder["ex"].execute(ToolCall(id="in1", name="clock"))
        results["hung"] = holder["ex"].execute(ToolCall(id="in2", name="hang"))
        return "done"

    # The caller's attempt has 30 s; its call, 2.
    ex = holder["ex"] = make_executor(reg, timeout=30, retry=RetryPolicy(max_retries=0))
    r = ex.execute(ToolCall(id="out", name="outer"), call_timeout=2.0)
    # (The caller's own deadline is the same instant: it may end first.)
    wait_until(lambda: "hung" in results, what="the nested call's result")
    inner, hung = results["inner"], results["hung"]
    assert inner.status == "ok"
    assert 0 < inner.output <= results["left"] <= 2.0
    # The hung nested call ends at its caller's deadline: never after it.
    assert (hung.status, hung.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)
    assert "the time left to call out, which made it" in hung.error
    assert r.status in ("ok", "timeout")  # the caller may finish or run out just after
    release.set()


def test_a_sequences_steps_share_its_budget(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    seen: list[float | None] = []

    @reg.tool(read_only=True)
    def clock(ctx: ToolContext) -> dict[str, Any]:
        seen.append(ctx.remaining)
        return {}  # the next step's arguments: none

    reg.register(sequence("twice", [clock, "clock"], timeout=10))
    ex = make_executor(reg, timeout=30)
    r = ex.execute(ToolCall(name="twice"))
    assert r.status == "ok", r.error
    # Each step's own timeout is the executor's 30 s; the sequence has 10 (a
    # bound its two quick steps fit in however busy the machine).
    assert len(seen) == 2
    assert all(s is not None and 0 < s <= 10 for s in seen)
    assert seen[1] is not None and seen[0] is not None and seen[1] <= seen[0]


def test_run_agent_checks_its_call_timeout(make_executor: MakeExecutor) -> None:
    from toolbus.providers import run_agent

    ex = make_executor(ToolRegistry())
    with pytest.raises(ValueError, match="call_timeout"):
        run_agent(object(), model="m", messages="hi", executor=ex, call_timeout=-1)


# -- found by review ---------------------------------------------------------------------------


def test_a_call_let_out_after_its_deadline_never_starts(
    make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    """A call a slot, a thread or its batch's order let out at or past its
    whole-call deadline was given an attempt anyway: a mutating tool could
    run after its call was reported DEADLINE_EXCEEDED (review of issue 21)."""
    reg = ToolRegistry()
    ran: list[str] = []

    @reg.tool
    def slow_write() -> str:
        # Past the batch's budget, however late its deadline is noticed: held
        # until the test is done (the next call waits for its end, its timeout).
        release.wait(30)
        return "written"

    @reg.tool
    def charge() -> str:
        ran.append("charge")
        return "charged"

    @reg.tool(read_only=True)
    def echo() -> str:
        ran.append("echo")
        return "ok"

    ex = make_executor(reg, timeout=30)
    # No time at all: refused at dispatch.
    r = ex.execute(ToolCall(id="e", name="echo"), call_timeout=1e-6)
    assert (r.status, r.error_code, r.attempts) == ("timeout", ErrorCode.DEADLINE_EXCEEDED, 0)
    # Let out by its batch's order past its deadline.
    batch = ex.execute_batch(
        [ToolCall(id="w", name="slow_write"), ToolCall(id="c", name="charge")],
        call_timeout=HANG_TIMEOUT,
    )
    write, charged = batch.results
    assert (write.error_code, write.attempts) == (ErrorCode.DEADLINE_EXCEEDED, 1)
    assert (charged.status, charged.error_code, charged.attempts) == (
        "timeout",
        ErrorCode.DEADLINE_EXCEEDED,
        0,
    )
    release.set()
    assert ex.drain_events()
    assert ran == []
    assert [e.call_id for e in recorder.of(bus.TIMEOUT)] == ["w"]
    assert [e.call_id for e in recorder.of(bus.EXECUTING)] == ["w"]


def test_a_users_policy_hears_of_a_timeout_on_a_worker_not_under_the_schedulers_lock(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    """The timeout finished where it was noticed also told a user's policy
    there, under the scheduler's lock: a slow `on_result` stalled every call,
    and one calling its executor was refused (review of issue 21)."""
    seen: dict[str, Any] = {}
    holder: dict[str, Executor] = {}

    class Audit(BasePolicy):
        def on_result(self, call: ToolCall, result: Any, now: float) -> None:
            if call.name == "hang":
                seen["thread"] = threading.current_thread().name
                seen["nested"] = holder["ex"].execute(ToolCall(name="echo"))

    reg = ToolRegistry()
    # Only the hanging tool is held to a short timeout: the nested echo, which
    # must end ok, gets the executor's 60 s (a busy machine can be slow).
    _hanging(reg, release, policies=[Audit()], timeout=HANG_TIMEOUT)

    @reg.tool(read_only=True)
    def echo() -> str:
        return "ok"

    ex = holder["ex"] = make_executor(reg, timeout=60)
    assert ex.execute(ToolCall(name="hang")).status == "timeout"
    assert seen["thread"].startswith("ToolWorker")
    assert seen["nested"].status == "ok"


def test_the_timeout_event_says_what_the_attempt_was_given(
    make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    reg = ToolRegistry()
    _hanging(reg, release)
    ex = make_executor(reg, timeout=30)
    # Budgets a busy machine starts a worker within (an attempt whose deadline
    # comes before its tool began sends no tool:executing), far below the 30 s.
    ex.execute(ToolCall(id="b", name="hang"), call_timeout=2)
    ex.execute(ToolCall(id="t", name="hang"), timeout=1, call_timeout=20)
    assert ex.drain_events()
    given = {e.call_id: e.timeout for e in recorder.of(bus.TIMEOUT)}
    assert 0 < given["b"] <= 2  # what was left of the budget, not the 30 s timeout
    assert given["t"] == 1
    executing = {e.call_id: e.timeout for e in recorder.of(bus.EXECUTING)}
    assert executing == given


def test_a_calls_own_timeout_replaces_an_adaptive_one_and_budgets_teach_it_nothing(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    from toolbus.policies import adaptive_timeout

    learned = adaptive_timeout(min_samples=1, floor=1.0, override=True)
    reg = ToolRegistry()
    _hanging(reg, release, policies=[learned])

    @reg.tool(read_only=True, policies=[learned])
    def clock(ctx: ToolContext) -> float | None:
        return ctx.deadline

    ex = make_executor(reg, timeout=10)
    for _ in range(3):  # ended by the budget: no sample of the tool's own time
        r = ex.execute(ToolCall(name="hang"), call_timeout=0.1)
        assert r.error_code is ErrorCode.DEADLINE_EXCEEDED
    assert learned.timeout(reg.get("hang"), 10.0) == 10.0  # type: ignore[arg-type]
    assert ex.execute(ToolCall(name="clock"), timeout=math.inf).output is None


def test_huge_integers_are_no_overflow() -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo() -> str:
        return "ok"

    with Executor(reg, timeout=10**400, call_timeout=10**400) as ex:
        assert ex.timeout is None and ex.call_timeout is None
        r = ex.execute(ToolCall(name="echo"), timeout=10**400, call_timeout=10**400)
        assert r.status == "ok"


def test_a_call_whose_worker_starts_after_its_deadline_never_runs(
    make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    """Dispatched with time left, it waited for its worker (here the loop,
    blocked by another tool) past its whole-call deadline: it was counted as
    an attempt that timed out, and could still start (second review of issue 21)."""
    reg = ToolRegistry()
    ran: list[str] = []
    inside = threading.Event()

    @reg.tool(read_only=True)
    async def blocker() -> str:
        inside.set()
        # The point: it blocks the loop, until the test has seen the other
        # call end (however late the test gets there, the loop is still held).
        release.wait(30)
        return "done"

    @reg.tool(read_only=True, policies=[circuit_breaker(failures=1)])
    async def quick() -> str:
        ran.append("quick")
        return "ok"

    ex = make_executor(reg, timeout=30)
    blocking = ex.submit(ToolCall(id="x", name="blocker"))
    assert inside.wait(10)
    r = ex.execute(ToolCall(id="b", name="quick"), call_timeout=0.2)
    assert (r.status, r.error_code, r.attempts) == ("timeout", ErrorCode.DEADLINE_EXCEEDED, 0)
    release.set()  # the loop is free again
    assert blocking.result(10).status == "ok"
    assert ex.drain_events()
    assert ran == []
    assert [e.call_id for e in recorder.of(bus.TIMEOUT)] == []
    assert ex.execute(ToolCall(name="quick")).status == "ok"  # no breaker counted it


def test_time_a_policy_took_shrinks_what_the_attempt_is_given(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    class Slow(BasePolicy):
        def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
            time.sleep(0.3)  # off the attempt's clock, never off the call's
            return super().admit(call, tool, now)

    reg = ToolRegistry()
    seen: list[float | None] = []

    @reg.tool(read_only=True, policies=[Slow()])
    def clock(ctx: ToolContext) -> None:
        seen.append(ctx.remaining)

    # The call's 20 s is the tighter clock (the attempt's is 60), and wide
    # enough for the call to end ok on a busy machine (1 s was not).
    ex = make_executor(reg, timeout=60)
    assert ex.execute(ToolCall(id="c", name="clock"), call_timeout=20.0).status == "ok"
    assert ex.drain_events()
    (given,) = [e.timeout for e in recorder.of(bus.EXECUTING)]
    (left,) = seen
    assert left is not None and 0 < left <= given <= 19.7 + 0.05


def test_close_takes_any_number_and_refuses_the_rest() -> None:
    for seconds in (10**400, math.inf, Fraction(1, 2), 0):
        ex = Executor(ToolRegistry())
        ex.close(timeout=seconds)
        assert ex.closed
    ex = Executor(ToolRegistry())
    with pytest.raises(TypeError, match=r"Executor\.close: timeout"):
        ex.close(timeout="1")  # type: ignore[arg-type]
    assert not ex.closed  # refused before anything closed
    ex.close()


def test_a_deadline_while_the_call_is_admitted_is_no_attempts_timeout(
    make_executor: MakeExecutor, recorder: bus.Recorder, release: threading.Event
) -> None:
    """The whole call's deadline came while its arguments were checked or its
    pre-call hooks ran: `tool:timeout` and attempts=1 for a tool that never
    started, and a breaker counted it (third review of issue 21)."""
    reg = ToolRegistry()
    ran: list[str] = []
    admitting = threading.Event()

    def hold(call: ToolCall) -> ToolCall:
        admitting.set()
        release.wait(30)  # the deadline comes meanwhile
        return call

    @reg.tool(read_only=True, policies=[circuit_breaker(failures=1)])
    def echo() -> str:
        ran.append("echo")
        return "ok"

    ex = make_executor(reg, timeout=30, pre_call=[hold])
    r = ex.execute(ToolCall(id="a", name="echo"), call_timeout=HANG_TIMEOUT)
    assert admitting.is_set()
    assert (r.status, r.error_code, r.attempts) == ("timeout", ErrorCode.DEADLINE_EXCEEDED, 0)
    release.set()
    assert ex.drain_events()
    assert recorder.of(bus.TIMEOUT) == []
    wait_until(lambda: ex.stats().in_flight == 0, what="the held hook let go")
    assert ran == []
