"""The policy seam through the public API: where policies are asked, and what
each decision does to a call (no built-in policy needed)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time
from typing import Any

import pytest

from tests.concurrency_tools import finished, in_thread
from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, ToolResult, bus
from toolbus.policies import (
    Admit,
    ApprovalDecision,
    BasePolicy,
    Decision,
    Delay,
    Reject,
    Respond,
    quota,
    requires_approval,
)


class Scripted(BasePolicy):
    """Answers from a script (one decision per ask; then Admit), and records."""

    def __init__(self, name: str, *decisions: Any) -> None:
        self.name = name
        self.script = list(decisions)
        self.asked: list[str] = []
        self.results: list[ToolResult] = []
        self.log: list[str] | None = None
        self.was_asked = threading.Event()

    def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
        self.asked.append(call.id)
        self.was_asked.set()
        if self.log is not None:
            self.log.append(f"admit:{self.name}")
        return self.script.pop(0) if self.script else Admit()

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        self.results.append(result)
        if self.log is not None:
            self.log.append(f"result:{self.name}")
        return None


def _registry(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def read(x: int) -> int:
        ran.append(f"read:{x}")
        return x

    @reg.tool
    def write(x: int, token: str = "") -> int:
        ran.append(f"write:{x}")
        return x

    return reg


def test_reject_ends_the_call_unrun(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    p = Scripted("no", Reject(ErrorCode.RATE_LIMITED, "slow down"))
    ex = make_executor(_registry(ran), policies=[p])
    r = ex.execute(ToolCall(id="c1", name="read", arguments={"x": 1}))
    assert (r.status, r.error_code, r.error, r.attempts) == (
        "rejected",
        ErrorCode.RATE_LIMITED,
        "slow down",
        0,
    )
    assert ran == [] and p.results == []  # it decided: it is not told its own result


def test_respond_short_circuits_with_the_calls_identity(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    canned = ToolResult(call_id="x", name="y", status="ok", output=42, attempts=5)
    ex = make_executor(_registry(ran), policies=[Scripted("canned", Respond(canned))])
    r = ex.execute(ToolCall(id="c1", name="read", arguments={"x": 1}))
    assert (r.call_id, r.name, r.status, r.output, r.attempts) == ("c1", "read", "ok", 42, 0)
    assert ran == []


@pytest.mark.parametrize(
    "bad",
    [
        ValueError("boom"),
        GeneratorExit(),  # its own: not the step being thrown away
        "not a decision",
        Delay(float("nan")),
        Delay(10**400),  # (no float can hold it)
        Delay(1e300),  # (no timer can keep it: the call would be parked for good)
        Delay(True),  # type: ignore[arg-type]
        Delay("1"),  # type: ignore[arg-type]
        Reject("X", "m"),
    ],
)
def test_a_broken_policy_fails_closed_naming_itself(make_executor: MakeExecutor, bad: Any) -> None:
    ran: list[str] = []

    class Broken(BasePolicy):
        name = "broken-guard"

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            if isinstance(bad, BaseException):
                raise bad
            return bad  # type: ignore[no-any-return]

    ex = make_executor(_registry(ran), policies=[Broken()])
    r = ex.execute(ToolCall(id="c1", name="read", arguments={"x": 1}))
    assert r.status == "rejected" and r.error_code == ErrorCode.TOOL_UNAVAILABLE
    assert "broken-guard" in (r.error or "")
    assert ran == []


def test_order_executor_first_then_tool_and_results_innermost_first(
    make_executor: MakeExecutor,
) -> None:
    log: list[str] = []
    outer, inner = Scripted("outer"), Scripted("inner")
    outer.log = inner.log = log
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[inner])
    def read(x: int) -> int:
        log.append("tool")
        return x

    ex = make_executor(reg, policies=[outer])
    assert ex.execute(ToolCall(name="read", arguments={"x": 3})).output == 3
    assert log == ["admit:outer", "admit:inner", "tool", "result:inner", "result:outer"]


def test_a_replacement_result_is_what_the_caller_and_events_get(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    class Shorten(BasePolicy):
        def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult:
            return result.model_copy(update={"output": "short", "call_id": "forged"})

    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[Shorten()])
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        r = ex.execute(ToolCall(id="c1", name="read", arguments={"x": 1}))
        rec.wait_for(bus.FINISHED, 1, timeout=5)
    assert (r.call_id, r.output) == ("c1", "short")
    assert rec.of(bus.FINISHED)[0].result == r


def test_a_delay_too_long_for_any_timer_still_waits_for_its_until(
    make_executor: MakeExecutor,
) -> None:
    ran: list[str] = []
    wake: concurrent.futures.Future[None] = concurrent.futures.Future()
    gate = Scripted("gate", Delay(1e300, until=wake))
    ex = make_executor(_registry(ran), policies=[gate])
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        handle = ex.submit(ToolCall(id="late", name="read", arguments={"x": 1}))
        assert gate.was_asked.wait(30)
        wake.set_result(None)  # (asked again, the script is done: it admits)
        assert handle.result(timeout=30).output == 1
        rec.wait_for(bus.FINISHED, 1, timeout=10)
    assert ran == ["read:1"]


def test_a_delay_holds_no_slot_and_asks_only_the_delaying_policy_again(
    make_executor: MakeExecutor,
) -> None:
    ran: list[str] = []
    wake: concurrent.futures.Future[None] = concurrent.futures.Future()
    first = Scripted("first")
    gate = Scripted("gate", Delay(600, until=wake))
    reg = _registry(ran)
    ex = make_executor(reg, max_parallel=1, policies=[first, gate])
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        waiting = threading.Thread(
            target=ex.execute, args=(ToolCall(id="late", name="read", arguments={"x": 1}),)
        )
        waiting.start()
        # The only slot is free while it waits: another call runs to the end.
        assert ex.execute(ToolCall(id="other", name="read", arguments={"x": 2})).output == 2
        assert ex.stats().in_flight == 0
        wake.set_result(None)
        rec.wait_for(bus.FINISHED, 2, timeout=10)
        waiting.join(10)
    assert ran == ["read:2", "read:1"]
    assert first.asked == ["late", "other"]  # admitted once, not asked again
    assert gate.asked == ["late", "other", "late"]
    late = next(e.result for e in rec.of(bus.FINISHED) if e.call_id == "late")
    assert late.status == "ok" and late.attempts == 1


async def test_a_delayed_call_can_be_cancelled(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    gate = Scripted("gate", Delay(600))
    ex = make_executor(_registry(ran), policies=[gate])
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        task = asyncio.ensure_future(ex.aexecute(ToolCall(id="c", name="read", arguments={"x": 1})))
        # Delayed (or about to be: a cancel then wins when the delay is reported).
        assert await asyncio.to_thread(gate.was_asked.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(rec.wait_for, bus.FINISHED, 1, timeout=5)
    assert rec.of(bus.FINISHED)[0].result.status == "cancelled" and ran == []


def test_close_ends_delayed_calls(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    gate = Scripted("gate", Delay(600))
    ex = Executor(_registry(ran), policies=[gate])
    out: list[ToolResult] = []
    t = threading.Thread(
        target=lambda: out.append(ex.execute(ToolCall(name="read", arguments={"x": 1})))
    )
    t.start()
    try:
        assert gate.was_asked.wait(5)
    finally:
        ex.close()
    t.join(10)
    assert out[0].status == "cancelled" and ran == []


def test_async_policies_decide_for_sync_and_async_tools(make_executor: MakeExecutor) -> None:
    class Later(BasePolicy):
        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            await asyncio.sleep(0)
            if call.arguments["x"] < 0:  # type: ignore[index]
                return Reject(ErrorCode.TOOL_NOT_ALLOWED, "negative")
            return Admit()

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def sync_tool(x: int) -> int:
        return x

    @reg.tool(read_only=True)
    async def async_tool(x: int) -> int:
        return x

    ex = make_executor(reg, policies=[Later()])
    for name in ("sync_tool", "async_tool"):
        assert ex.execute(ToolCall(name=name, arguments={"x": 1})).output == 1
        assert ex.execute(ToolCall(name=name, arguments={"x": -1})).error == "negative"

    async def main() -> list[ToolResult]:
        return list(
            await ex.aexecute_batch(
                [ToolCall(name=n, arguments={"x": x}) for n in ("sync_tool", "async_tool")
                 for x in (2, -2)]
            )
        )  # fmt: skip

    assert [r.status for r in asyncio.run(main())] == ["ok", "rejected", "ok", "rejected"]


def test_timeout_from_a_policy_is_the_attempts_deadline(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    class Quick(BasePolicy):
        def timeout(self, tool: Any, default: float | None) -> float | None:
            return 0.25

    ran: list[str] = []
    ex = make_executor(_registry(ran), timeout=30, policies=[Quick()])
    with bus.Recorder(bus.EXECUTING, sender=ex) as rec:
        ex.execute(ToolCall(name="read", arguments={"x": 1}))
        rec.wait_for(bus.EXECUTING, 1, timeout=5)
    assert rec.of(bus.EXECUTING)[0].timeout == 0.25


def test_submission_policies_refuse_in_batch_order_before_fan_out(
    make_executor: MakeExecutor,
) -> None:
    class FirstTwo(BasePolicy):
        at_submission = True

        def __init__(self) -> None:
            self.left = 2

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            if self.left == 0:
                return Reject(ErrorCode.QUOTA_EXCEEDED, "spent")
            self.left -= 1
            return Admit()

    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[FirstTwo()])
    out = ex.execute_batch([ToolCall(name="read", arguments={"x": i}) for i in range(4)])
    assert [r.status for r in out] == ["ok", "ok", "rejected", "rejected"]
    assert out[3].error_code == ErrorCode.QUOTA_EXCEEDED
    assert sorted(ran) == ["read:0", "read:1"]


def test_a_submission_policy_must_be_sync() -> None:
    class Bad(BasePolicy):
        at_submission = True

        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            return Admit()

    with pytest.raises(TypeError, match="at submission"):
        Executor(ToolRegistry(), policies=[Bad()])


@pytest.mark.parametrize("flag", ["first", "at_submission"])
@pytest.mark.parametrize("value", [1, "yes", "False", None])
def test_a_policy_flag_that_is_not_a_bool_is_refused_at_registration(flag: str, value: Any) -> None:
    """Which policies are asked first (an approval) or at submission is not
    read from truthiness: `first = "yes"` is a TypeError, not a policy asked
    last (issue 21)."""
    policy = Scripted("flagged")
    setattr(policy, flag, value)
    with pytest.raises(TypeError, match=f"'flagged': {flag} must be True or False"):
        Executor(ToolRegistry(), policies=[policy])
    reg = ToolRegistry()
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        reg.tool(name="t", policies=[policy])(lambda x: x)


def test_not_a_policy_is_refused_at_registration() -> None:
    with pytest.raises(TypeError, match="not a policy"):
        Executor(ToolRegistry(), policies=[object()])
    reg = ToolRegistry()
    with pytest.raises(TypeError, match="not a policy"):
        reg.tool(name="t", policies=["rate"])(lambda x: x)


# -- approvals ----------------------------------------------------------------------


def _guarded(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def read(x: int) -> int:
        ran.append(f"read:{x}")
        return x

    @reg.tool(policies=[requires_approval(reason="it deletes")])
    def delete(path: str, api_token: str = "") -> str:
        ran.append(f"delete:{path}")
        return path

    return reg


def test_approval_is_bound_to_the_exact_arguments(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a", "api_token": "sk-123"})
    first = ex.execute(call)
    assert (first.status, first.error_code, first.attempts) == (
        "deferred",
        ErrorCode.APPROVAL_REQUIRED,
        0,
    )
    assert "it deletes" in (first.error or "")
    req = first.approval_request
    assert req is not None and (req.call_id, req.tool) == ("d1", "delete")
    assert req.arguments_masked["path"] == "/a"
    assert "sk-123" not in str(req.arguments_masked)  # a person reviews masked arguments
    # No decision, None, or a decision for other arguments: deferred again, never run.
    other = ex.execute(
        ToolCall(id="d2", name="delete", arguments={"path": "/b", "api_token": "sk-123"})
    )
    assert other.approval_request is not None
    for approval in (None, other.approval_request.approve()):
        again = ex.execute(call, approval=approval)
        assert again.status == "deferred"
    assert ran == []
    # Spacing and key order do not matter: the digest is of canonical arguments.
    text = '{ "api_token": "sk-123",  "path": "/a" }'
    done = ex.execute(ToolCall(id="d1", name="delete", arguments=text), approval=req.approve())
    assert done.status == "ok" and ran == ["delete:/a"]
    assert ex.stats().deferred == 4


def test_a_denial_is_rejected_with_its_reason(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    req = ex.execute(call).approval_request
    assert req is not None
    r = ex.execute(call, approval=req.deny("not on a Friday"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert "not on a Friday" in (r.error or "") and ran == []
    forged = ApprovalDecision(digest="0" * 64, approved=False, reason="x")
    assert ex.execute(call, approval=forged).status == "deferred"


@pytest.mark.parametrize("approved", ["no", "False", 1, None])
def test_a_decision_made_unvalidated_approves_only_with_true(
    make_executor: MakeExecutor, approved: Any
) -> None:
    """A decision built without validation (`model_construct`) whose `approved`
    is not True does not approve: it is a denial (issue 21: it used to be read
    for its truthiness, so "no" approved)."""
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    req = ex.execute(call).approval_request
    assert req is not None
    odd = ApprovalDecision.model_construct(digest=req.digest, approved=approved, reason=None)
    r = ex.execute(call, approval=odd)
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED) and ran == []


def test_each_resubmission_gets_its_own_result_and_event(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        req = ex.execute(call).approval_request
        assert req is not None
        ex.execute(call, approval=req.approve())
        rec.wait_for(bus.FINISHED, 2, timeout=5)
    assert [e.result.status for e in rec.of(bus.FINISHED)] == ["deferred", "ok"]


def test_a_deferred_barrier_aborts_only_the_calls_that_waited_for_it(
    make_executor: MakeExecutor,
) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    calls = [
        ToolCall(id="r0", name="read", arguments={"x": 0}),
        ToolCall(id="d", name="delete", arguments={"path": "/a"}),
        ToolCall(id="r2", name="read", arguments={"x": 2}),
        ToolCall(id="r3", name="read", arguments={"x": 3}),
    ]
    out = ex.execute_batch(calls, stop_on_error=True)
    assert [r.status for r in out] == ["ok", "deferred", "cancelled", "cancelled"]
    assert out[2].error_code == ErrorCode.ABORTED and "'d'" not in (out[2].error or "x")
    assert "call d ('delete')" in (out[2].error or "")
    assert ran == ["read:0"]
    s = out.summary
    assert (s.succeeded, s.deferred, s.failed) == (1, 1, 2)
    # Approved, the same batch runs whole.
    req = out[1].approval_request
    assert req is not None
    again = ex.execute_batch(calls, approvals={"d": req.approve()})
    assert [r.status for r in again] == ["ok"] * 4


def test_a_deferred_read_does_not_hold_back_its_group(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    ran: list[str] = []

    @reg.tool(read_only=True, policies=[requires_approval(lambda c: c.arguments["x"] == 1)])  # type: ignore[index]
    def read(x: int) -> int:
        ran.append(f"read:{x}")
        return x

    @reg.tool
    def write(x: int) -> int:
        ran.append(f"write:{x}")
        return x

    ex = make_executor(reg)
    out = ex.execute_batch(
        [ToolCall(name="read", arguments={"x": x}) for x in (0, 1, 2)]
        + [ToolCall(name="write", arguments={"x": 9})]
    )
    assert [r.status for r in out] == ["ok", "deferred", "ok", "cancelled"]
    assert sorted(ran) == ["read:0", "read:2"]


async def test_async_approvals(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    out = await ex.aexecute_batch([call])
    req = out[0].approval_request
    assert req is not None
    assert (await ex.aexecute(call, approval=req.approve())).status == "ok"
    out = await ex.aexecute_batch([call], approvals={"d1": req.approve()})
    assert out[0].status == "ok" and ran == ["delete:/a", "delete:/a"]


# -- races: a deadline or a cancel while a policy decides or delays ------------------


def test_a_policy_decision_is_not_run_time(make_executor: MakeExecutor) -> None:
    """Policies decide before the deadline clock starts: a slow decision (a
    remote check, say) does not eat the tool's timeout."""
    # 4 s: each half (the decision's, the run's) leaves about 2 s of slack for
    # a busy machine (2 s left under 1 s each).
    timeout = 4.0
    asked: list[float] = []

    class SlowCheck(BasePolicy):
        name = "slow_check"

        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            asked.append(time.monotonic())
            await asyncio.sleep(timeout / 2)  # half the timeout: the other half is slack
            return Admit()

    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[SlowCheck()])
    async def work() -> str:
        # Runs until decision and run together have taken longer than the
        # timeout: about half of it here (the policy took the other half),
        # which leaves half the timeout as slack for a loaded machine.
        await asyncio.sleep(asked[0] + timeout + 0.1 - time.monotonic())
        return "done"

    ex = make_executor(reg, timeout=timeout)
    r = ex.execute(ToolCall(name="work", arguments={}))
    assert (r.status, r.attempts) == ("ok", 1), r.error
    assert time.monotonic() - asked[0] > timeout  # the decision and the run outlasted it


