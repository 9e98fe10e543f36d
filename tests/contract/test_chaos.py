"""Chaos: thousands of calls of every kind, each with exactly one result and one `tool:finished`."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from tests import process_tools as pt
from toolbus import ErrorCode, Executor, RetryPolicy, ToolCall, ToolRegistry, ToolResult, bus

# The slow tier (tests/README.md): thousands of calls with failures injected.
pytestmark = pytest.mark.slow

KINDS = [
    "ok", "ok_async", "raise", "hang", "hang_async", "flaky", "unknown", "malformed", "invalid",
    "write", "torn", "proc", "proc_hang", "proc_crash",
]  # fmt: skip
WEIGHTS = [30, 10, 10, 5, 5, 15, 5, 5, 5, 15, 3, 6, 2, 2]


def _registry(
    release: threading.Event, rng_lock: threading.Lock, rng: random.Random
) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(i: int) -> int:
        return i

    @reg.tool(read_only=True)
    async def ok_async(i: int) -> int:
        await asyncio.sleep(0)
        return i

    @reg.tool(read_only=True)
    def raise_(i: int) -> int:
        raise RuntimeError(f"boom {i}")

    @reg.tool(read_only=True, timeout=0.05)
    def hang(i: int) -> int:
        release.wait()
        return i

    @reg.tool(read_only=True, timeout=0.05)
    async def hang_async(i: int) -> int:
        await asyncio.Event().wait()
        return i

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=2, backoff_base=0.001, jitter=0))
    def flaky(i: int) -> int:
        with rng_lock:
            fail = rng.random() < 0.4
        if fail:
            raise ConnectionError(f"flaky {i}")
        return i

    @reg.tool
    def write(i: int) -> int:
        return i

    reg.unregister("raise_")
    reg.register(type(raise_)(raise_.fn, name="raise", read_only=True))
    # Tools in worker processes: killed at their deadline, crashing by exiting.
    for name, t in (
        ("proc", pt.chaos_echo),
        ("proc_hang", pt.chaos_stall),
        ("proc_crash", pt.chaos_crash),
    ):
        reg.register(
            type(t)(t.fn, name=name, read_only=t.read_only, timeout=t.timeout, backend="process")
        )
    return reg


def _call(kind: str, i: int) -> ToolCall:
    cid = f"{kind}-{i}"
    if kind == "unknown":
        return ToolCall(id=cid, name="ghost", arguments={"i": i})
    if kind == "malformed":
        return ToolCall(id=cid, name="ok", arguments='{"i": ' + str(i))
    if kind == "invalid":
        return ToolCall(id=cid, name="ok", arguments={"i": "not-int"})
    if kind == "torn":  # a model's call cut off mid-stream, as a mapping
        return {"id": cid, "name": "write", "arguments": [i]}  # type: ignore[return-value]
    return ToolCall(id=cid, name=kind, arguments=f'{{"i": {i}}}')


def test_chaos_every_call_gets_exactly_one_result() -> None:
    rng = random.Random(20261122)
    release = threading.Event()
    rng_lock = threading.Lock()
    reg = _registry(release, rng_lock, rng)
    results: dict[str, list[ToolResult]] = defaultdict(list)
    kinds: dict[str, str] = {}
    lock = threading.Lock()
    counter = iter(range(10**9))

    def make_batch(size: int) -> list[ToolCall]:
        with rng_lock:
            picked = rng.choices(KINDS, WEIGHTS, k=size)
        calls = []
        for kind in picked:
            c = _call(kind, next(counter))
            kinds[c["id"] if isinstance(c, dict) else c.id] = kind
            calls.append(c)
        return calls

    def record(rs: Any) -> None:
        with lock:
            for r in rs:
                results[r.call_id].append(r)

    async def tag_async(call: ToolCall) -> ToolCall:  # an async pre-call hook on every call
        await asyncio.sleep(0)
        return call

    def raising_subscriber(sender: Any, **_: Any) -> None:
        raise RuntimeError("a faulty observer")

    def slow_subscriber(sender: Any, **_: Any) -> None:
        time.sleep(0.001)  # an observer under test that is slow, not a synchronisation

    try:
        with Executor(
            reg, max_parallel=16, timeout=5, max_abandoned_workers=2000, pre_call=[tag_async]
        ) as ex:
            with (
                bus.Recorder(bus.FINISHED, bus.LATE_RESULT, bus.KILLED, sender=ex) as rec,
                bus.subscribe(raising_subscriber, sender=ex),
                bus.subscribe(slow_subscriber, bus.EXECUTING, bus.FINISHED, sender=ex),
            ):

                def sync_agent(seed: int) -> None:
                    local = random.Random(seed)
                    for _ in range(40):
                        calls = make_batch(local.randint(1, 20))
                        if local.random() < 0.2:
                            for c in calls:
                                record([ex.execute(c)])
                        else:
                            record(ex.execute_batch(calls, stop_on_error=local.random() < 0.2))

                async def async_agent(seed: int) -> None:
                    local = random.Random(seed)
                    for _ in range(40):
                        calls = make_batch(local.randint(1, 20))
                        task = asyncio.ensure_future(ex.aexecute_batch(calls))
                        if local.random() < 0.15:
                            # A chosen instant (not a wait): one turn in, its calls
                            # submitted, some perhaps running, then cancelled.
                            await asyncio.sleep(0)
                            task.cancel()
                        try:
                            record(await task)
                        except asyncio.CancelledError:
                            pass  # these calls' results are only in their events

                async def async_side() -> None:
                    await asyncio.gather(*(async_agent(1000 + k) for k in range(3)))

                threads = [threading.Thread(target=sync_agent, args=(k,)) for k in range(4)]
                threads.append(threading.Thread(target=lambda: asyncio.run(async_side())))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
                assert not any(t.is_alive() for t in threads)
                total = len(kinds)
                rec.wait_for(bus.FINISHED, total, timeout=30)
                ex.drain_events()
                finished = rec.of(bus.FINISHED)
                killed = rec.of(bus.KILLED)
                late = rec.of(bus.LATE_RESULT)
                # Callers are woken after their call is counted: stats are exact now.
                stats = ex.stats()
    finally:
        release.set()

    assert total > 2000
    by_call = Counter(e.call_id for e in finished)
    assert set(by_call) == set(kinds), "a call never finished"
    assert all(n == 1 for n in by_call.values()), "a call finished twice"
    assert all(len(rs) == 1 for rs in results.values()), "a call returned two results"
    # Process tools are killed, never abandoned: one kill per worker, and a
    # stalled worker never replies. A quick worker may reply in the instant its
    # call is cancelled: the tool did finish, so that is reported as late.
    assert all(kinds[e.call_id] in ("proc", "proc_hang", "proc_crash") for e in killed)
    late_proc = [e for e in late if kinds[e.call_id].startswith("proc")]
    assert all(kinds[e.call_id] == "proc" for e in late_proc), "a stalled worker replied"
    assert len({e.pid for e in killed}) == len(killed) == stats.killed_workers
    assert any(kinds[e.call_id] == "proc_hang" and e.reason == "timeout" for e in killed)
    final = {e.call_id: e.result for e in finished}
    for cid, (returned,) in results.items():
        assert returned == final[cid]

    statuses: Counter[tuple[str, str]] = Counter()
    for cid, r in final.items():
        kind = kinds[cid]
        statuses[(kind, r.status)] += 1
        assert r.attempts <= 3
        if r.status == "cancelled":
            assert r.error_code in (ErrorCode.CANCELLED, ErrorCode.ABORTED)
            continue
        expected = {
            "ok": ("ok", None),
            "ok_async": ("ok", None),
            "write": ("ok", None),
            "raise": ("error", ErrorCode.TOOL_ERROR),
            "hang": ("timeout", ErrorCode.EXECUTION_TIMEOUT),
            "hang_async": ("timeout", ErrorCode.EXECUTION_TIMEOUT),
            "torn": ("rejected", ErrorCode.INVALID_ARGUMENTS),
            "proc": ("ok", None),
            "proc_hang": ("timeout", ErrorCode.EXECUTION_TIMEOUT),
            "proc_crash": ("error", ErrorCode.TOOL_CRASHED),
            "unknown": ("rejected", ErrorCode.TOOL_NOT_FOUND),
            "malformed": ("rejected", ErrorCode.INVALID_ARGUMENTS),
            "invalid": ("rejected", ErrorCode.INVALID_ARGUMENTS),
        }.get(kind)
        if expected is not None:
            assert (r.status, r.error_code) == expected, (cid, r)
        else:  # flaky
            assert r.status in ("ok", "error")
        if r.status == "ok" and kind not in ("write", "proc_crash"):
            assert r.output == int(cid.rsplit("-", 1)[1])

    assert stats.in_flight == 0 and stats.queued == 0
    assert stats.submitted == total
    assert stats.ok + stats.error + stats.timeout + stats.cancelled + stats.rejected == total
    assert statuses[("hang", "timeout")] > 0 and statuses[("flaky", "ok")] > 0
    assert statuses[("hang_async", "timeout")] > 0 and statuses[("torn", "rejected")] > 0


def test_batch_of_unknown_tools_completes_once() -> None:
    """A batch of unknown tools announced tool:batch-complete twice (concurrency review)."""
    with bus.Recorder("tool:batch-complete") as rec, Executor(ToolRegistry()) as ex:
        ex.execute_batch([ToolCall(name="ghost", arguments={})])
        ex.drain_events()
        assert len(rec.of("tool:batch-complete")) == 1


def test_stop_on_error_batch_completes_once() -> None:
    """A stop_on_error batch announced tool:batch-complete twice (concurrency review)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def boom(i: int) -> int:
        raise ValueError("x")

    @reg.tool
    def write(i: int) -> int:
        return i

    with bus.Recorder("tool:batch-complete") as rec, Executor(reg) as ex:
        calls = [
            ToolCall(name="boom", arguments={"i": 1}),
            ToolCall(name="write", arguments={"i": 1}),
        ]
        ex.execute_batch(calls, stop_on_error=True)
        ex.drain_events()
        assert len(rec.of("tool:batch-complete")) == 1
