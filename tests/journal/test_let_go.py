"""A key whose call ended while its tool runs on: refused until the tool returns.

A sync tool cannot be stopped: at its timeout (or a cancel) its thread is let
go, and the caller has its result while the tool still runs. Its key must not
run the tool a second time beside it (docs/journal.md, "Replay"); once the
let-go attempt has returned, the key runs again as a timed-out call does. A
process tool's worker is killed instead: its key is free once the worker is
seen dead (a SIGKILL takes effect when the kernel delivers it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import toolbus
from tests import process_tools as pt
from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import (
    AttemptFailure,
    ErrorCode,
    Executor,
    Journal,
    RetryDecision,
    RetryPolicy,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    bus,
)
from toolbus.backends._procs import Zygote


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agent-journal.sqlite"


class Charge:
    """`charge`, a mutating sync tool that counts who is in it at once, says
    when each call got in, and holds until released."""

    def __init__(self, *, idempotent: bool = False, retry: RetryPolicy | None = None) -> None:
        self.registry = ToolRegistry()
        self.release = threading.Event()
        self.entered: list[threading.Event] = [threading.Event() for _ in range(4)]
        self.runs = 0
        self.inside = 0
        self.most_inside = 0
        self._lock = threading.Lock()

        @self.registry.tool(timeout=HANG_TIMEOUT, idempotent=idempotent, retry=retry)
        def charge(amount: int, ctx: ToolContext) -> str:
            with self._lock:
                self.runs += 1
                self.inside += 1
                self.most_inside = max(self.most_inside, self.inside)
                n = self.runs
            self.entered[n - 1].set()
            try:
                if not (idempotent and ctx.attempt > 1):
                    self.release.wait(30)
            finally:
                with self._lock:
                    self.inside -= 1
            return f"charged {amount}"


def _call(n: int, amount: int = 5) -> ToolCall:
    return ToolCall(
        id=f"c{n}", name="charge", arguments={"amount": amount}, idempotency_key="order-1"
    )


LET_GO_AT_TIMEOUT = (
    "Tool 'charge' was not run: a call with idempotency key 'order-1' and these arguments "
    "timed out, but its attempt was let go at its timeout and still runs; send it again "
    "once that attempt has returned"
)


def test_a_key_is_refused_while_its_timed_out_tool_still_runs(
    make_executor: MakeExecutor, path: Path
) -> None:
    tool = Charge()
    ex = make_executor(tool.registry, journal=path)
    first = ex.execute(_call(1))
    assert (first.status, first.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert tool.entered[0].is_set()  # it timed out inside its tool: let go, still there
    with bus.Recorder(bus.LATE_RESULT, sender=ex) as late:
        same = ex.execute(_call(2))
        assert (same.status, same.error_code, same.attempts) == (
            "rejected",
            ErrorCode.IDEMPOTENCY_KEY_IN_USE,
            0,
        )
        assert same.error == LET_GO_AT_TIMEOUT
        other = ex.execute(_call(3, amount=999))
        assert (other.status, other.error_code) == ("rejected", ErrorCode.IDEMPOTENCY_KEY_REUSED)
        with Journal(path) as journal:
            [record] = journal.records(call_id="c1")
        assert (record.state, record.status) == ("running", None)  # its tool runs
        assert ex.in_doubt() == []
        tool.release.set()
        late.wait_for(bus.LATE_RESULT, timeout=30)
    # Returned: the call's outcome is the timeout its caller had (a timeout is
    # not replayed), its attempt recorded as it came back; the key runs again.
    again = ex.execute(_call(4))
    assert (again.status, again.output) == ("ok", "charged 5")
    assert "replayed" not in again.metadata
    assert (tool.runs, tool.most_inside) == (2, 1)
    ex.journal.flush(30)
    with Journal(path) as journal:
        [record] = journal.records(call_id="c1")
    assert (record.state, record.status, record.error_code) == (
        "ended",
        "timeout",
        ErrorCode.EXECUTION_TIMEOUT.value,
    )
    assert [(a.n, a.status) for a in record.attempts] == [(1, "ok")]


def test_another_executor_on_the_journal_is_refused_too(path: Path) -> None:
    # Two executors on one path: two journals, two writers, two connections,
    # as two processes would have. The other one sees a call still running.
    tool = Charge()
    with Executor(tool.registry, journal=path) as ex, Executor(tool.registry, journal=path) as ex2:
        try:
            first = ex.execute(_call(1))
            assert first.status == "timeout" and tool.entered[0].is_set()
            there = ex2.execute(_call(2))
            assert (there.status, there.error_code) == (
                "rejected",
                ErrorCode.IDEMPOTENCY_KEY_IN_USE,
            )
            assert "is still running" in (there.error or "")
            with bus.Recorder(bus.LATE_RESULT, sender=ex) as late:
                tool.release.set()
                late.wait_for(bus.LATE_RESULT, timeout=30)
            assert ex.journal.flush(30)  # (its outcome, on disk for the other writer)
            again = ex2.execute(_call(3))
            assert again.status == "ok"
            assert (tool.runs, tool.most_inside) == (2, 1)
        finally:
            tool.release.set()


def test_a_key_is_refused_while_its_cancelled_tool_still_runs(
    make_executor: MakeExecutor, path: Path
) -> None:
    tool = Charge()
    ex = make_executor(tool.registry, journal=path)
    handle = ex.submit(_call(1), timeout=30)
    assert tool.entered[0].wait(30)
    assert handle.cancel()
    assert handle.result(30).status == "cancelled"
    same = ex.execute(_call(2), timeout=30)
    assert (same.status, same.error_code) == ("rejected", ErrorCode.IDEMPOTENCY_KEY_IN_USE)
    assert "was cancelled, but its attempt was let go then and still runs" in (same.error or "")
    assert tool.runs == 1
    tool.release.set()


def test_closing_the_executor_writes_the_held_outcome(path: Path) -> None:
    tool = Charge()
    try:
        with Executor(tool.registry, journal=path) as ex:
            assert ex.execute(_call(1)).status == "timeout"
            assert tool.entered[0].is_set()
        # Closed while its tool still runs: the outcome its caller had is on
        # disk, and the call is not taken for one in doubt.
        with Journal(path) as journal:
            [record] = journal.records(call_id="c1")
            assert (record.state, record.status) == ("ended", "timeout")
            assert journal.in_doubt() == []
    finally:
        tool.release.set()


def test_an_idempotent_tools_ok_retry_replays_beside_its_let_go_attempt(
    make_executor: MakeExecutor, path: Path
) -> None:
    # Retried after a timeout while its first attempt still runs: the call's
    # ok outcome is written at once, and its key replays it (nothing runs).
    tool = Charge(idempotent=True, retry=RetryPolicy(max_retries=1, backoff_base=0.001, jitter=0))

    class RetryTimeouts(Executor):
        def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
            return RetryDecision(failure.attempt < 2, 0.0)

    ex = RetryTimeouts(tool.registry, journal=path)
    try:
        first = ex.execute(_call(1))
        assert (first.status, first.attempts) == ("ok", 2)
        again = ex.execute(_call(2))
        assert again.metadata.get("replayed") is True
        assert tool.runs == 2  # the let-go first attempt, and the retry
    finally:
        tool.release.set()
        ex.close()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _hang(n: int, pidfile: Path) -> ToolCall:
    return ToolCall(
        id=f"h{n}", name="hang", arguments={"pidfile": str(pidfile)}, idempotency_key="h"
    )


def _runs_again(ex: Executor, n: int, pidfile: Path) -> ToolResult:
    """`hang` under the same key, sent until it is no longer refused
    IDEMPOTENCY_KEY_IN_USE (its killed worker's death seen): its result."""
    results: list[ToolResult] = []

    def ran() -> bool:
        results.append(ex.execute(_hang(n, pidfile), timeout=2 * HANG_TIMEOUT))
        return results[-1].error_code != ErrorCode.IDEMPOTENCY_KEY_IN_USE

    wait_until(ran, what="the key free once its worker's death is seen")
    return results[-1]


class HeldExits:
    """The zygote's reports of exits held back (`Zygote._exited`): a killed
    worker is dead (reaped), but toolbus has not seen it die, as when a
    SIGKILL has not yet taken effect (a process inside a system call that
    cannot be interrupted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.held: list[tuple[Zygote, int, int]] = []
        self._seen = Zygote._exited
        self._monkeypatch = monkeypatch
        monkeypatch.setattr(
            Zygote, "_exited", lambda z, pid, status: self.held.append((z, pid, status))
        )

    def release(self) -> None:
        """Let the exits held so far, and all later ones, be seen."""
        self._monkeypatch.setattr(Zygote, "_exited", self._seen)
        for z, pid, status in self.held:
            z.loop.call_soon_threadsafe(self._seen, z, pid, status)


def test_a_process_tool_killed_at_its_timeout_frees_its_key_once_its_worker_is_dead(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ex = make_executor(pt.registry, journal=tmp_path / "journal.sqlite")
    assert ex.execute(ToolCall(name="worker_pid")).ok  # a worker started: off the deadline
    pidfile = tmp_path / "pids"
    first = ex.execute(_hang(1, pidfile), timeout=2 * HANG_TIMEOUT)
    assert first.status == "timeout"
    worker = int(pidfile.read_text().split()[0])  # it ran, and was killed
    pidfile.unlink()
    wait_until(lambda: _gone(worker), what="the first worker reaped")
    # Sent again once that worker is dead: it runs (in another worker), as soon
    # as toolbus has seen the death (its zygote says so: a moment after the reaping).
    again = _runs_again(ex, 2, pidfile)
    assert (again.status, again.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert int(pidfile.read_text().split()[0]) != worker


def test_a_process_tools_key_is_held_until_its_killed_worker_is_seen_dead(
    make_executor: MakeExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exits = HeldExits(monkeypatch)
    ex = make_executor(pt.registry, journal=tmp_path / "journal.sqlite")
    assert ex.execute(ToolCall(name="worker_pid")).ok
    pidfile = tmp_path / "pids"
    first = ex.execute(_hang(1, pidfile), timeout=2 * HANG_TIMEOUT)
    assert first.status == "timeout"  # its caller is not held up by the wait
    worker = int(pidfile.read_text().split()[0])
    pidfile.unlink()
    wait_until(lambda: any(p == worker for _, p, _ in exits.held), what="the kill's exit reported")
    refused = ex.execute(_hang(2, pidfile))
    assert (refused.status, refused.error_code) == (
        "rejected",
        ErrorCode.IDEMPOTENCY_KEY_IN_USE,
    )
    assert "killed then, has not exited yet" in (refused.error or "")
    assert not pidfile.exists()  # its tool never started
    exits.release()  # its death seen: the key runs again
    again = _runs_again(ex, 3, pidfile)
    assert (again.status, again.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)


def test_a_process_tool_crashed_over_its_cpu_limit_ends_once_its_worker_is_seen_dead(
    make_executor: MakeExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Killed by toolbus's CPU watch (the tool is deaf to SIGXCPU), not by a
    # deadline: its call ends with the crash, and only once the worker is seen
    # dead, its key held until then.
    exits = HeldExits(monkeypatch)
    ex = make_executor(pt.registry, journal=tmp_path / "journal.sqlite", timeout=120)
    spin = ToolCall(id="s1", name="spin_on", arguments={"seconds": 60}, idempotency_key="s")
    done: list[ToolResult] = []
    caller = threading.Thread(target=lambda: done.append(ex.execute(spin)))
    caller.start()
    wait_until(lambda: len(exits.held) == 1, timeout=90, what="the spinning worker's exit reported")
    again = ex.execute(
        ToolCall(id="s2", name="spin_on", arguments={"seconds": 60}, idempotency_key="s")
    )
    assert again.error_code == ErrorCode.IDEMPOTENCY_KEY_IN_USE
    assert not done  # its call has not ended: its worker is not seen dead
    exits.release()
    caller.join(HANG_TIMEOUT * 30)
    assert (done[0].status, done[0].error_code) == ("error", ErrorCode.TOOL_CRASHED)
    assert "cpu_limit_s=1" in (done[0].error or "")


LET_GO_AGENT = textwrap.dedent(
    """
    import sys
    import threading

    from toolbus import Executor, ToolCall, ToolRegistry

    reg = ToolRegistry()


    @reg.tool(timeout=float(sys.argv[2]))
    def charge(amount: int) -> str:
        print("started", flush=True)
        threading.Event().wait()  # let go at its timeout, and never returns
        return "never"


    ex = Executor(reg, journal=sys.argv[1])
    r = ex.execute(ToolCall(id="c1", name="charge", arguments={"amount": 5}, idempotency_key="k"))
    ex.journal.flush(30)  # everything queued so far is on disk
    print("ended", r.status, flush=True)
    threading.Event().wait()  # killed here
    """
)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_process_that_dies_while_its_let_go_tool_runs_leaves_the_call_in_doubt(
    tmp_path: Path,
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(LET_GO_AGENT)
    path = tmp_path / "agent-journal.sqlite"
    env = {**os.environ, "PYTHONPATH": str(Path(toolbus.__file__).parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), str(HANG_TIMEOUT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().split() == ["started"]
        assert proc.stdout.readline().split() == ["ended", "timeout"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    # Its tool may or may not have had its effect: the call is in doubt, not
    # a timeout that runs again as if nothing had happened.
    with Journal(path) as journal:
        [record] = journal.in_doubt()
    assert (record.call_id, record.status) == ("c1", None)
