"""Scenario 15: calls waiting on a rate limit hold no threads.

60 calls of the read-only sync noop, guarded by `rate_limit("5/second")`
("50/second" in smoke mode, so the run takes about a second; the same 60 calls,
6 threads and `max_parallel=64`), on a fresh `Executor(max_parallel=64)`: 6
caller threads each hand it one `execute_batch` of 10 at once, so all 60 calls
are in toolbus together and all but the first window's wait their turn (a
delay is a timer: a waiting call holds no thread and no slot).

A sampler thread counts the live threads (`threading.enumerate()`, and the OS
count) every 5 ms, from before the executor is made and the callers start
until all 60 results are back. The baseline is the count taken before the
executor and the callers start; the 6 callers and the sampler count as part of
it (each sample leaves out those of them alive then: the callers of a fast
limit return at different times). The peak over the baseline is what toolbus
added (its supervisor, its timer thread, its workers, and the timer thread
`limits`' in-memory storage runs while admissions are to expire: the policy is
made inside the window too). Beside it: the most
threads alive at once that started meanwhile and are neither a caller nor the
sampler (the same figure, immune to a thread of an earlier scenario ending
meanwhile), and the executor's `stats().live_workers` once all the results are
back.
"""

from __future__ import annotations

import gc
import math
import threading
import time

from toolbus import BatchResult, Executor, ToolRegistry
from toolbus.policies import rate_limit

from ._common import Ctx, noop, noop_call, os_threads
from ._harness import Usage, fmt_count, usage
from ._report import Table

CALLS = 60
CALLERS = 6
PARALLEL = 64
INTERVAL = 0.005  # between two samples of the thread count
GOAL_EXTRA = 8  # threads over the baseline, at most


class _Sampler:
    """The most threads alive at once while it runs, the callers still alive and
    the sampler itself left out of each sample: Python's count, the OS's, and how
    many were not in `known` (the threads of the baseline, the callers, itself)."""

    def __init__(self, callers: list[threading.Thread]) -> None:
        self.thread = threading.Thread(target=self._run, name="bench-waiting-threads", daemon=True)
        self.ours = {*callers, self.thread}
        self.known = {*threading.enumerate(), *self.ours}
        self.peak = self.os_peak = self.new_peak = self.samples = 0
        self._stop = threading.Event()

    def read(self) -> None:
        alive = threading.enumerate()  # one snapshot: who is alive and how many
        os_count = os_threads()
        ours = sum(t in self.ours for t in alive)
        self.peak = max(self.peak, len(alive) - ours)
        self.os_peak = max(self.os_peak, os_count - ours)
        self.new_peak = max(self.new_peak, len(set(alive) - self.known))
        self.samples += 1

    def _run(self) -> None:
        while True:
            self.read()
            if self._stop.wait(INTERVAL):
                return

    def stop(self) -> None:
        self.read()  # the last results are back: one more look
        self._stop.set()
        self.thread.join()


