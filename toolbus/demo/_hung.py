"""The demo's second part: one hung sync client, abandoned on a thread, killed in a process.

`legacy_lookup` is a module-level function of this module, not a closure like
the turn's tools: a worker process imports a process tool by reference
(`toolbus.demo._hung:legacy_lookup`). It is registered twice, once per backend,
and both are called at once with the SKU it hangs on. `play_hung()` runs that on
a background thread and hands every call event to the caller as delivered,
like `play()` does for the turn.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import bus
from ..executor import Executor, ExecutorStats
from ..models import ToolCall, ToolResult
from ..retry import RetryPolicy
from ..tools import ToolRegistry
from ._tools import HANG_TIMEOUT
from ._turn import Player, TurnEvent

__all__ = [
    "HANG_FOR",
    "HUNG_SKU",
    "HungOutcome",
    "available",
    "build_hung_registry",
    "legacy_lookup",
    "play_hung",
]

HUNG_SKU = "TB-42"
HANG_FOR = 1.0
"""Seconds `legacy_lookup` takes on `HUNG_SKU`: well past its `HANG_TIMEOUT`."""

THREAD_TOOL = "inventory_thread"
PROCESS_TOOL = "inventory_process"
_WARMUP_TOOL = "inventory_warmup"


def legacy_lookup(sku: str) -> dict[str, object]:
    """Stock level from the legacy inventory system (a sync client with no timeout)."""
    if sku == HUNG_SKU:
        time.sleep(HANG_FOR)  # the legacy system stalls on this one
    return {"sku": sku, "stock": 3, "served_by_pid": os.getpid()}


def available() -> bool:
    """True where the process backend runs (POSIX: sessions and process groups)."""
    return hasattr(os, "setsid") and hasattr(os, "killpg")


def build_hung_registry() -> ToolRegistry:
    """`legacy_lookup` as a thread tool and as a process tool (same timeout), and a
    process tool of the same module with the executor's timeout, to start the workers."""
    reg = ToolRegistry()
    no_retry = RetryPolicy(max_retries=0)
    reg.tool(
        name=THREAD_TOOL, read_only=True, backend="thread", timeout=HANG_TIMEOUT, retry=no_retry
    )(legacy_lookup)
    reg.tool(
        name=PROCESS_TOOL, read_only=True, backend="process", timeout=HANG_TIMEOUT, retry=no_retry
    )(legacy_lookup)
    # Starting the backend (a zygote process that imports this module once) takes
    # a few hundred ms, which would count against the first call's deadline.
    reg.tool(name=_WARMUP_TOOL, read_only=True, backend="process", retry=no_retry)(legacy_lookup)
    return reg


@dataclass(frozen=True, slots=True)
class HungOutcome:
    """What the hung-tool part produced, once every event has been delivered."""

    thread: ToolResult  # the hung call on the thread backend
    process: ToolResult  # ... on the process backend
    after: ToolResult  # the next call of the process tool
    killed_pid: int | None  # from tool:killed
    killed_reason: str
    gone: bool  # the killed worker left the process table
    late_result_s: float | None  # when the abandoned thread came back
    warmup_s: float  # starting the process backend, before any of this
    host_pid: int
    stats: ExecutorStats
    events: tuple[TurnEvent, ...]

    @property
    def fresh_pid(self) -> Any:
        out = self.after.output
        return out.get("served_by_pid") if isinstance(out, dict) else None


def _exists(pid: int) -> bool:
    """True while `pid` is in the process table (a zombie counts: it is not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Part(Player):
    def __init__(self) -> None:
        super().__init__()
        self.killed = threading.Event()

    def wants(self, event: bus.Event) -> bool:
        return isinstance(event, bus.CallEvent)  # the batch's own: the turn above showed those

    def noticed(self, signal: str) -> None:
        super().noticed(signal)
        if signal == bus.KILLED:
            self.killed.set()

    def _play(self) -> HungOutcome:
        with Executor(
            build_hung_registry(), max_parallel=4, timeout=30.0, retry=RetryPolicy(max_retries=0)
        ) as ex:
            t0 = time.monotonic()
            ex.execute(ToolCall(id="w0", name=_WARMUP_TOOL, arguments={"sku": "TB-7"}))
            warmup = time.monotonic() - t0
            sub = bus.subscribe(self.receive, sender=ex)
            try:
                self.started = time.monotonic()
                thread, process = ex.execute_batch(
                    [
                        ToolCall(id="h1", name=THREAD_TOOL, arguments={"sku": HUNG_SKU}),
                        ToolCall(id="h2", name=PROCESS_TOOL, arguments={"sku": HUNG_SKU}),
                    ]
                ).results
                self.killed.wait(2.0)
                ex.drain_events()
                with self.lock:
                    kills = [e.event for e in self.events if isinstance(e.event, bus.WorkerKilled)]
                pid = kills[0].pid if kills else None
                gone = False
                if pid is not None:
                    until = time.monotonic() + 2.0
                    while _exists(pid) and time.monotonic() < until:
                        time.sleep(0.01)
                    gone = not _exists(pid)
                after = ex.execute(ToolCall(id="h3", name=PROCESS_TOOL, arguments={"sku": "TB-7"}))
                # The abandoned thread is still in legacy_lookup; it answers at HANG_FOR.
                self.late.wait(HANG_FOR + 1.0)
                ex.drain_events()
                stats = ex.stats()
            finally:
                sub.close()
        with self.lock:
            events = tuple(self.events)
        late = next((e.at for e in events if e.signal == bus.LATE_RESULT), None)
        return HungOutcome(
            thread=thread,
            process=process,
            after=after,
            killed_pid=pid,
            killed_reason=kills[0].reason if kills else "",
            gone=gone,
            late_result_s=late,
            warmup_s=warmup,
            host_pid=os.getpid(),
            stats=stats,
            events=events,
        )


def play_hung() -> Iterator[TurnEvent | HungOutcome]:
    """Run the hung-tool part; yield each call event as delivered, then the outcome."""
    yield from _Part().stream("toolbus-demo-hung", HungOutcome)