@pytest.mark.parametrize("is_async", [False, True], ids=["sync-policy", "async-policy"])
def test_a_policy_that_never_decides_ends_the_call_naming_it(
    make_executor: MakeExecutor, release: threading.Event, is_async: bool
) -> None:
    """Off the clock, but bounded: a policy that takes the call's whole timeout
    to decide ends it `rejected` (TOOL_UNAVAILABLE), naming it; the call is not
    retried, and the policies after it are never asked."""
    from toolbus import RetryPolicy

    told: list[str] = []
    asked: list[str] = []

    class Stuck(BasePolicy):
        name = "stuck"

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            asked.append(call.id)
            release.wait(30)
            return Admit()

        def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
            told.append(result.status)

    class AsyncStuck(Stuck):
        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:  # type: ignore[override]
            asked.append(call.id)
            await asyncio.Event().wait()
            return Admit()

    never = Scripted("never")
    ran: list[str] = []
    reg = ToolRegistry()

    # (A timeout that leaves a loaded machine's worker time to reach the
    # policy: the attempt's clock runs from its dispatch through its
    # arguments' check to the policies, and a timeout there is the tool's.)
    @reg.tool(
        read_only=True,
        timeout=2.0,
        retry=RetryPolicy(max_retries=2, backoff_base=0.001, jitter=0),
        policies=[AsyncStuck() if is_async else Stuck(), never],
    )
    def guarded(x: int) -> int:
        ran.append("ran")
        return x

    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="c", name="guarded", arguments={"x": 1}))
    assert (r.status, r.error_code, r.attempts) == ("rejected", ErrorCode.TOOL_UNAVAILABLE, 0)
    assert "stuck" in (r.error or "") and "did not decide" in (r.error or "")
    assert asked == ["c"] and never.asked == [] and ran == [] and told == []


