"""Scenario 10's load: the tools, a seeded plan of calls per agent, the agents, the probe.

Everything the scenario measures is recorded here, thread-safe, in a `Probe`:
the deadline each hanging tool saw (from its `ToolContext`), every result
returned to a caller (with the caller's clock for single calls), every
`tool:finished` event, and the calls whose awaiting task was cancelled (their
results are only in their events). Beside it, the garbage collector's pauses
(`watched_gc`) and the log records, counted rather than printed (`counted_logs`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from toolbus import Executor, RetryPolicy, ToolCall, ToolContext, ToolRegistry, ToolResult, bus

SEED = 20261122
KINDS = (
    "ok", "ok_async", "raise", "hang", "hang_async", "flaky", "unknown", "malformed", "invalid",
    "write", "torn",
)  # fmt: skip
WEIGHTS = (30, 10, 10, 5, 5, 15, 5, 5, 5, 15, 3)
HANGS = ("hang", "hang_async")
HANG_TIMEOUT = 0.05  # the hanging tools' own timeout, seconds
FLAKY_FAILS = 0.4  # each attempt of `flaky` fails with this probability (2 retries)
HANG_LIMIT = 600.0  # a hanging tool gives up after this long, released or not

# Final statuses each kind may end with; every kind may also end `cancelled`
# (its batch stopped on an error, or its awaiting task was cancelled).
EXPECTED: dict[str, tuple[str, ...]] = {
    "ok": ("ok",),
    "ok_async": ("ok",),
    "write": ("ok",),
    "raise": ("error",),
    "hang": ("timeout",),
    "hang_async": ("timeout",),
    "flaky": ("ok", "error"),
    "unknown": ("rejected",),
    "malformed": ("rejected",),
    "invalid": ("rejected",),
    "torn": ("rejected",),
}

Call = ToolCall | Mapping[str, Any]


Print = tuple[str, str, Any, str | None, str | None, int, float]
"""A result's fingerprint: name, status, output, error, error code, attempts, duration."""


def fingerprint(r: ToolResult) -> Print:
    """`r` as a tuple of strings and numbers: the collector stops tracking such tuples,
    so keeping 10 000 of them does not lengthen the full collections the scenario times
    (keeping the results would: three tracked objects each)."""
    out = r.output if r.output is None or type(r.output) is int else repr(r.output)
    code = r.error_code.value if r.error_code is not None else None
    return (r.name, r.status, out, r.error, code, r.attempts, r.duration)


@dataclass
class Probe:
    """What the tools, subscribers and agents saw; every method is thread-safe.

    Per call id: its first result returned to a caller and its first
    `tool:finished` (time and fingerprint), and how many of each arrived.
    """

    deadlines: dict[str, tuple[int, float]] = field(default_factory=dict)  # id: (attempt, deadline)
    returned: dict[str, Print] = field(default_factory=dict)
    returns: Counter[str] = field(default_factory=Counter)
    freed_at: dict[str, float] = field(default_factory=dict)  # single calls: caller's monotonic
    finished: dict[str, tuple[float, Print]] = field(default_factory=dict)  # id: (timestamp, print)
    finishes: Counter[str] = field(default_factory=Counter)
    unreturned: set[str] = field(default_factory=set)  # calls of a cancelled awaiting task
    finished_count: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    def deadline(self, ctx: ToolContext) -> None:
        """Record the deadline of this attempt, keeping the latest attempt's."""
        if ctx.deadline is None:
            return
        with self.cond:
            seen = self.deadlines.get(ctx.call_id)
            if seen is None or seen[0] < ctx.attempt:
                self.deadlines[ctx.call_id] = (ctx.attempt, ctx.deadline)

    def single(self, result: ToolResult, freed_at: float) -> None:
        self.batch((result,))
        with self.cond:
            self.freed_at.setdefault(result.call_id, freed_at)

    def batch(self, results: Iterable[ToolResult]) -> None:
        prints = [(r.call_id, fingerprint(r)) for r in results]
        with self.cond:
            for cid, p in prints:
                self.returned.setdefault(cid, p)
                self.returns[cid] += 1

    def cancelled(self, call_ids: Iterable[str]) -> None:
        with self.cond:
            self.unreturned.update(call_ids)

    def on_finished(self, sender: Any, *, event: bus.CallFinished, signal: str) -> None:
        """The recorder: a subscriber to `tool:finished`."""
        p = fingerprint(event.result)
        with self.cond:
            self.finished.setdefault(event.call_id, (event.timestamp, p))
            self.finishes[event.call_id] += 1
            self.finished_count += 1
            self.cond.notify_all()

    def wait_finished(self, count: int, timeout: float) -> bool:
        """Wait until `count` `tool:finished` events arrived; False if `timeout` passed first."""
        with self.cond:
            return self.cond.wait_for(lambda: self.finished_count >= count, timeout)


