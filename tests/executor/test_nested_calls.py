"""Nested calls, a tool calling its own executor: they run or fail fast, never
hang, and never take more of the executor than their caller lends them."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.concurrency_tools import in_thread as _in_thread
from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolContext, ToolRegistry, bus


@pytest.mark.parametrize("limits", [{"max_parallel": 1}, {"max_parallel": 2}])
def test_a_tool_calling_its_own_executor_runs(make_executor: MakeExecutor, limits: Any) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool
    def inner(x: int) -> int:
        return x + 1

    @reg.tool
    def outer(x: int) -> int:
        r = holder["ex"].execute(ToolCall(name="inner", arguments={"x": x}))
        batch = holder["ex"].execute_batch([ToolCall(name="inner", arguments={"x": x})] * 3)
        return int(r.output) + sum(int(b.output) for b in batch)

    ex = holder["ex"] = make_executor(reg, timeout=10, **limits)
    r = ex.execute(ToolCall(name="outer", arguments={"x": 1}))
    assert (r.status, r.output) == ("ok", 8)


def test_a_nested_call_into_a_tool_its_callers_saturate_fails_fast(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(max_concurrency=1)
    def recurse(depth: int) -> Any:
        if depth == 0:
            return "bottom"
        r = holder["ex"].execute(ToolCall(name="recurse", arguments={"depth": depth - 1}))
        return {"status": r.status, "code": r.error_code, "error": r.error}

    ex = holder["ex"] = make_executor(reg, timeout=None)
    r = ex.execute(ToolCall(name="recurse", arguments={"depth": 1}))
    assert r.status == "ok"
    assert r.output["status"] == "rejected"
    assert r.output["code"] == ErrorCode.TOOL_UNAVAILABLE
    assert "deadlock" in r.output["error"]


async def test_an_async_tool_awaiting_its_own_executor_runs(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool
    async def leaf() -> str:
        return "leaf"

    @reg.tool
    async def parent() -> str:
        r = await holder["ex"].aexecute(ToolCall(name="leaf"))
        return f"parent of {r.output}"

    ex = holder["ex"] = make_executor(reg, max_parallel=1, timeout=10)
    r = await ex.aexecute(ToolCall(name="parent"))
    assert (r.status, r.output) == ("ok", "parent of leaf")


def test_a_blocking_execute_from_an_async_tool_is_refused(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool
    def leaf() -> str:
        return "leaf"

    @reg.tool
    async def parent() -> Any:
        r = holder["ex"].execute(ToolCall(id="n1", name="leaf"))
        return [r.call_id, r.status, r.error_code]

    ex = holder["ex"] = make_executor(reg, timeout=10)
    r = ex.execute(ToolCall(name="parent"))
    assert r.output == ["n1", "rejected", ErrorCode.TOOL_UNAVAILABLE]


@pytest.mark.parametrize("nested", ["batch", "single"])
def test_a_nested_call_is_not_stuck_behind_a_queued_caller(
    make_executor: MakeExecutor, nested: str
) -> None:
    """A nested call queued behind a top-level caller that waited for its slot: a deadlock (Engine
    v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    go = threading.Event()

    @reg.tool(read_only=True)
    def inner(x: int) -> int:
        return x

    @reg.tool(read_only=True)
    def plain() -> str:
        return "plain"

    @reg.tool(read_only=True)
    def outer() -> Any:
        go.wait(10)  # until another caller queues behind this call
        ex = holder["ex"]
        if nested == "batch":
            return ex.execute_batch([ToolCall(name="inner", arguments={"x": 1})]).results[0].output
        return ex.execute(ToolCall(name="inner", arguments={"x": 1})).output

    ex = holder["ex"] = make_executor(reg, max_parallel=1, timeout=None)
    t1, o1 = _in_thread(lambda: ex.execute(ToolCall(name="outer")))
    wait_until(lambda: ex.stats().in_flight == 1)
    t2, o2 = _in_thread(lambda: ex.execute(ToolCall(name="plain")))
    wait_until(lambda: ex.stats().queued == 1)
    go.set()
    t1.join(10)
    t2.join(10)
    assert o1["r"].output == 1
    assert o2["r"].output == "plain"


def test_a_nested_call_parked_on_a_tool_limit_is_let_out_first(
    make_executor: MakeExecutor,
) -> None:
    """A nested call parked on a tool's limit was let out after the callers queued behind it (Engine
    v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    q_in, q_go = threading.Event(), threading.Event()

    @reg.tool(read_only=True, max_concurrency=1)
    def y(tag: str) -> str:
        if tag == "Q":
            q_in.set()
            q_go.wait(10)
        return tag

    @reg.tool(read_only=True)
    def w() -> str:
        return "w:" + holder["ex"].execute(ToolCall(name="y", arguments={"tag": "n"})).status

    @reg.tool(read_only=True)
    def p() -> str:
        return "p:" + str(holder["ex"].execute(ToolCall(name="w")).output)

    ex = holder["ex"] = make_executor(reg, max_parallel=2, timeout=None)
    tq, oq = _in_thread(lambda: ex.execute(ToolCall(name="y", arguments={"tag": "Q"})))
    assert q_in.wait(10)
    tr, orr = _in_thread(lambda: ex.execute(ToolCall(name="y", arguments={"tag": "R"})))
    wait_until(lambda: ex.stats().queued == 1)
    tp, op = _in_thread(lambda: ex.execute(ToolCall(name="p")))
    wait_until(lambda: ex.stats().queued == 2)  # the nested y call waits behind R
    q_go.set()
    for t in (tq, tr, tp):
        t.join(10)
    assert (oq["r"].output, orr["r"].output, op["r"].output) == ("Q", "R", "p:w:ok")


def test_tools_calling_each_other_fail_fast_instead_of_deadlocking(
    make_executor: MakeExecutor,
) -> None:
    """Two tools at max_concurrency=1 calling each other deadlocked (Engine v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    both_in = threading.Barrier(2, timeout=10)

    def body(other: str, depth: int) -> Any:
        if depth:
            return "leaf"
        both_in.wait()  # each holds its own slot before calling the other
        r = holder["ex"].execute(ToolCall(name=other, arguments={"depth": 1}))
        return [r.status, r.error_code]

    @reg.tool(read_only=True, max_concurrency=1)
    def a(depth: int = 0) -> Any:
        return body("b", depth)

    @reg.tool(read_only=True, max_concurrency=1)
    def b(depth: int = 0) -> Any:
        return body("a", depth)

    ex = holder["ex"] = make_executor(reg, timeout=None)
    batch = ex.execute_batch([ToolCall(name="a"), ToolCall(name="b")])
    outputs = sorted(r.output for r in batch)
    # One of them is refused at once; the other then gets its slot and runs.
    assert outputs == [["ok", None], ["rejected", ErrorCode.TOOL_UNAVAILABLE]]


def test_a_post_call_hook_may_call_its_executor_after_a_timeout(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    """A post-call hook calling its executor after a timeout hung on the slot it held
    (Engine v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True)
    def audit() -> str:
        return "audited"

    @reg.tool(timeout=HANG_TIMEOUT)  # (its post-call hook must see a timeout in the tool)
    def slow() -> str:
        release.wait(30)
        return "late"

    def post(call: ToolCall, result: Any) -> Any:
        if call.name == "audit":
            return result
        r = holder["ex"].execute(ToolCall(name="audit"))
        return result.model_copy(update={"metadata": {"audit": r.output}})

    ex = holder["ex"] = make_executor(reg, max_parallel=1, post_call=[post], hook_grace=30)
    r = ex.execute(ToolCall(name="slow"))
    assert (r.status, r.metadata) == ("timeout", {"audit": "audited"})


def test_a_refused_blocking_execute_is_counted_and_announced(make_executor: MakeExecutor) -> None:
    """A blocking execute refused on the executor's own loop was neither counted nor announced
    (Engine v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool
    def leaf() -> str:
        return "leaf"

    @reg.tool
    async def top() -> Any:
        r = holder["ex"].execute(ToolCall(id="nested", name="leaf"))
        b = holder["ex"].execute_batch([ToolCall(id="nested-b", name="leaf")])
        return [r.status, b.results[0].status]

    ex = holder["ex"] = make_executor(reg)
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        assert ex.execute(ToolCall(id="top", name="top")).output == ["rejected", "rejected"]
        rec.wait_for(bus.FINISHED, 3)
    assert sorted(e.call_id for e in rec.of(bus.FINISHED)) == ["nested", "nested-b", "top"]
    s = ex.stats()
    assert (s.submitted, s.rejected, s.ok) == (3, 2, 1)


def test_a_blocking_execute_from_an_async_tool_on_the_callers_loop_is_refused(
    make_executor: MakeExecutor,
) -> None:
    """A blocking execute from an async tool on the caller's loop froze that loop
    (Engine v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True, max_concurrency=1)
    def limited() -> int:
        return 1

    @reg.tool(read_only=True)
    async def caller_tool() -> Any:
        r = holder["ex"].execute(ToolCall(name="limited"))
        return [r.status, r.error_code]

    ex = holder["ex"] = make_executor(reg, timeout=None)

    async def main() -> Any:
        return await ex.aexecute_batch([ToolCall(name="caller_tool"), ToolCall(name="limited")])

    t, out = _in_thread(lambda: asyncio.run(main()))
    t.join(10)
    assert not t.is_alive(), "deadlock: the blocking call froze the caller's loop"
    first, second = out["r"].results
    assert first.output == ["rejected", ErrorCode.TOOL_UNAVAILABLE]
    assert second.output == 1


@pytest.mark.parametrize("how", ["gather", "batch"])
def test_nested_fan_out_stays_within_max_parallel(make_executor: MakeExecutor, how: str) -> None:
    """A nested fan-out (gather or batch) ran past max_parallel (Engine v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    lock = threading.Lock()
    now = {"n": 0, "peak": 0}

    @reg.tool(read_only=True)
    async def leaf(i: int) -> int:
        with lock:
            now["n"] += 1
            now["peak"] = max(now["peak"], now["n"])
        await asyncio.sleep(0.01)  # the tool under test works for a moment
        with lock:
            now["n"] -= 1
        return i

    @reg.tool(read_only=True)
    async def fan() -> int:
        ex = holder["ex"]
        calls = [ToolCall(name="leaf", arguments={"i": i}) for i in range(20)]
        if how == "batch":
            return sum(int(r.output) for r in await ex.aexecute_batch(calls))
        rs = await asyncio.gather(*(ex.aexecute(c) for c in calls))
        return sum(int(r.output) for r in rs)

    ex = holder["ex"] = make_executor(reg, timeout=None, max_parallel=2)
    assert ex.execute(ToolCall(name="fan")).output == 190
    # The caller holds one slot and lends one share: at most max_parallel leaves run.
    assert now["peak"] <= 2
    assert ex.stats().peak_in_flight <= 3


def test_a_timed_out_caller_lends_no_share_to_its_late_nested_calls(
    make_executor: MakeExecutor,
) -> None:
    """A timed-out caller still lent its share to its late nested calls: past max_parallel (Engine
    v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    lock = threading.Lock()
    now = {"n": 0, "peak": 0}
    parents_timed_out = threading.Event()
    nested_done = threading.Barrier(4, timeout=20)

    go = threading.Event()

    @reg.tool(read_only=True)
    def leaf() -> str:
        with lock:
            now["n"] += 1
            now["peak"] = max(now["peak"], now["n"])
        assert go.wait(20)  # held until the others have started too, or are held back
        with lock:
            now["n"] -= 1
        return "leaf"

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def parent() -> str:
        parents_timed_out.wait(10)  # ignores its deadline; its caller is gone
        holder["ex"].execute(ToolCall(name="leaf"))
        nested_done.wait()
        return "late"

    ex = holder["ex"] = make_executor(reg, max_parallel=1)
    for _ in range(3):
        assert ex.execute(ToolCall(name="parent")).status == "timeout"
    parents_timed_out.set()
    # The state that decides it: the three nested calls all running (a share
    # lent), or one running and two queued for the one slot (none lent).
    wait_until(
        lambda: now["peak"] > 1 or (now["n"] == 1 and ex.stats().queued == 2),
        timeout=20,
        what="the nested calls to run at once or to be held back",
    )
    go.set()
    nested_done.wait()  # the three abandoned parents' nested calls have all run
    assert now["peak"] <= 1
    assert ex.stats().peak_in_flight <= 2


# A bound on waits that must end (they end as soon as what they wait for happens).
WAIT = 30.0


@pytest.mark.parametrize("depth", [1, 2])
def test_cancelling_a_sync_tool_ends_the_calls_it_made(
    make_executor: MakeExecutor, recorder: bus.Recorder, depth: int
) -> None:
    """Work started inside a call never outlives it: a sync tool blocked on
    a nested `execute` is let go when its call is cancelled, and the nested
    call (and the one it made in turn) ends `cancelled` with it, its tool told."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    bottom_started = threading.Event()
    told: list[bool] = []

    @reg.tool(read_only=True)
    def hold(ctx: ToolContext) -> str:
        bottom_started.set()
        told.append(ctx.wait_cancelled(WAIT))
        return "held"

    @reg.tool(read_only=True)
    def call_down(levels: int) -> str:
        name, args = ("hold", {}) if levels == 1 else ("call_down", {"levels": levels - 1})
        r = holder["ex"].execute(ToolCall(id=f"level-{levels - 1}", name=name, arguments=args))
        return r.status

    ex = holder["ex"] = make_executor(reg, timeout=None)
    handle = ex.submit(ToolCall(id="top", name="call_down", arguments={"levels": depth}))
    assert bottom_started.wait(WAIT)
    handle.cancel()
    assert handle.result(WAIT).status == "cancelled"
    below = [f"level-{k}" for k in range(depth)]
    ended = recorder.wait_for(bus.FINISHED, len(below), where=lambda e: e.call_id in below)
    for e in ended:
        assert (e.result.status, e.result.error_code) == ("cancelled", ErrorCode.CANCELLED)
        assert "was cancelled" in (e.result.error or "") and "its caller, call" in e.result.error
    wait_until(lambda: told == [True], what="the bottom tool told of its cancellation")
    wait_until(lambda: ex.stats().in_flight == 0, what="every slot given back")


def test_a_call_made_by_a_tool_already_cancelled_ends_at_once(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """A sync tool let go when its call was cancelled goes on, and calls its
    executor: that call is cancelled too, before its tool runs."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    started = threading.Event()
    ran: list[str] = []
    made: list[Any] = []

    @reg.tool(read_only=True)
    def inner() -> str:
        ran.append("inner")
        return "ran"

    @reg.tool(read_only=True)
    def outer(ctx: ToolContext) -> str:
        started.set()
        ctx.wait_cancelled(WAIT)
        made.append(holder["ex"].execute(ToolCall(id="late", name="inner", arguments={})))
        return "done"

    ex = holder["ex"] = make_executor(reg, timeout=None)
    handle = ex.submit(ToolCall(id="outer", name="outer", arguments={}))
    assert started.wait(WAIT)
    handle.cancel()
    (late,) = recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "late")
    assert (late.result.status, late.result.error) == (
        "cancelled",
        "its caller, call outer, was cancelled",
    )
    wait_until(lambda: len(made) == 1, what="the let-go tool got its nested call's result")
    assert made[0].status == "cancelled" and ran == []