def test_a_policy_is_asked_once_per_call_across_retries(make_executor: MakeExecutor) -> None:
    from toolbus import RetryPolicy

    once = Scripted("once")
    failures = [1, 2]
    reg = ToolRegistry()

    @reg.tool(
        read_only=True,
        retry=RetryPolicy(max_retries=2, backoff_base=0.001, jitter=0),
        policies=[once],
    )
    def flaky() -> str:
        if failures:
            failures.pop()
            raise ConnectionError("flaky")
        return "done"

    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="c", name="flaky", arguments={}))
    assert (r.status, r.attempts) == ("ok", 3)
    assert once.asked == ["c"] and [x.status for x in once.results] == ["ok"]


def test_a_policy_hears_of_a_call_it_delays_ending_through_on_dropped(
    make_executor: MakeExecutor,
) -> None:
    """Not `on_result` (only for calls it admitted): `on_dropped`, so it can
    give the waiting call's place up."""

    class Holding(BasePolicy):
        def __init__(self) -> None:
            self.asked = threading.Event()
            self.told: list[ToolResult] = []
            self.dropped: list[ToolResult] = []

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            self.asked.set()
            return Delay(600)

        def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
            self.told.append(result)

        def on_dropped(self, call: ToolCall, result: ToolResult, now: float) -> None:
            self.dropped.append(result)

    holding, outer = Holding(), Scripted("outer")
    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[outer, holding])

    async def main() -> None:
        task = asyncio.ensure_future(ex.aexecute(ToolCall(name="read", arguments={"x": 1})))
        assert await asyncio.to_thread(holding.asked.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        asyncio.run(main())
        rec.wait_for(bus.FINISHED, 1, timeout=5)
    assert [r.status for r in holding.dropped] == ["cancelled"] and holding.told == []
    assert [r.status for r in outer.results] == ["cancelled"]  # it admitted the call
    assert ran == []


def test_on_result_is_told_only_for_calls_the_policy_admitted() -> None:
    """A policy that counts what it let through (as extending.md invites)
    stays balanced when calls it only delayed are cancelled."""

    class InFlight(BasePolicy):
        name = "in_flight"

        def __init__(self, n: int) -> None:
            self.n, self.count, self.lock = n, 0, threading.Lock()
            self.delayed: set[str] = set()

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            with self.lock:
                if self.count < self.n:
                    self.count += 1
                    return Admit()
                self.delayed.add(call.id)
                return Delay(0.05)

        def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
            with self.lock:
                self.count -= 1

    policy = InFlight(1)
    running = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[policy])
    async def slow(i: int) -> int:
        running.set()
        await asyncio.sleep(30)  # runs until the batch is cancelled
        return i

    async def main() -> None:
        ex = Executor(reg)
        task = asyncio.create_task(
            ex.aexecute_batch([ToolCall(name="slow", arguments={"i": i}) for i in range(5)])
        )
        # One call admitted and running, the four others delayed.
        assert await asyncio.to_thread(running.wait, 10)
        await asyncio.to_thread(wait_until, lambda: len(policy.delayed) == 4, 10, "4 delayed")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(ex.close)

    asyncio.run(main())
    assert policy.count == 0


