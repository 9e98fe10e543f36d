"""python -m benchmarks.journal_latency [--calls N] [--dir DIR]

What the durable journal costs a mutating call: the intent's latency (queued
-> committed and synced -> the caller's future resolved) with one caller and
with eight concurrent callers (group commit), the whole call's latency with
and without a journal, and the floor: one bare SQLite insert + commit with
synchronous=FULL in WAL mode (one fsync) on the same disk, in the same run.

Not part of the suite's scenarios (its figures depend on the disk); the
journal's docs quote a run of it.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.journal import _writer

_latencies: list[float] = []
_original_submit = _writer.Writer.submit


def _timed_submit(self: _writer.Writer, kind: int, *args: Any) -> Future[Any]:
    t0 = time.perf_counter()
    fut = _original_submit(self, kind, *args)
    if kind == _writer.INTENT:
        fut.add_done_callback(lambda f: _latencies.append(time.perf_counter() - t0))
    return fut


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _floor(directory: Path, n: int) -> list[float]:
    path = directory / "floor.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (str(i),))
        conn.execute("COMMIT")
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


def _calls(ex: Executor, callers: int, per_caller: int, tag: str) -> list[float]:
    durations: list[float] = []
    lock = threading.Lock()

    def caller(c: int) -> None:
        mine = []
        for i in range(per_caller):
            call = ToolCall(id=f"{tag}-{c}-{i}", name="book", arguments={"item": i})
            t0 = time.perf_counter()
            ex.execute(call)
            mine.append(time.perf_counter() - t0)
        with lock:
            durations.extend(mine)

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return durations


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.journal_latency")
    ap.add_argument("--calls", type=int, default=400, help="calls per measurement")
    ap.add_argument("--dir", type=Path, default=None, help="where the journals go")
    args = ap.parse_args(argv)
    reg = ToolRegistry()

    @reg.tool
    def book(item: int) -> str:
        return "ok"

    _writer.Writer.submit = _timed_submit  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        n = args.calls
        floor = _floor(directory, n)
        rows: list[tuple[str, list[float]]] = [("bare sqlite commit, FULL (floor)", floor)]
        report: list[str] = []
        for callers in (1, 8):
            per = max(1, n // callers)
            with Executor(reg, max_parallel=8) as plain:
                _calls(plain, callers, 20, "warm")
                plain_durations = _calls(plain, callers, per, "p")
            rows.append((f"call, no journal, {callers} caller(s)", plain_durations))
            with Executor(reg, max_parallel=8, journal=directory / f"j{callers}.sqlite") as ex:
                _calls(ex, callers, 20, "warm")
                journal = ex.journal
                assert journal is not None
                journal.flush()
                before = journal.stats()
                _latencies.clear()
                durations = _calls(ex, callers, per, "j")
                intents = list(_latencies)
                journal.flush()
                after = journal.stats()
            rows.append((f"intent, {callers} caller(s)", intents))
            rows.append((f"call with journal, {callers} caller(s)", durations))
            synced = after.synced_commits - before.synced_commits
            report.append(
                f"{callers} caller(s): {after.intents - before.intents} intents in {synced} synced "
                f"commits ({(after.intents - before.intents) / max(1, synced):.2f} per sync), "
                f"largest group {after.largest_group}"
            )
    width = max(len(name) for name, _ in rows)
    print(f"{'':<{width}}  {'p50 ms':>8}  {'p90 ms':>8}  {'p99 ms':>8}  {'n':>5}")
    for name, values in rows:
        print(
            f"{name:<{width}}  {_pct(values, 0.5):8.3f}  {_pct(values, 0.9):8.3f}  "
            f"{_pct(values, 0.99):8.3f}  {len(values):5d}"
        )
    for line in report:
        print(line)
    print(f"mean floor: {statistics.mean(floor) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
