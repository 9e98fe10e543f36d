"""The process backend: killable tools, crashes that spare the host, limits, shipping."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import process_tools as pt
from tests.conftest import MakeExecutor, wait_until
from toolbus import (
    AttemptFailure,
    ErrorCode,
    Executor,
    RetryPolicy,
    ToolCall,
    ToolRegistry,
    bus,
    format_result_for_context,
    tool,
)
from toolbus.backends import ProcessBackend

# The slow tier (tests/README.md): worker processes forked, killed at deadlines.
pytestmark = pytest.mark.slow


def _state(pid: int) -> str | None:
    """The process's state letter (Z: zombie), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _gone(pid: int) -> bool:
    return _state(pid) is None


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _zombies_under(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children_of(todo.pop()):
            if _state(child) == "Z":
                out.append(child)
            todo.append(child)
    return out


def _session(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])


def _workers() -> list[int]:
    """Live worker processes under this one: forked by a zygote (not the root
    zygote, our own child), session leaders."""
    ours = set(_children_of(os.getpid()))
    return [
        p
        for p in _descendants(os.getpid())
        if p not in ours
        if "toolbus.backends._zygote" in _cmdline(p) and _session(p) == p and _state(p) != "Z"
    ]


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children_of(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


@pytest.fixture
def ex(make_executor: MakeExecutor) -> Executor:
    return make_executor(pt.registry, timeout=20)


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def test_a_process_tool_runs_in_another_process(ex: Executor) -> None:
    assert ex.execute(call("square", x=7)).output == 49
    pid = ex.execute(call("worker_pid")).output
    assert pid != os.getpid()
    assert ex.execute(call("add_one", x=1)).output == 2  # async, with asyncio.run there


def test_the_tools_exception_comes_back_as_an_error(ex: Executor) -> None:
    r = ex.execute(call("fails"))
    assert r.status == "error"
    assert r.error_code == ErrorCode.TOOL_ERROR
    assert "bad input value" in (r.error or "")


def test_a_hung_tool_is_killed_at_its_deadline_with_what_it_started(
    make_executor: MakeExecutor, tmp_path: Path, recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=1.0)
    pidfile = tmp_path / "pids"
    r = ex.execute(call("hang", pidfile=str(pidfile)))
    assert r.status == "timeout"
    assert r.error_code == ErrorCode.EXECUTION_TIMEOUT
    worker, child = map(int, pidfile.read_text().split())
    wait_until(lambda: _gone(worker) and _gone(child), what="worker and its child reaped")
    [killed] = recorder.wait_for(bus.KILLED)
    assert (killed.pid, killed.reason, killed.call_id) == (worker, "timeout", r.call_id)
    stats = ex.stats()
    assert stats.killed_workers == 1
    assert stats.abandoned_workers == 0
    assert stats.late_results == 0
    # The pool is whole again: the next call finds a worker.
    assert ex.execute(call("square", x=3)).output == 9
    stats = ex.stats()
    assert stats.workers_started >= 3  # hang's first and its replacement, square's
    assert stats.live_workers >= 2


def test_the_whole_call_budget_reaches_the_worker_and_kills_at_it(
    make_executor: MakeExecutor, tmp_path: Path, recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=30.0)
    r = ex.execute(call("report"), call_timeout=5.0)
    assert r.status == "ok", r.error
    assert 0 < r.output["remaining"] <= 5.0  # the earlier clock, in the worker
    pidfile = tmp_path / "pids"
    r = ex.execute(call("hang", pidfile=str(pidfile)), call_timeout=1.0)
    assert (r.status, r.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)
    worker, child = map(int, pidfile.read_text().split())
    wait_until(lambda: _gone(worker) and _gone(child), what="worker and its child reaped")
    [killed] = recorder.wait_for(bus.KILLED)
    assert (killed.pid, killed.reason) == (worker, "timeout")


async def test_a_cancelled_call_kills_its_worker(
    make_executor: MakeExecutor, tmp_path: Path, recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=None)
    pidfile = tmp_path / "pids"
    task = asyncio.ensure_future(ex.aexecute(call("hang", pidfile=str(pidfile))))
    await asyncio.to_thread(  # the tool writes its pids once it runs
        wait_until, lambda: pidfile.exists() and bool(pidfile.read_text()), 30, "the tool running"
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [killed] = await asyncio.to_thread(recorder.wait_for, bus.KILLED)
    assert killed.reason == "cancelled"
    worker, child = map(int, pidfile.read_text().split())
    await asyncio.to_thread(
        wait_until, lambda: _gone(worker) and _gone(child), 5.0, "worker and child reaped"
    )
    [finished] = await asyncio.to_thread(recorder.wait_for, bus.FINISHED)
    assert finished.result.status == "cancelled"


def test_two_hundred_timeouts_leave_no_zombie_and_no_extra_worker(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=0.1, max_parallel=8)
    size = min(8, os.cpu_count() or 1)
    ex.execute_batch([call("stall") for _ in range(size)])  # the pool is up
    done = 0
    while done < 200:
        results = ex.execute_batch([call("stall") for _ in range(size)])
        assert {r.status for r in results} == {"timeout"}
        done += size
        ex.drain_events()
        killed = {e.pid for e in recorder.of(bus.KILLED)}
        # A killed worker may take a moment to die and be reaped: it is not live.
        workers = [p for p in _workers() if p not in killed]
        assert len(workers) <= size, (done, workers)
    # A call whose deadline passed while its worker was still being replaced
    # had nothing to kill; every other one killed its worker.
    count = ex.stats().killed_workers
    assert done // 2 <= count <= done + size
    wait_until(lambda: len(_workers()) <= size, what="the killed workers reaped")
    wait_until(lambda: not _zombies_under(os.getpid()), what="no zombie left")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_tool_that_exits_crashes_only_its_call(ex: Executor) -> None:
    r = ex.execute(call("exit_now", code=7))
    assert r.status == "error"
    assert r.error_code == ErrorCode.TOOL_CRASHED
    assert "exited with code 7" in (r.error or "")
    assert ex.execute(call("square", x=4)).output == 16  # the host, and the pool, live on


def test_a_memory_hog_over_its_limit_is_a_clear_crash(ex: Executor) -> None:
    r = ex.execute(call("hog", mb=600))
    assert r.status == "error"
    assert r.error_code == ErrorCode.TOOL_CRASHED
    assert "memory_limit_mb=300" in (r.error or "")
    assert ex.execute(call("hog", mb=20)).output == 20 * 1024 * 1024  # a fresh worker


def test_a_cpu_spinner_over_its_limit_is_a_clear_crash(ex: Executor) -> None:
    r = ex.execute(call("spin", seconds=30))
    assert r.status == "error"
    assert r.error_code == ErrorCode.TOOL_CRASHED
    assert "cpu_limit_s=1" in (r.error or "")


def test_the_cpu_limit_is_per_call(make_executor: MakeExecutor) -> None:
    ex = make_executor(pt.registry, timeout=20, max_parallel=1)
    results = [ex.execute(call("spin", seconds=0.4)) for _ in range(4)]
    assert [r.status for r in results] == ["ok"] * 4
    assert len({ex.execute(call("worker_pid")).output for _ in range(2)}) == 1


def test_progress_idempotency_key_and_listed_context_vars_cross(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    registry = ToolRegistry()
    registry.register(pt.report)
    backend = ProcessBackend(context_vars=[pt.tenant])
    # The name "process" (the tool's choice) bound to a configured backend.
    ex = make_executor(registry, backends={"process": backend}, timeout=20)
    token = pt.tenant.set("acme")
    unshipped = pt.unshipped.set("here only")
    try:
        r = ex.execute(ToolCall(id="model-id-1", name="report"))
    finally:
        pt.tenant.reset(token)
        pt.unshipped.reset(unshipped)
    assert r.status == "ok", r.error
    assert r.output["tenant"] == "acme"
    assert r.output["unshipped"] == "none"
    assert r.output["has_deadline"] is True
    assert len(r.output["key"]) == 64
    [progress] = recorder.wait_for(bus.PROGRESS)
    assert (progress.message, progress.fraction, progress.data) == ("halfway", 0.5, {"step": 1})


def test_a_crash_is_retried_only_for_idempotent_tools(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    registry = ToolRegistry()
    registry.register(pt.crash_once)
    registry.register(pt.crash_mutating)
    ex = make_executor(registry, timeout=20, retry=RetryPolicy(max_retries=2, backoff_base=0.01))
    marker = tmp_path / "m"
    r = ex.execute(call("crash_once", marker=str(marker)))
    assert (r.status, r.attempts) == ("ok", 2)
    keys = marker.with_suffix(".keys").read_text().split()
    assert len(keys) == 2
    assert keys[0] == keys[1]  # one key for every attempt
    other = tmp_path / "o"
    r = ex.execute(call("crash_mutating", marker=str(other)))
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_CRASHED, 1)
    assert other.read_text() == "ran\n"


def test_an_unpicklable_result_is_an_error_not_a_hang(ex: Executor) -> None:
    r = ex.execute(call("unpicklable_result"))
    assert r.status == "error"
    assert "cannot be sent back" in (r.error or "")


def test_a_lone_surrogate_in_a_result_comes_back_exactly(ex: Executor) -> None:
    """The worker's JSON reply could not carry it: the call ended `error`
    ("cannot be sent back"), text or structure, though the tool had succeeded
    (bug hunt); then it came back as U+FFFD, which merged two file names into
    one key, one of their values lost (review). Now as on the thread backend."""
    name = b"report-\xe9.txt".decode("utf-8", "surrogateescape")
    other = b"report-\xe8.txt".decode("utf-8", "surrogateescape")
    text = ex.execute(call("odd_names", structured=False))
    assert (text.status, text.output) == ("ok", name)
    structured = ex.execute(call("odd_names", structured=True))
    assert structured.status == "ok", structured.error
    assert structured.output == {"names": [name, "\ud83d\ude00"], name: 1, other: 2}
    assert len(structured.output["names"][1]) == 2  # two lone surrogates, still two


def test_an_injected_secret_holding_a_lone_surrogate_is_masked_when_echoed(
    make_executor: MakeExecutor,
) -> None:
    """A secret from `os.environ` (a byte not UTF-8: a lone surrogate) echoed
    by a process tool reached the output, the model's text and `tool:finished`
    whole: the reply made the surrogate U+FFFD before masking, which looks for
    the secret as it was sent (review). On the thread backend it was masked."""
    secret = b"sk-live-\xe9Q7w9Zr2Lm4Xp8Tn6".decode("utf-8", "surrogateescape")
    ex = make_executor(pt.registry, timeout=20, inject={"api_key": lambda call: secret})
    with bus.Recorder() as rec:
        text = ex.execute(call("echo_injected", structured=False))
        structured = ex.execute(call("echo_injected", structured=True))
        ex.drain_events()
    assert (text.status, text.output) == ("ok", "key is ***")
    assert (structured.status, structured.output) == ("ok", {"said": "key is ***"})
    for r in (text, structured):
        assert "Q7w9Zr2Lm4Xp8Tn6" not in format_result_for_context(r)
    assert rec.events and not [n for n, e in rec.events if "Q7w9Zr2Lm4Xp8Tn6" in repr(e)]


def test_closing_the_executor_kills_workers_and_zygote(make_executor: MakeExecutor) -> None:
    ex = make_executor(pt.registry, timeout=20)
    worker = ex.execute(call("worker_pid")).output
    zygotes = [p for p in _descendants(os.getpid()) if "_zygote" in _cmdline(p)]
    assert zygotes
    ex.close()
    wait_until(lambda: _gone(worker), what="worker gone")
    wait_until(lambda: all(_state(z) in (None, "Z") for z in zygotes), what="zygote exited")
    wait_until(lambda: all(_gone(z) for z in zygotes), what="zygote reaped")


def test_mutating_process_calls_keep_barrier_order(ex: Executor, tmp_path: Path) -> None:
    results = ex.execute_batch([call("square", x=i) for i in range(6)] + [call("worker_pid")])
    assert [r.output for r in results][:6] == [i * i for i in range(6)]


def _local_tool() -> None:
    @tool(backend="process")
    def inner() -> None:
        return None


def test_tools_a_worker_cannot_import_are_refused_at_registration() -> None:
    with pytest.raises(ValueError, match="inside a function"):
        _local_tool()
    with pytest.raises(ValueError, match="lambda"):
        tool(name="l", backend="process")(lambda: None)
    main_fn = type(_local_tool)(_local_tool.__code__, {"__name__": "__main__"}, "main_fn")
    main_fn.__module__ = "__main__"
    with pytest.raises(ValueError, match="__main__"):
        tool(name="m", backend="process")(main_fn)
    # Each refused with its own reason: a partial was "a lambda", a method
    # bound to an object "defined in __main__" (hunt 6).
    with pytest.raises(ValueError, match=r"is a functools\.partial object, not a module-level"):
        tool(name="p", backend="process")(functools.partial(pt.square.fn, x=2))
    with pytest.raises(ValueError, match="is a method bound to a str object"):
        tool(name="b", backend="process")("abc".upper)


def test_limits_need_a_process_backend() -> None:
    with pytest.raises(ValueError, match=r"memory_limit_mb.*backend='process'"):

        @tool(backend="thread", memory_limit_mb=256)
        def limited() -> None:
            return None


def test_bad_backend_options_are_refused() -> None:
    with pytest.raises(ValueError, match="memory_limit_mb"):
        ProcessBackend(memory_limit_mb=0)
    with pytest.raises(TypeError, match="cpu_limit_s"):
        ProcessBackend(cpu_limit_s="1")  # type: ignore[arg-type]
    local: contextvars.ContextVar[str] = contextvars.ContextVar("local")
    with pytest.raises(ValueError, match="module-level"):
        ProcessBackend(context_vars=[local])


def test_a_killed_worker_is_replaced_at_once(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=1.0)
    ex.execute(call("hang"))
    [killed] = recorder.wait_for(bus.KILLED)
    wait_until(
        lambda: any(p != killed.pid for p in _workers()),
        what="a replacement worker",
    )


def _zygote_pids() -> list[int]:
    return [p for p in _descendants(os.getpid()) if "_zygote" in _cmdline(p)]


def test_a_tool_failure_keeps_its_code_metadata_and_no_retry(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    asked = []

    class Counting(Executor):
        def should_retry(self, call: ToolCall, failure: AttemptFailure) -> Any:
            asked.append(call.id)
            return super().should_retry(call, failure)

    ex = Counting(pt.registry, timeout=20, retry=RetryPolicy(max_retries=3))
    try:
        marker = tmp_path / "ran"
        r = ex.execute(call("fails_final", marker=str(marker)))
        assert (r.status, r.error_code, r.metadata, r.attempts) == (
            "error",
            ErrorCode.TOOL_CRASHED,
            {"k": 1},
            1,
        )
        assert marker.read_text() == "ran\n"
        assert asked == []
        # A builtin exception that needs more than a message is rebuilt by its base.
        r = ex.execute(call("bad_bytes"))
        assert r.error is not None
        assert r.error.startswith("UnicodeDecodeError: 'utf-8' codec can't decode")
    finally:
        ex.close()


def test_a_module_with_threads_at_import_is_not_forked_from_and_loads_off_the_clock(
    make_executor: MakeExecutor,
) -> None:
    from tests.proc_threaded import registry

    ex = make_executor(registry)
    # The module's own import takes 3 s, longer than the tool's 2.5 s timeout:
    # its workers import it themselves (forking a copy of its held lock would
    # deadlock them), before they count as started.
    results = [ex.execute(call("locked")) for _ in range(3)]
    assert [r.status for r in results] == ["ok"] * 3, results
    assert ex.stats().killed_workers == 0


def test_limits_beyond_what_an_rlimit_holds_are_refused() -> None:
    with pytest.raises(ValueError, match=r"memory_limit_mb must be between 16 and"):
        tool(name="huge", backend="process", memory_limit_mb=2**60)(pt.square.fn)
    with pytest.raises(ValueError, match=r"cpu_limit_s must be at most"):
        ProcessBackend(cpu_limit_s=1e30)


@pytest.mark.parametrize("where", ["backend", "executor"])
def test_idle_workers_retire_but_one_per_tool(
    make_executor: MakeExecutor, tmp_path: Path, where: str
) -> None:
    """Workers serve calls at once; once idle past `idle_timeout` all but one
    exit, and the one kept warm serves the next call without a start."""
    if where == "backend":
        n = 3
        backend = ProcessBackend(idle_timeout=0.2, max_workers=n)
        ex = make_executor(pt.registry, backends={"process": backend}, timeout=60)
    else:  # the executor's option reaches the process backend it makes
        n = 2  # its pool is the CPU count
        if (os.cpu_count() or 1) < n:
            pytest.skip("needs two CPUs for two workers at once")
        ex = make_executor(pt.registry, worker_idle_timeout=0.2, timeout=60)
    results = ex.execute_batch([call("rendezvous", folder=str(tmp_path), n=n)] * n)
    assert [r.status for r in results] == ["ok"] * n, [r.error for r in results]
    pids = {r.output for r in results}
    assert len(pids) == n and ex.stats().workers_started == n
    # Bounds for a loaded machine; each wait ends as soon as its state holds.
    wait_until(lambda: ex.stats().live_workers == 1, 60, "all but one worker retired")
    wait_until(lambda: sum(not _gone(p) for p in pids) == 1, 60, "their processes gone")
    again = ex.execute(call("rendezvous", folder=str(tmp_path), n=1))
    assert again.output in pids and not _gone(again.output)
    assert ex.stats().workers_started == n  # the kept worker served it
    assert ex.stats().killed_workers == 0  # retiring is not a kill of a call


def test_a_handle_cancelled_from_another_thread_kills_its_worker(
    make_executor: MakeExecutor, tmp_path: Path, recorder: bus.Recorder
) -> None:
    ex = make_executor(pt.registry, timeout=None)
    pidfile = tmp_path / "pids"
    handle = ex.submit(call("hang", pidfile=str(pidfile)))
    wait_until(lambda: pidfile.exists() and bool(pidfile.read_text()), 30, "the tool running")
    stopped: list[bool] = []
    canceller = threading.Thread(target=lambda: stopped.append(handle.cancel()))
    canceller.start()
    canceller.join(30)
    assert stopped == [True]
    assert handle.result(60).status == "cancelled" and handle.cancelled()
    [killed] = recorder.wait_for(bus.KILLED, timeout=60)
    assert killed.reason == "cancelled"
    worker, child = map(int, pidfile.read_text().split())
    wait_until(lambda: _gone(worker) and _gone(child), 60, "worker and child reaped")
    ex.drain_events(timeout=30)
    assert [e.result.status for e in recorder.of(bus.FINISHED)] == ["cancelled"]


# -- descendants in process groups of their own (issue 21) ------------------------


def _ended(pid: int) -> bool:
    """Gone, or a zombie: once the zygotes have exited, an orphan is init's to
    reap (and this machine's init may not)."""
    return _state(pid) in (None, "Z")


def _pids(pidfile: Path) -> list[int]:
    """The worker's pid and those of what it started, once the tool wrote them."""
    wait_until(pidfile.exists, 60, "the tool's processes started")
    return [int(p) for p in pidfile.read_text().split()]


@pytest.mark.parametrize("name", ["hang_under_timeout", "hang_with_setpgid_child"])
def test_descendants_in_groups_of_their_own_die_at_the_deadline(
    make_executor: MakeExecutor, tmp_path: Path, recorder: bus.Recorder, name: str
) -> None:
    """`timeout 60 sleep 60` in a process tool left `sleep` running past the
    deadline, close() and the agent's exit: `timeout` moves to a group of its
    own (issue 21)."""
    # 2 s: ample for the tool to start what it starts and write the pids first.
    ex = make_executor(pt.registry, timeout=2.0)
    pidfile = tmp_path / "pids"
    r = ex.execute(call(name, pidfile=str(pidfile)))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    worker, *started = _pids(pidfile)
    assert started
    [killed] = recorder.wait_for(bus.KILLED)
    assert (killed.pid, killed.reason) == (worker, "timeout")
    # Killed and reaped by the worker's zygote: no zombie either.
    wait_until(lambda: all(_gone(p) for p in [worker, *started]), 60, "all of them reaped")


def test_closing_the_executor_kills_descendants_in_groups_of_their_own(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ex = make_executor(pt.registry, timeout=None)
    files = {name: tmp_path / name for name in ("hang_under_timeout", "hang_with_setpgid_child")}
    results: list[Any] = []
    callers = [
        threading.Thread(
            target=lambda c: results.append(ex.execute(c)), args=(call(name, pidfile=str(f)),)
        )
        for name, f in files.items()
    ]
    for caller in callers:  # two calls at once (mutating calls in one batch run in turn)
        caller.start()
    pids = [p for f in files.values() for p in _pids(f)]
    ex.close()
    for caller in callers:
        caller.join(60)
    assert [r.status for r in results] == ["cancelled", "cancelled"]
    wait_until(lambda: all(_ended(p) for p in pids), 60, "all of them dead")


AGENT = """
import sys, threading
from toolbus import Executor, ToolCall
from tests import process_tools as pt
ex = Executor(pt.registry, timeout=None)  # no deadline: only the agent's death kills
call = ToolCall(name=sys.argv[1], arguments={"pidfile": sys.argv[2]})
threading.Thread(target=ex.execute, args=(call,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("name", ["hang_under_timeout", "hang_with_setpgid_child"])
def test_the_agents_death_kills_descendants_in_groups_of_their_own(
    tmp_path: Path, name: str
) -> None:
    """The agent SIGKILLed: its zygotes see their sockets close and kill every
    worker's group and session."""
    pidfile = tmp_path / "pids"
    root = Path(__file__).resolve().parents[2]
    agent = subprocess.Popen([sys.executable, "-c", AGENT, name, str(pidfile)], cwd=root)
    try:
        pids = _pids(pidfile)
    finally:
        agent.kill()
        agent.wait()
    wait_until(lambda: all(_ended(p) for p in pids), 60, "all of them dead")