def test_a_policys_event_is_scrubbed_of_the_calls_secrets_but_its_identity(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """`announce` masks what a policy publishes like the call's arguments: a
    secret in a text or JSON-like field is `***`; the call's identity stays."""
    from dataclasses import dataclass

    from toolbus.policies import announce, scrub

    secret = "sk-SEAM-SECRET-42"
    name = "test:seam-noted"
    bus.define_signal(name, "A test policy noted a call.")  # (again: the same signal)

    @dataclass(frozen=True)
    class Noted(bus.CallEvent):
        note: str
        detail: dict[str, Any]
        key: str

    class Noting(BasePolicy):
        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            token = call.arguments["token"]  # type: ignore[index]
            key = scrub(token[:8])
            announce(
                name,
                lambda bid: Noted(call.id, call.name, bid, 0, f"saw {token}", {"t": token}, key),
            )
            return Admit()

    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[Noting()])
    def use(token: str) -> str:
        """Uses a token."""
        return "ok"

    ex = make_executor(reg)
    assert ex.execute(ToolCall(id="u1", name="use", arguments={"token": secret})).status == "ok"
    (noted,) = recorder.wait_for(name)
    assert (noted.note, noted.detail, noted.key) == ("saw ***", {"t": "***"}, "***")
    assert (noted.call_id, noted.tool) == ("u1", "use")


# -- user policy code that raises, or answers amiss ---------------------------------


def _one_tool(*policies: Any, is_async: bool = False) -> ToolRegistry:
    reg = ToolRegistry()
    if is_async:

        @reg.tool(read_only=True, policies=list(policies))
        async def f(x: int = 0) -> int:
            return x

    else:

        @reg.tool(read_only=True, policies=list(policies))
        def f(x: int = 0) -> int:
            return x

    return reg


