"""The thread backend's pools: one queue per tool, wake-one with a cascade, idle workers retire.

Each test waits on what proves the state it checks (an Event a tool sets, a
count the backend reports), never on time passing.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.concurrency_tools import in_thread
from tests.conftest import MakeExecutor, wait_until
from toolbus import ConfigError, Executor, ToolCall, ToolRegistry
from toolbus.backends import ThreadBackend, _thread
from toolbus.backends._protocol import Job
from toolbus.backends._thread_pool import PoolWorker, ToolPool


class Counting(ThreadBackend):
    """A thread backend that records the jobs the supervisor released (one per report)."""

    def __init__(self, idle_timeout: float = 60.0) -> None:
        super().__init__(idle_timeout)
        self.released: list[str] = []

    def release(self, job: Job, worker: Any) -> None:
        self.released.append(job.run.call.id)
        super().release(job, worker)


def gated(n: int) -> tuple[ToolRegistry, threading.Event, threading.Event, list[int]]:
    """A tool `gate` whose calls wait for `go`; `all_in` is set once `n` of them
    run at once. `threads` records the thread of each call."""
    reg = ToolRegistry()
    go, all_in = threading.Event(), threading.Event()
    threads: list[int] = []
    lock = threading.Lock()

    @reg.tool(read_only=True)
    def gate(tag: str) -> str:
        with lock:
            threads.append(threading.get_ident())
            if len(threads) == n:
                all_in.set()
        go.wait(10)
        return tag

    return reg, go, all_in, threads


def noops() -> ToolRegistry:
    """A quick tool `noop` that answers its tag."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def noop(tag: str) -> str:
        return tag

    return reg


def batch(n: int, name: str = "gate") -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name=name, arguments={"tag": f"t{i}"}) for i in range(n)]


def test_a_burst_of_quick_calls_starts_far_fewer_workers_than_calls(
    make_executor: MakeExecutor,
) -> None:
    """Sixty quick calls at once, with room for all: workers come back for the
    queued calls instead of one thread starting per call (the old pool's way).
    Thread scheduling decides the exact count (2 measured on a quiet machine,
    `python -m benchmarks.worker_burst --batch`); half the calls leaves wide room."""
    reg = noops()
    ex = make_executor(reg, max_parallel=64, timeout=None)
    result = ex.execute_batch(batch(60, "noop"))
    assert [r.status for r in result] == ["ok"] * 60
    stats = ex.stats()
    assert 1 <= stats.workers_started < 30, stats
    assert stats.live_workers == stats.workers_started  # none retired (60 s), none abandoned


def test_one_worker_serves_calls_dispatched_from_its_own_reports(
    make_executor: MakeExecutor,
) -> None:
    """At max_parallel=1 each call is dispatched by the report of the one before,
    on the reporting worker's thread, which counts as searching before it
    reports: it takes that call itself, and no other worker ever starts."""
    reg = noops()
    ex = make_executor(reg, max_parallel=1, timeout=None)
    result = ex.execute_batch(batch(20, "noop"))
    assert [r.output for r in result] == [f"t{i}" for i in range(20)]
    assert ex.stats().workers_started == 1


def test_a_burst_of_slow_calls_runs_all_at_once(make_executor: MakeExecutor) -> None:
    """Eight calls that each wait until all eight run: only one thread per call
    lets them finish (the cascade wakes one more worker per call taken)."""
    n = 8
    reg, go, all_in, threads = gated(n)
    ex = make_executor(reg, max_parallel=64, timeout=None)
    th, out = in_thread(lambda: ex.execute_batch(batch(n)))
    assert all_in.wait(10), f"only {len(threads)} of {n} calls ran at once"
    go.set()
    th.join(10)
    assert [r.status for r in out["r"]] == ["ok"] * n
    assert len(set(threads)) == n
    stats = ex.stats()
    # Each worker was started for a queued call that no other could take.
    assert stats.workers_started == n and stats.live_workers == n, stats


