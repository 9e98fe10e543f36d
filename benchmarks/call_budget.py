"""What one call costs in Python, counted rather than timed: a guard any machine can run.

For one `execute` of a noop tool (and, for the record, a batch of ten and an
`aexecute`), this counts

- the Python function calls made on every thread of the process (the
  interpreter's profile hook sees each call and each generator resumption;
  C functions are not counted), split by thread;
- the threads other than the caller's that ran Python code for each call
  (`ran`: woken for it, or awake already);
- the voluntary context switches of every thread (Linux: `/proc/self/task`),
  and how many threads other than the caller's switched (`woken`), per call.

Calls and `ran` do not depend on the machine's speed, so
`tests/contract/test_call_budget.py` can fail a change that adds Python or a
thread hop to the call path on any machine. Switches depend on timing (a
thread preempted while holding the GIL makes the other wait for it: under
`stress-ng` one `execute` shows 2.9 switches instead of 2), so they are a
benchmark figure, the quietest of several rounds, and the test leaves them out.

The profile hook must be in place before the executor starts its threads
(`threading.setprofile` reaches only threads started after it), and stray
threads of other code would be counted too, so this runs in a process of its
own: `python -m benchmarks.call_budget [--json]`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["BUDGET", "TODAY", "count"]

# Counted on main 5ac056b the same way (issue 20): one `execute` of a noop made
# 74 Python calls on the caller's thread and 142 on all threads together.
TODAY = {"caller_calls": 74, "all_calls": 142}
# Issue 20's guard: at most half today's calls, at most one other thread
# woken and two voluntary context switches per call.
BUDGET = {"all_calls": 71, "caller_calls": 37, "ran": 1.0, "woken": 1.0, "switches": 2.0}

_on = False
# A plain dict, not a Counter: copying it per call must run no Python code.
_calls: dict[int, int] = {}
_where: collections.Counter[tuple[str, str, int, str]] = collections.Counter()
_detail = False


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if _on and event == "call":
        ident = threading.get_ident()
        _calls[ident] = _calls.get(ident, 0) + 1
        if _detail:
            code = frame.f_code
            _where[(threading.current_thread().name, code.co_filename, code.co_firstlineno,
                    code.co_name)] += 1  # fmt: skip


def _switches() -> dict[int, int]:
    """Voluntary context switches so far, per thread id of this process."""
    out: dict[int, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        out[int(tid)] = int(line.split()[1])
                        break
        except FileNotFoundError:  # a thread that just ended
            pass
    return out


def _switch_rounds(op: Callable[[], object], n: int, rounds: int) -> tuple[float, float]:
    """(other threads woken per call, voluntary switches per call), the quietest round."""
    caller = threading.get_native_id()
    best: tuple[float, float] | None = None
    for _ in range(rounds):
        before = _switches()
        for _ in range(n):
            op()
        after = _switches()
        total = sum(v - before.get(t, 0) for t, v in after.items())
        woken = sum(v - before.get(t, 0) for t, v in after.items() if t != caller)
        # A thread woken once per call switches out once per call: its
        # switches are the wake-ups it had.
        figures = (woken / n, total / n)
        if best is None or figures[1] < best[1]:
            best = figures
    assert best is not None
    return best


def _threads_that_ran(snaps: list[dict[int, int]], caller: int) -> int:
    """Over a round, the threads other than the caller's that ran Python code
    during each operation (between two snapshots of the counts), summed.

    A thread that ran Python for a call was woken for it (or was awake
    already): unlike the switch counts, this does not depend on timing. A
    worker's tail after it released its caller may fall in the next window:
    it is the same thread, counted once there."""
    total = 0
    before: dict[int, int] = {}
    for snap in snaps:
        total += len([t for t, c in snap.items() if t != caller and c != before.get(t, 0)])
        before = snap
    return total


def count(n: int = 200, rounds: int = 5, detail: bool = False) -> dict[str, Any]:
    """Every figure, for each operation measured (see the module's docstring)."""
    global _on, _detail
    _detail = detail
    threading.setprofile(_profile)
    sys.setprofile(_profile)
    try:
        from toolbus import Executor, ToolCall, ToolRegistry

        reg = ToolRegistry()

        @reg.tool(read_only=True)
        def noop() -> int:
            return 1

        @reg.tool(read_only=True)
        async def anoop() -> int:
            return 1

        call = ToolCall(name="noop", arguments={})
        acall = ToolCall(name="anoop", arguments={})
        ten = [ToolCall(id=f"c{i}", name="noop", arguments={}) for i in range(10)]
        ex = Executor(reg, max_parallel=16)
        loop = asyncio.new_event_loop()

        async def ten_awaited() -> None:
            for _ in range(10):
                await ex.aexecute(acall)

        ops: dict[str, tuple[Callable[[], object], int]] = {
            "execute": (lambda: ex.execute(call), 1),
            "execute_batch_10": (lambda: ex.execute_batch(ten), 10),
            # Ten awaited one after another per turn of the loop's run, so the
            # loop's own start and stop are spread over ten calls.
            "aexecute": (lambda: loop.run_until_complete(ten_awaited()), 10),
        }
        out: dict[str, Any] = {}
        try:
            for name, (op, per) in ops.items():
                for _ in range(n):  # warm: workers started, plans made, caches filled
                    op()
                ex.drain_events()
                caller = threading.get_ident()
                lows: list[dict[int, int]] = []
                ran: list[float] = []
                for _ in range(rounds):
                    _calls.clear()
                    snaps: list[dict[int, int]] = []
                    _on = True
                    for _ in range(n):
                        op()
                        snaps.append(_calls.copy())  # (C calls only: not counted)
                    _on = False
                    lows.append(dict(_calls))
                    ran.append(_threads_that_ran(snaps, caller))
                # The quietest round (a garbage collection or a stray timer adds a few).
                low = min(lows, key=lambda c: sum(c.values()))
                calls = n * per
                woken, switches = _switch_rounds(op, n, rounds)
                out[name] = {
                    "caller_calls": low.get(caller, 0) / calls,
                    "all_calls": sum(low.values()) / calls,
                    "ran": min(ran) / calls,
                    "woken": woken / per,
                    "switches": switches / per,
                }
                if detail:
                    out[name]["where"] = _top(calls)
                    _where.clear()
        finally:
            _on = False
            ex.close()
            loop.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return out


def _top(calls: int) -> list[str]:
    rows = sorted(_where.items(), key=lambda kv: -kv[1])
    return [
        f"{c / calls / 5:6.2f}  {t[:14]:<14} {f.rpartition('toolbus/')[2] or f}:{line} {name}"
        for (t, f, line, name), c in rows
    ]


def main(argv: list[str]) -> int:
    detail = "--detail" in argv
    figures = count(detail=detail)
    if "--json" in argv:
        print(json.dumps(figures))
        return 0
    print(
        f"{'operation':<18}{'caller calls':>14}{'all calls':>11}{'ran':>6}{'woken':>8}"
        f"{'switches':>10}"
    )
    for name, f in figures.items():
        print(
            f"{name:<18}{f['caller_calls']:>14.1f}{f['all_calls']:>11.1f}{f['ran']:>6.2f}"
            f"{f['woken']:>8.2f}{f['switches']:>10.2f}"
        )
        if detail:
            print("\n".join(f["where"]))
    b = BUDGET
    print(
        f"budget for execute: caller ≤ {b['caller_calls']}, all ≤ {b['all_calls']}, "
        f"ran ≤ {b['ran']:g}, woken ≤ {b['woken']:g}, switches ≤ {b['switches']:g} "
        f"(on 5ac056b: {TODAY})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