_BASE_EXCEPTIONS = [asyncio.CancelledError, KeyboardInterrupt, SystemExit]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync-tool", "async-tool"])
@pytest.mark.parametrize("exc", _BASE_EXCEPTIONS)
def test_on_result_raising_a_base_exception_still_ends_the_call(
    make_executor: MakeExecutor, exc: type[BaseException], is_async: bool
) -> None:
    """The result is claimed before on_result runs: whatever it raises, the call
    is announced and its caller released (it used to hang for ever)."""

    class Raises(BasePolicy):
        def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
            raise exc()

    ex = make_executor(_one_tool(Raises(), is_async=is_async), timeout=1)
    box: dict[str, ToolResult] = {}
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        t = threading.Thread(
            target=lambda: box.update(r=ex.execute(ToolCall(name="f", arguments={"x": 3}))),
            daemon=True,
        )
        t.start()
        t.join(5)
        assert "r" in box, "the call never ended"
        rec.wait_for(bus.FINISHED, 1, timeout=5)
    assert (box["r"].status, box["r"].output) == ("ok", 3)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync-admit", "async-admit"])
@pytest.mark.parametrize("exc", _BASE_EXCEPTIONS)
def test_admit_raising_a_base_exception_is_the_policys_failure(
    make_executor: MakeExecutor, exc: type[BaseException], is_async: bool
) -> None:
    """Not an "internal error": rejected, naming the policy, as any exception."""

    class Raises(BasePolicy):
        name = "raising-guard"

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            raise exc()

    class AsyncRaises(BasePolicy):
        name = "raising-guard"

        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            await asyncio.sleep(0)
            raise exc()

    ex = make_executor(_one_tool(AsyncRaises() if is_async else Raises()), timeout=5)
    r = ex.execute(ToolCall(name="f", arguments={"x": 1}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert "raising-guard" in (r.error or "") and exc.__name__ in (r.error or "")


async def test_cancelling_a_call_while_an_async_policy_decides_is_a_cancel(
    make_executor: MakeExecutor,
) -> None:
    """toolbus's own cancellation of the policy's task is not the policy's failure."""
    asked = threading.Event()

    class Hangs(BasePolicy):
        name = "hangs"

        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            asked.set()
            await asyncio.Event().wait()
            return Admit()

    ex = make_executor(_one_tool(Hangs()))
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        task = asyncio.ensure_future(ex.aexecute(ToolCall(name="f", arguments={"x": 1})))
        assert await asyncio.to_thread(asked.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (finished,) = await asyncio.to_thread(rec.wait_for, bus.FINISHED, 1, timeout=5)
    assert (finished.result.status, finished.result.error_code) == (
        "cancelled",
        ErrorCode.CANCELLED,
    )


class _TimeoutRaises(BasePolicy):
    name = "timing"

    def timeout(self, tool: Any, default: float | None) -> float | None:
        raise RuntimeError("boom")


class _AppliesRaises(BasePolicy):
    name = "choosy"

    def applies_to(self, tool: Any) -> bool:
        raise RuntimeError("boom")


class _AppliesIs(BasePolicy):
    """An `applies_to` that answers what is not a bool: whether it guards the
    tool is unknown, so the tool's calls are refused (issue 21: it used to be
    read for its truthiness, and None left the tool unguarded)."""

    name = "choosy"

    def __init__(self, value: Any) -> None:
        self.value = value

    def applies_to(self, tool: Any) -> Any:
        return self.value


class _TimeoutIs(BasePolicy):
    name = "timing"

    def __init__(self, value: Any) -> None:
        self.value = value

    def timeout(self, tool: Any, default: float | None) -> Any:
        return self.value


@pytest.mark.parametrize(
    "policy",
    [
        _TimeoutRaises(),
        _AppliesRaises(),
        _TimeoutIs("x"),
        _TimeoutIs(-1),
        _TimeoutIs(0),
        _TimeoutIs(float("nan")),
        _TimeoutIs(True),
        _AppliesIs(None),
        _AppliesIs("False"),
        _AppliesIs(1),
        _AppliesIs(()),
        _AppliesIs({"read_only": True}),
    ],
    ids=[
        "timeout-raises",
        "applies-raises",
        "str",
        "negative",
        "zero",
        "nan",
        "bool",
        "applies-none",
        "applies-str",
        "applies-int",
        "applies-empty-tuple",
        "applies-dict",
    ],
)
def test_a_broken_policy_hook_at_submission_is_a_result_not_an_exception(
    make_executor: MakeExecutor, policy: BasePolicy
) -> None:
    """applies_to and timeout are user code asked on the caller's thread: what
    they raise or return amiss refuses the call, naming the policy."""
    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[policy])
    r = ex.execute(ToolCall(name="read", arguments={"x": 1}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert policy.name in (r.error or "")
    if isinstance(policy, _AppliesIs):
        kind = type(policy.value).__name__
        assert f"its applies_to returned {kind}, not True/False" in (r.error or "")
    batch = ex.execute_batch([ToolCall(name="read", arguments={"x": i}) for i in range(2)])
    assert [b.status for b in batch] == ["rejected", "rejected"]
    assert ran == []


class _RaisesAt(BasePolicy):
    """Raises `exc` from `where`: its applies_to, its timeout, or its admit at submission."""

    name = "raising-hook"

    def __init__(self, where: str, exc: type[BaseException]) -> None:
        self.where, self.exc = where, exc
        self.at_submission = where == "admit-at-submission"

    def applies_to(self, tool: Any) -> bool:
        if self.where == "applies_to":
            raise self.exc()
        return True

    def timeout(self, tool: Any, default: float | None) -> float | None:
        if self.where == "timeout":
            raise self.exc()
        return default

    def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
        if self.where == "admit-at-submission":
            raise self.exc()
        return Admit()


_SUBMISSION_HOOKS = ["applies_to", "timeout", "admit-at-submission"]


@pytest.mark.parametrize("where", _SUBMISSION_HOOKS)
@pytest.mark.parametrize("exc", _BASE_EXCEPTIONS)
def test_a_policy_hook_raising_a_base_exception_at_submission_is_a_result(
    make_executor: MakeExecutor, where: str, exc: type[BaseException]
) -> None:
    """What a policy raises as a call is submitted is its failure (see
    extending.md: any exception), never an exception out of `execute*`; off
    the main thread, where no signal's handler runs, a KeyboardInterrupt too."""
    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[_RaisesAt(where, exc)])

    def calls() -> list[ToolResult]:
        r = ex.execute(ToolCall(name="read", arguments={"x": 1}))
        batch = ex.execute_batch([ToolCall(name="read", arguments={"x": i}) for i in range(2)])
        handle = ex.submit(ToolCall(name="read", arguments={"x": 3})).result(10)
        return [r, *batch, handle]

    th, out = in_thread(calls)
    assert finished(th, out)
    for r in out["r"]:
        assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
        assert "raising-hook" in (r.error or "") and exc.__name__ in (r.error or "")
    assert ran == []


@pytest.mark.parametrize("where", _SUBMISSION_HOOKS)
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_a_policy_at_submission_on_the_main_thread_reaches_the_caller(
    make_executor: MakeExecutor, where: str, exc: type[BaseException]
) -> None:
    """There it is Ctrl-C (a signal's handler runs on the main thread, inside
    whatever it runs): the caller is interrupted, and no call was handed on."""
    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[_RaisesAt(where, exc)])
    with pytest.raises(exc):
        ex.execute(ToolCall(name="read", arguments={"x": 1}))
    with pytest.raises(exc):
        ex.execute_batch([ToolCall(name="read", arguments={"x": i}) for i in range(2)])
    assert ex.stats().submitted == 0 and ran == []


class _InterruptsOn(BasePolicy):
    """Asked at submission, after a quota: Ctrl-C lands as it decides on `call_id`."""

    at_submission = True
    name = "audit"

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id

    def admit(self, call: ToolCall, tool: Any, now: float) -> Admit:
        if call.id == self.call_id:
            self.call_id = ""  # once
            raise KeyboardInterrupt
        return Admit()


@pytest.mark.parametrize("where", ["a later policy", "a submission hook", "a lone call's hook"])
def test_a_submission_interrupted_before_its_calls_are_handed_on_gives_their_units_back(
    make_executor: MakeExecutor, recorder: bus.Recorder, where: str
) -> None:
    """Ctrl-C on the caller's thread once a quota counted some of a
    submission's calls, before they were handed on (in a later policy asked
    at submission, in a submission hook): the calls never run, the quota gets
    their units back, and those that were made end `cancelled`, once."""
    ran: list[str] = []
    q = quota(2)
    audit = _InterruptsOn("b" if where == "a later policy" else "")
    ex = make_executor(_registry(ran), policies=[q, audit])
    if where != "a later policy":
        armed = [True]

        def hook(submission: Any) -> None:
            if armed.pop():
                raise KeyboardInterrupt

        ex.on_submit(hook)
    calls = [ToolCall(id=i, name="read", arguments={"x": 1}) for i in ("a", "b")]
    submit: Any = ex.execute_batch if where != "a lone call's hook" else ex.execute
    with pytest.raises(KeyboardInterrupt):
        submit(calls if submit == ex.execute_batch else calls[0])
    assert q.used("read") == 0 and ran == []
    # Made before the interruption: "a" (and "b", with everything made).
    made = ["a"] if where != "a submission hook" else ["a", "b"]
    for e in recorder.wait_for(bus.FINISHED, len(made), timeout=20):
        assert (e.result.status, e.result.error_code) == ("cancelled", ErrorCode.CANCELLED)
        assert "its submission was interrupted" in (e.result.error or "")
    assert sorted(e.call_id for e in recorder.of(bus.FINISHED)) == made
    stats = ex.stats()
    assert (stats.submitted, stats.cancelled, stats.in_flight) == (len(made), len(made), 0)
    # The quota's two units are there for the next two calls.
    again = ex.execute_batch(
        [ToolCall(id=f"n{i}", name="read", arguments={"x": i}) for i in (1, 2)]
    )
    assert [r.status for r in again] == ["ok", "ok"]


def _interrupt_entering(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    """Ctrl-C as `owner.name` is next entered (where a signal's handler runs)."""
    real = getattr(owner, name)
    armed = [True]

    def entered(*args: Any, **kwargs: Any) -> Any:
        if armed and threading.current_thread() is threading.main_thread():
            armed.clear()
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, entered)


@pytest.mark.parametrize(
    ("where", "made"),
    [
        ("done_asking", False),  # the policies asked, the run not yet made
        ("admitted_at_submission", False),
        ("post", True),  # the run made and shown to the hooks, not yet admitted
        ("_handle", True),
    ],
)
@pytest.mark.parametrize("how", ["execute", "execute_batch"])
def test_ctrl_c_anywhere_in_a_submission_gives_a_quotas_units_back(
    make_executor: MakeExecutor,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    made: bool,
    how: str,
) -> None:
    from toolbus.actors._scheduler import Scheduler
    from toolbus.pipeline._run import Run
    from toolbus.policies import _set

    ran: list[str] = []
    q = quota(2)
    ex = make_executor(_registry(ran), policies=[q])
    seen: list[str] = []
    ex.on_submit(lambda submission: seen.extend(submission.call_ids))
    owner = {"done_asking": _set, "admitted_at_submission": Run}.get(where, Scheduler)
    _interrupt_entering(monkeypatch, owner, where)
    calls = [ToolCall(id=i, name="read", arguments={"x": 1}) for i in ("a", "b")]
    submit: Any = ex.execute_batch if how == "execute_batch" else ex.execute
    with pytest.raises(KeyboardInterrupt):
        # In a context of its own: cut short before `done_asking`, the ask's
        # context variable stays set in it (as it would where a signal landed).
        contextvars.copy_context().run(submit, calls if how == "execute_batch" else calls[0])
    monkeypatch.undo()
    assert q.used("read") == 0 and ran == []
    ended = sorted(seen) if made else []
    for e in recorder.wait_for(bus.FINISHED, len(ended), timeout=20) if ended else []:
        assert (e.result.status, e.result.attempts) == ("cancelled", 0)
    assert sorted(e.call_id for e in recorder.of(bus.FINISHED)) == ended
    stats = ex.stats()
    assert (stats.submitted, stats.cancelled, stats.in_flight) == (len(ended), len(ended), 0)
    again = ex.execute_batch(
        [ToolCall(id=f"n{i}", name="read", arguments={"x": i}) for i in (1, 2)]
    )
    assert [r.status for r in again] == ["ok", "ok"]


@pytest.mark.parametrize("value", [None, float("inf")])
def test_a_policy_timeout_of_none_or_inf_means_no_deadline(
    make_executor: MakeExecutor, value: float | None
) -> None:
    ran: list[str] = []
    ex = make_executor(_registry(ran), timeout=30, policies=[_TimeoutIs(value)])
    with bus.Recorder(bus.EXECUTING, sender=ex) as rec:
        assert ex.execute(ToolCall(name="read", arguments={"x": 1})).status == "ok"
        (executing,) = rec.wait_for(bus.EXECUTING, 1, timeout=5)
    assert executing.timeout is None


def test_an_approval_is_asked_before_the_executors_policies(make_executor: MakeExecutor) -> None:
    """Approvals come first whatever their level: an executor's cache must not
    answer (nor its limits count) a call that a tool's approval guards."""
    from toolbus.policies import cache

    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[requires_approval(reason="patient data")])
    def read_record(patient: str) -> str:
        return f"record of {patient}"

    seen = Scripted("seen")
    ex = make_executor(reg, policies=[seen, cache(ttl=600)])
    c1 = ToolCall(id="c1", name="read_record", arguments={"patient": "p42"})
    request = ex.execute(c1).approval_request
    assert request is not None
    assert seen.asked == []  # deferred before the executor's policies were asked
    assert ex.execute(c1, approval=request.approve()).status == "ok"
    assert seen.asked == ["c1"]
    later = ex.execute(ToolCall(id="c2", name="read_record", arguments={"patient": "p42"}))
    assert later.status == "deferred", later.output  # not a cache hit
    assert seen.asked == ["c1"]


def test_the_published_digest_does_not_reveal_a_masked_secret(make_executor: MakeExecutor) -> None:
    """The digest is an HMAC under the executor's secret: hashing the few
    possible values of a masked argument no longer finds the one sent."""
    import hashlib

    from toolbus import _json
    from toolbus.policies import arguments_digest

    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def unlock(door: str, pin: str) -> str:
        return "open"

    ex = make_executor(reg, secret_keys=["pin"])
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        ex.execute(ToolCall(name="unlock", arguments={"door": "vault", "pin": "4821"}))
        (event,) = rec.wait_for(bus.FINISHED, 1, timeout=5)
    request = event.result.approval_request
    assert request.arguments_masked["pin"] == "***"

    def plain(pin: str) -> str:  # what the digest used to be
        data = b"unlock\0" + _json.canonical({"door": "vault", "pin": pin})
        return hashlib.sha256(data).hexdigest()

    pins = [f"{i:04d}" for i in range(10_000)]
    assert [p for p in pins if plain(p) == request.digest] == []
    guessed = b"\0" * 32
    assert [
        p
        for p in pins
        if arguments_digest("unlock", {"door": "vault", "pin": p}, secret=guessed) == request.digest
    ] == []
    # Under the executor's own secret it is the digest of those arguments.
    secret = ex._services.key_secret
    args = '{"pin": "4821", "door": "vault"}'  # spacing and key order do not matter
    assert arguments_digest("unlock", args, secret=secret) == request.digest


def test_an_approval_is_good_for_its_executor_and_its_journal_only(tmp_path: Any) -> None:
    ran: list[str] = []
    reg = _guarded(ran)
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    journal = tmp_path / "journal.sqlite"
    with Executor(reg, journal=journal) as first:
        request = first.execute(call).approval_request
    assert request is not None
    with Executor(reg) as stranger:  # another secret: the decision approves nothing here
        assert stranger.execute(call, approval=request.approve()).status == "deferred"
    with Executor(reg, journal=journal) as restarted:  # the journal's secret: still good
        assert restarted.execute(call, approval=request.approve()).status == "ok"
    assert ran == ["delete:/a"]


def test_an_approval_is_replayable(make_executor: MakeExecutor) -> None:
    """Documented: a decision approves a tool and exact arguments, not one
    submission nor one call id."""
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    request = ex.execute(
        ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    ).approval_request
    assert request is not None
    decision = request.approve()
    for call_id in ("d1", "d1", "other"):
        again = ToolCall(id=call_id, name="delete", arguments={"path": "/a"})
        assert ex.execute(again, approval=decision).status == "ok"
    assert ran == ["delete:/a"] * 3


def test_a_deferred_call_closing_its_batch_does_not_race_its_caller(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing a deferred call closes the calls it holds back, the last of
    which ends the batch: its caller, released, takes the batch's runs away
    while the supervisor was still reading them (an IndexError, logged as a
    supervisor error, most times with frequent thread switches)."""
    import logging
    import sys

    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def write(x: int) -> int:
        return x

    @reg.tool(read_only=True)
    def read(x: int) -> int:
        return x

    ex = make_executor(reg)
    calls = [
        ToolCall(name="write", arguments={"x": 1}),
        ToolCall(name="read", arguments={"x": 1}),
        ToolCall(name="nope", arguments={}),
    ]
    expected = ["deferred", "cancelled", "rejected"]

    async def main() -> None:
        for _ in range(300):
            out = await ex.aexecute_batch(calls)
            assert [r.status for r in out] == expected
            out = await ex.aexecute_batch(calls[2:] * 2)  # all rejected at submission
            assert [r.status for r in out] == ["rejected"] * 2

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with caplog.at_level(logging.ERROR, logger="toolbus"):
            asyncio.run(main())
            for _ in range(300):
                assert [r.status for r in ex.execute_batch(calls)] == expected
    finally:
        sys.setswitchinterval(interval)
    assert "supervisor error" not in caplog.text


def test_delays_until_one_future_hold_one_callback_on_it(make_executor: MakeExecutor) -> None:
    """However many calls wait on a future, and however often they are asked
    again, the future holds one callback (a never-completing one used to keep
    one, and the call with it, per delay)."""
    never: concurrent.futures.Future[None] = concurrent.futures.Future()
    wake: concurrent.futures.Future[None] = concurrent.futures.Future()

    class Waits(BasePolicy):
        def __init__(self) -> None:
            self.asks: dict[str, int] = {}
            self.lock = threading.Lock()

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            with self.lock:
                n = self.asks[call.id] = self.asks.get(call.id, 0) + 1
            if call.id.startswith("spin") and n < 30:
                return Delay(0.001, until=never)  # the timer wins, again and again
            if call.id.startswith("woken") and not wake.done():
                return Delay(600, until=wake)
            return Admit()

    policy = Waits()
    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[policy])
    spun = ex.execute_batch(
        [ToolCall(id=f"spin{i}", name="read", arguments={"x": i}) for i in range(4)]
    )
    assert [r.status for r in spun] == ["ok"] * 4
    assert len(never._done_callbacks) == 1  # type: ignore[attr-defined]
    out: list[Any] = []
    t = threading.Thread(
        target=lambda: out.append(
            ex.execute_batch(
                [ToolCall(id=f"woken{i}", name="read", arguments={"x": i}) for i in range(3)]
            )
        )
    )
    t.start()
    wait_until(lambda: sum(policy.asks.get(f"woken{i}", 0) for i in range(3)) == 3)
    assert len(wake._done_callbacks) == 1  # type: ignore[attr-defined]
    wake.set_result(None)
    t.join(10)
    assert [r.status for r in out[0]] == ["ok"] * 3


@pytest.mark.parametrize("message", [None, ""])
def test_a_rejection_without_a_message_names_the_policy(
    make_executor: MakeExecutor, message: Any
) -> None:
    class Quiet(BasePolicy):
        name = "quiet-guard"

        def __init__(self, at_submission: bool) -> None:
            self.at_submission = at_submission

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            return Reject(ErrorCode.TOOL_NOT_ALLOWED, message)

    for at_submission in (False, True):
        ran: list[str] = []
        ex = make_executor(_registry(ran), policies=[Quiet(at_submission)])
        r = ex.execute(ToolCall(name="read", arguments={"x": 1}))
        assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
        assert r.error == "Tool 'read' was rejected by its policy quiet-guard"


@pytest.mark.parametrize(
    ("given", "status", "code"),
    [
        (ToolResult(call_id="x", name="x", status="cancelled"), "cancelled", ErrorCode.CANCELLED),
        (ToolResult(call_id="x", name="x", status="error"), "error", ErrorCode.TOOL_ERROR),
        (
            ToolResult(call_id="x", name="x", status="deferred"),
            "rejected",
            ErrorCode.TOOL_UNAVAILABLE,
        ),
    ],
    ids=["cancelled-no-code", "error-no-code", "deferred-no-request"],
)
def test_a_policys_result_is_mended_or_refused(
    make_executor: MakeExecutor, given: ToolResult, status: str, code: ErrorCode
) -> None:
    """A failure a policy answers with gets a code and a text if it lacks them;
    a `deferred` one with nothing to approve is refused (as Respond), or ignored
    (as an on_result replacement)."""
    ran: list[str] = []
    ex = make_executor(_registry(ran), policies=[Scripted("canned", Respond(given))])
    r = ex.execute(ToolCall(id="c1", name="read", arguments={"x": 1}))
    assert (r.call_id, r.status, r.error_code) == ("c1", status, code)
    assert "canned" in (r.error or "") and ran == []

    class Replaces(BasePolicy):
        name = "replacer"

        def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult:
            return given

    ex = make_executor(_registry(ran), policies=[Replaces()])
    r = ex.execute(ToolCall(id="c2", name="read", arguments={"x": 2}))
    if given.status == "deferred":
        assert (r.status, r.output) == ("ok", 2)  # the replacement is ignored
    else:
        assert (r.call_id, r.status, r.error_code) == ("c2", status, code)
        assert "replacer" in (r.error or "")


@pytest.mark.parametrize(
    "approvals", [[("d1", None)], [], "d1", {"d1": {"digest": "x", "approved": True}}]
)
def test_approvals_that_are_not_decisions_are_a_type_error(
    make_executor: MakeExecutor, approvals: Any
) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    with pytest.raises(TypeError, match="approvals"):
        ex.execute_batch([call], approvals=approvals)
    with pytest.raises(TypeError, match="approvals"):
        asyncio.run(ex.aexecute_batch([call], approvals=approvals))
    assert ran == [] and ex.stats().submitted == 0


def test_an_approval_that_is_not_a_decision_is_a_type_error(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(_guarded(ran))
    call = ToolCall(id="d1", name="delete", arguments={"path": "/a"})
    request = ex.execute(call).approval_request
    assert request is not None
    for wrong in ({"digest": request.digest, "approved": True}, request, True):
        with pytest.raises(TypeError, match="approval"):
            ex.execute(call, approval=wrong)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="approval"):
            asyncio.run(ex.aexecute(call, approval=wrong))  # type: ignore[arg-type]
    assert ex.execute_batch([call], approvals={"d1": None})[0].status == "deferred"
    assert ran == []


class Identities(BasePolicy):
    """Records which object each hook was handed, delaying each call once."""

    name = "identities"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: dict[int, ToolCall] = {}
        self.told: list[int] = []

    def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
        with self.lock:
            again = id(call) in self.asked
            self.asked[id(call)] = call
        return Admit() if again else Delay(0.001)

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
        with self.lock:
            self.told.append(id(call))


def test_each_call_is_one_object_of_its_own_for_its_policies(make_executor: MakeExecutor) -> None:
    """Policies know a call by its object, as the protocol promises: asked
    again after a delay and told its result with the same one, and two calls
    are two objects even when the caller submits one object twice at once
    (review of issue 21: `execute_batch([c, c])` looked like one call to a
    circuit breaker, which then heard one result of two)."""
    policy = Identities()
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[policy])
    def echo(n: int) -> int:
        return n

    ex = make_executor(reg)
    same = ToolCall(id="call_0", name="echo", arguments={"n": 1})
    batch = ex.execute_batch([same, same, ToolCall(id="call_0", name="echo", arguments={"n": 2})])
    assert [r.status for r in batch.results] == ["ok", "ok", "ok"]
    assert len(policy.asked) == 3 and all(c is not same for c in policy.asked.values())
    assert sorted(policy.told) == sorted(policy.asked)
