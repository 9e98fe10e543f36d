"""Where a CPU limit is enforced when the tool will not stop: the agent's watch.

`RLIMIT_CPU` (set in the worker, `_worker.py`) sends SIGXCPU, which ends a
tool unless it ignores the signal, or leaves the work to a child that does.
This watch reads the worker's CPU time, and that of everything it started,
from /proc, and kills the worker a little past the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from ._procs import WorkerProcess

__all__ = ["watch_cpu"]

# The CPU watch: how often it looks, and how far over the limit it lets a call go
# (RLIMIT_CPU, whole seconds, fires first for a tool that does not ignore it).
_CPU_WATCH_EVERY = 0.25
_CPU_GRACE = 1.5
_TICKS = os.sysconf("SC_CLK_TCK")


async def watch_cpu(worker: WorkerProcess, budget: float, reply: asyncio.Future[Any]) -> None:
    """Kill a worker whose call went well over `budget` CPU seconds.

    RLIMIT_CPU does the job unless the tool ignores SIGXCPU: this catches that,
    by reading the worker's CPU time (all its threads) from /proc."""
    start = _cpu_seconds(worker.pid)
    if start is None:
        return
    while not reply.done():
        await asyncio.sleep(_CPU_WATCH_EVERY)
        used = _cpu_seconds(worker.pid)
        if used is None:
            return
        if used - start > budget + _CPU_GRACE and not reply.done():
            reply.set_result(
                {
                    "kind": "crashed",
                    "why": f"it went over its CPU limit (cpu_limit_s={budget}) and was killed",
                }
            )
            worker.kill("cpu")
            return


def _cpu_seconds(pid: int) -> float | None:
    """CPU seconds of `pid` and everything it started: its live descendants'
    and the children it has reaped (a child that ignores SIGXCPU must not carry
    the call past its limit)."""
    own = _stat(pid)
    if own is None:
        return None
    total = own[0] + own[1]
    todo = [pid]
    seen = {pid}
    while todo:
        for child in _children(todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
                times = _stat(child)
                if times is not None:
                    total += times[0] + times[1]
    return total / _TICKS


def _stat(pid: int) -> tuple[int, int] | None:
    """(utime + stime, cutime + cstime) of `pid`, in clock ticks."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
    except (OSError, IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                found.extend(int(c) for c in text.split())
    except OSError:
        pass
    return found