def test_idle_workers_retire_down_to_one(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 4
    reg, go, all_in, _ = gated(n)
    kept = threading.Event()
    real_retire = ToolPool.retire

    def retire(pool: ToolPool, w: PoolWorker) -> bool:
        left = real_retire(pool, w)
        if not left and pool.idle == [w]:
            kept.set()  # the last idle worker checked, and stayed
        return left

    monkeypatch.setattr(ToolPool, "retire", retire)
    backend = ThreadBackend(idle_timeout=0.05)
    ex = make_executor(reg, max_parallel=64, timeout=None, backend=backend)
    before = set(threading.enumerate())
    th, out = in_thread(lambda: ex.execute_batch(batch(n)))
    assert all_in.wait(10)  # n workers, one per call
    # Listed while all n are held in their calls: once let go, a worker idle
    # for 0.05 s retires, and a busy machine can take that long to look.
    workers = [t for t in set(threading.enumerate()) - before if t.name.startswith("ToolWorker")]
    go.set()
    th.join(10)
    assert [r.status for r in out["r"]] == ["ok"] * n
    started = ex.stats().workers_started
    assert len(workers) == started == n
    wait_until(lambda: backend.live_workers == 1, what="idle workers retired")
    assert kept.wait(10), "the last idle worker never checked"
    assert backend.live_workers == 1 and backend.busy() == 0
    wait_until(lambda: sum(t.is_alive() for t in workers) == 1, what="retired threads ended")
    # The one kept is warm: the next call starts no thread.
    assert ex.execute(ToolCall(name="gate", arguments={"tag": "again"})).output == "again"
    assert ex.stats().workers_started == started


def test_a_cancelled_queued_job_is_not_abandoned_and_still_reports(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call cancelled while its job waits in the queue holds no thread: it is
    not counted abandoned. The worker that later takes the job runs its steps,
    which find the attempt over (the tool does not run), and reports it."""
    reg = ToolRegistry()
    entered, go = threading.Event(), threading.Event()
    ran: list[str] = []

    @reg.tool(read_only=True)
    def slow(tag: str) -> str:
        ran.append(tag)
        if tag == "a":
            entered.set()
            go.wait(10)
        return tag

    # The first worker starts; no other can (a full process, say): `b` waits
    # in the queue for the worker running `a`.
    real_start = _thread.ToolWorker.start
    starts = {"n": 0}
    refused = threading.Event()

    def start(*args: Any, **kwargs: Any) -> Any:
        starts["n"] += 1
        if starts["n"] > 1:
            refused.set()
            raise RuntimeError("can't start new thread")
        return real_start(*args, **kwargs)

    monkeypatch.setattr(_thread.ToolWorker, "start", start)
    backend = Counting()
    ex = make_executor(reg, max_parallel=8, timeout=None, backend=backend)
    th, out = in_thread(lambda: ex.execute(ToolCall(id="a", name="slow", arguments={"tag": "a"})))
    assert entered.wait(10)

    async def cancel_b() -> None:
        b = ToolCall(id="b", name="slow", arguments={"tag": "b"})
        task = asyncio.ensure_future(ex.aexecute(b))
        # b is submitted (and its worker refused) while the task runs to its wait.
        assert await asyncio.get_running_loop().run_in_executor(None, refused.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_b())
    stats = ex.stats()
    assert stats.cancelled == 1 and stats.abandoned_workers == 0 and stats.abandoned_total == 0
    assert backend.busy() == 2  # a runs, b waits in the queue until a's worker is back
    go.set()
    th.join(10)
    assert out["r"].output == "a"
    wait_until(lambda: len(backend.released) == 2, what="both jobs reported")
    assert sorted(backend.released) == ["a", "b"]  # each job reported exactly once
    assert ran == ["a"]  # b's steps found it cancelled: its tool never ran
    assert backend.busy() == 0 and backend.abandoned() == 0
    assert ex.stats().workers_started == 1


def test_an_abandoned_worker_that_returns_rejoins_its_pool(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    entered, go = threading.Event(), threading.Event()
    pair = threading.Barrier(2, timeout=10)
    threads: dict[str, int] = {}

    @reg.tool(read_only=True)
    def work(tag: str) -> str:
        threads[tag] = threading.get_ident()
        if tag == "stuck":
            entered.set()
            go.wait(10)
        else:
            pair.wait()  # two calls that must run at once
        return tag

    backend = ThreadBackend()
    ex = make_executor(reg, max_parallel=8, timeout=None, backend=backend)

    async def cancel_stuck() -> None:
        task = asyncio.ensure_future(ex.aexecute(ToolCall(name="work", arguments={"tag": "stuck"})))
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_stuck())
    stats = ex.stats()
    assert stats.abandoned_workers == 1 and stats.live_workers == 0, stats
    go.set()  # it returns: its late result is dropped, and it serves again
    wait_until(lambda: backend.abandoned() == 0, what="the abandoned worker back")
    assert backend.live_workers == 1 and backend.busy() == 0
    result = ex.execute_batch(
        [ToolCall(id=t, name="work", arguments={"tag": t}) for t in ("p1", "p2")]
    )
    assert [r.status for r in result] == ["ok", "ok"]
    # The returned worker took one of the pair; one more started for the other.
    assert threads["stuck"] in (threads["p1"], threads["p2"])
    assert ex.stats().workers_started == 2


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "5", True, None], ids=repr)
def test_bad_worker_idle_timeouts_are_refused(value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="worker_idle_timeout"):
        Executor(ToolRegistry(), worker_idle_timeout=value)
    with pytest.raises((TypeError, ValueError), match="idle_timeout"):
        ThreadBackend(idle_timeout=value)


def test_worker_idle_timeout_reaches_the_thread_backend(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    assert make_executor(ToolRegistry())._backends.thread.idle_timeout == 60.0
    assert (
        make_executor(ToolRegistry(), worker_idle_timeout=2.5)._backends.thread.idle_timeout == 2.5
    )
    path = tmp_path / "toolbus.toml"
    path.write_text("worker_idle_timeout = 0.5\n")
    ex = Executor.from_config(ToolRegistry(), path)
    try:
        assert ex._backends.thread.idle_timeout == 0.5
    finally:
        ex.close()
    path.write_text("worker_idle_timeout = 0\n")
    with pytest.raises(ConfigError, match="worker_idle_timeout"):
        Executor.from_config(ToolRegistry(), path)