def run(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    per = CALLS // CALLERS
    rate = s.wait_rate
    batches = [[noop_call(k * per + i) for i in range(per)] for k in range(CALLERS)]
    results: list[BatchResult | None] = [None] * CALLERS
    failures: list[BaseException] = []
    ex: Executor | None = None
    start = threading.Barrier(CALLERS)

    def caller(k: int) -> None:
        try:
            start.wait(30)
            assert ex is not None
            results[k] = ex.execute_batch(batches[k])
        except BaseException as e:  # reported below: the scenario fails
            failures.append(e)

    callers = [
        threading.Thread(target=caller, args=(k,), name=f"bench-caller-{k}", daemon=True)
        for k in range(CALLERS)
    ]
    gc.collect()
    before, os_before = threading.active_count(), os_threads()
    sampler = _Sampler(callers)
    sampler.thread.start()
    u0, t0 = usage(), time.monotonic()
    try:
        # Made inside the window: the limit's storage (limits' memory://) runs a
        # timer thread of its own while admissions are to expire, counted with toolbus's.
        registry = ToolRegistry()
        registry.tool(read_only=True, policies=[rate_limit(rate)])(noop)
        ex = Executor(registry, max_parallel=PARALLEL, timeout=60)
        for c in callers:
            c.start()
        for c in callers:
            c.join(max(1.0, 120 - (time.monotonic() - t0)))
        wall, u1 = time.monotonic() - t0, usage()
        sampler.stop()
        if any(c.is_alive() for c in callers):
            raise RuntimeError(f"the callers still wait after {wall:.0f} s")
        if failures:
            raise RuntimeError(f"benchmark setup is broken: a caller raised {failures[0]!r}")
        st = ex.stats()
    finally:
        if sampler.thread.is_alive():
            sampler.stop()
        if ex is not None:
            ex.close()

    ok = sum(r.summary.succeeded for r in results if r is not None)
    if ok != CALLS:
        raise RuntimeError(f"benchmark setup is broken: {CALLS - ok} of {CALLS} calls not ok")
    spent = Usage(u1.cpu_ns - u0.cpu_ns, u1.switches - u0.switches)
    extra, os_extra = sampler.peak - before, sampler.os_peak - os_before
    ideal = _ideal(rate)
    t = Table(
        f"{CALLS} calls waiting on rate_limit({rate!r}), max_parallel={PARALLEL}, "
        f"from {CALLERS} threads (one execute_batch of {per} each)",
        ["measure", "value"],
    )
    t.add("wall s (ideal: a window per rate's count of calls, the first free)", _wall(wall, ideal))
    t.add("CPU µs per call, context switches per call", _per_call(spent))
    t.add("threads before (Python / OS): the baseline", f"{before} / {os_before}")
    t.add(
        "peak threads, callers and sampler left out (Python / OS)",
        f"{sampler.peak} / {sampler.os_peak}",
    )
    t.add("peak over the baseline (Python / OS)", f"{extra:+} / {os_extra:+}")
    t.add("threads started meanwhile, most alive at once", sampler.new_peak)
    workers = f"{st.live_workers}, {st.workers_started}"
    t.add("tool workers alive at the end, started in all", workers)
    t.add("peak calls in flight (toolbus)", st.peak_in_flight)
    t.notes.append(
        f"{sampler.samples} samples, every {INTERVAL * 1000:.0f} ms from before the executor "
        f"was made until the {CALLS} results were back; each leaves out the {CALLERS} caller "
        "threads still alive and the sampler (counted as part of the baseline)"
    )
    rep.table(t)
    rep.figure(
        "waiting",
        "result",
        {
            "rate": rate,
            "calls": CALLS,
            "callers": CALLERS,
            "max_parallel": PARALLEL,
            "ok": ok,
            "wall_s": wall,
            "ideal_s": ideal,
            "cpu_ns_per_op": spent.cpu_ns / CALLS,
            "csw_per_op": spent.switches / CALLS,
            "threads_before": before,
            "os_threads_before": os_before,
            "peak_threads": sampler.peak,
            "peak_os_threads": sampler.os_peak,
            "peak_over_baseline": extra,
            "peak_os_over_baseline": os_extra,
            "peak_new_threads": sampler.new_peak,
            "live_workers": st.live_workers,
            "workers_started": st.workers_started,
            "peak_in_flight": st.peak_in_flight,
            "samples": sampler.samples,
        },
    )
    rep.goal("waiting_threads").set(
        extra,
        f"{extra:+} (peak {sampler.peak}, baseline {before}; "
        f"{st.live_workers} workers live at the end)",
        extra <= GOAL_EXTRA,
    )


def _ideal(rate: str) -> float:
    """The wall time the limit allows: the first window's calls at once, then one
    window per rate's count of calls (a moving window)."""
    import limits

    item = limits.parse(rate)
    return (math.ceil(CALLS / item.amount) - 1) * item.get_expiry()


def _wall(wall: float, ideal: float) -> str:
    return f"{wall:.2f} s (ideal {ideal:.2f} s)"


def _per_call(spent: Usage) -> str:
    return f"{spent.cpu_ns / CALLS / 1000:.1f} µs, {fmt_count(spent.switches / CALLS)}"