def registry(release: threading.Event, probe: Probe) -> ToolRegistry:
    """The tools: ok, ok_async, raise, hang, hang_async, flaky (read-only) and write."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(i: int) -> int:
        """Return i."""
        return i

    @reg.tool(read_only=True)
    async def ok_async(i: int) -> int:
        """Yield once, then return i."""
        await asyncio.sleep(0)
        return i

    @reg.tool(name="raise", read_only=True)
    def raise_(i: int) -> int:
        """Raise."""
        raise RuntimeError(f"boom {i}")

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def hang(i: int, ctx: ToolContext) -> int:
        """Block its thread until the scenario ends, ignoring its deadline."""
        probe.deadline(ctx)
        release.wait(HANG_LIMIT)
        return i

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    async def hang_async(i: int, ctx: ToolContext) -> int:
        """Await far past its deadline."""
        probe.deadline(ctx)
        await asyncio.sleep(HANG_LIMIT)
        return i

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=2, backoff_base=0.001, jitter=0))
    def flaky(i: int, ctx: ToolContext) -> int:
        """Fail some attempts with ConnectionError (retried), seeded by call id and attempt."""
        if zlib.crc32(f"{ctx.call_id}/{ctx.attempt}".encode()) % 1000 < FLAKY_FAILS * 1000:
            raise ConnectionError(f"flaky {i}")
        return i

    @reg.tool
    def write(i: int) -> int:
        """A mutating call: it runs alone in its batch."""
        return i

    return reg


def make_call(kind: str, cid: str, i: int) -> Call:
    if kind == "unknown":
        return ToolCall(id=cid, name="ghost", arguments={"i": i})
    if kind == "malformed":
        return ToolCall(id=cid, name="ok", arguments='{"i": ' + str(i))
    if kind == "invalid":
        return ToolCall(id=cid, name="ok", arguments={"i": "not-int"})
    if kind == "torn":  # a model's call cut off mid-stream, as a mapping
        return {"id": cid, "name": "write", "arguments": [i]}
    return ToolCall(id=cid, name=kind, arguments=f'{{"i": {i}}}')


def call_id(call: Call) -> str:
    return call.id if isinstance(call, ToolCall) else str(call["id"])


@dataclass(frozen=True)
class Step:
    """What an agent does next: its calls one at a time, or as one batch.

    Calls are kept as (kind, id, i) and made when the step runs: tuples of
    strings and ints are not tracked by the garbage collector, so the plan
    does not lengthen the full collections the scenario times.
    """

    specs: list[tuple[str, str, int]]
    single: bool
    stop_on_error: bool = False
    cancel_after: float | None = None  # async agents: cancel the awaiting task after this long

    def calls(self) -> list[Call]:
        return [make_call(*spec) for spec in self.specs]


def plan(agent: int, quota: int, *, asynchronous: bool, kinds: dict[str, str]) -> list[Step]:
    """`quota` calls for one agent, seeded by its number; records each call's kind in `kinds`."""
    rng = random.Random(SEED + agent)
    steps: list[Step] = []
    k = 0
    while k < quota:
        size = min(rng.randint(1, 20), quota - k)
        specs = []
        for kind in rng.choices(KINDS, WEIGHTS, k=size):
            cid = f"{kind}-{agent}-{k}"
            kinds[cid] = kind
            specs.append((kind, cid, k))
            k += 1
        single = rng.random() < 0.2
        stop = not single and rng.random() < 0.2
        cancel = rng.uniform(0, 0.03) if asynchronous and rng.random() < 0.15 else None
        steps.append(Step(specs, single, stop, cancel))
    return steps


def sync_agent(ex: Executor, steps: list[Step], probe: Probe) -> None:
    """Run the steps from this thread: `execute` one call at a time, or `execute_batch`."""
    for st in steps:
        calls = st.calls()
        if st.single:
            for c in calls:
                r = ex.execute(c)
                probe.single(r, time.monotonic())
        else:
            probe.batch(ex.execute_batch(calls, stop_on_error=st.stop_on_error))


async def async_agent(ex: Executor, steps: list[Step], probe: Probe) -> None:
    """Run the steps as a task: `aexecute` one call at a time, or `aexecute_batch`;
    a step with `cancel_after` cancels its awaiting task if it is still waiting then."""
    for st in steps:
        calls = st.calls()
        if st.single:
            for c in calls:
                if st.cancel_after is None:  # awaited directly: no task between call and caller
                    r = await ex.aexecute(c)
                    probe.single(r, time.monotonic())
                    continue
                one = asyncio.ensure_future(ex.aexecute(c))
                if await _settle(one, st.cancel_after):
                    probe.single(one.result(), time.monotonic())
                else:
                    probe.cancelled([call_id(c)])
        else:
            batch = asyncio.ensure_future(ex.aexecute_batch(calls, stop_on_error=st.stop_on_error))
            if await _settle(batch, st.cancel_after):
                probe.batch(batch.result())
            else:
                probe.cancelled(call_id(c) for c in calls)


async def _settle(task: asyncio.Future[Any], cancel_after: float | None) -> bool:
    """Await `task`, cancelling it after `cancel_after` seconds; True if it returned."""
    if cancel_after is not None:
        done, _ = await asyncio.wait({task}, timeout=cancel_after)
        if not done:
            task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return False
    return True


class LogCount(logging.Handler):
    """Counts log records by level instead of printing them (one subscriber raises always)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] += 1


@contextmanager
def counted_logs(*names: str) -> Iterator[Counter[str]]:
    """Inside the block, these loggers' records are counted by level, not printed."""
    handler = LogCount()
    saved = []
    for name in names:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield handler.counts
    finally:
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate


class Pauses:
    """The garbage collector's pauses: (start, seconds, generation), monotonic clock."""

    def __init__(self) -> None:
        self.items: list[tuple[float, float, int]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        # A collection holds the GIL from start to stop: no two overlap.
        if phase == "start":
            self._start = time.monotonic()
        else:
            self.items.append((self._start, time.monotonic() - self._start, info["generation"]))

    def overlapping(self, start: float, end: float, at_least: float) -> bool:
        """Whether a pause of `at_least` seconds or more overlapped [start, end]."""
        return any(a < end and a + d > start for a, d, _ in self.items if d >= at_least)


@contextmanager
def watched_gc() -> Iterator[Pauses]:
    """Record collections; objects alive before (modules, other scenarios' peers) are
    frozen out of them, so pauses are those of this run's objects in any suite."""
    pauses = Pauses()
    gc.collect()
    gc.freeze()
    gc.callbacks.append(pauses)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(pauses)
        gc.unfreeze()
