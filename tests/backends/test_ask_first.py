"""A sync tool's policies asked on the dispatching thread (`backends/_ask_first.py`).

Calls a policy makes wait, refuses or answers never reach a worker: no
thread is woken or started for them, the first time or when they are asked
again. What is asked on a worker instead (a policy that may block, a
pre-call hook) stays there.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

import pytest

from tests.conftest import MakeExecutor, wait_until
from tests.policy_clock import FakeClock, drive_limits_clock
from toolbus import ErrorCode, Injected, ToolCall, ToolRegistry
from toolbus.backends._ask_first import BegunJob
from toolbus.backends._protocol import Job
from toolbus.backends._thread_pool import ToolPool
from toolbus.policies import Admit, BasePolicy, Decision, Delay, Reject, rate_limit


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    drive_limits_clock(monkeypatch, fake)
    return fake


def _on_worker() -> bool:
    return threading.current_thread().name.startswith("ToolWorker")


class Gate(BasePolicy):
    """Delays each call `times` times (briefly), then admits it; records on
    which threads it was asked."""

    never_blocks = True

    def __init__(self, times: int, *, never_blocks: bool = True) -> None:
        self.name = "gate"
        self.times = times
        self.never_blocks = never_blocks
        self.asks: dict[int, int] = {}
        self.on_worker: list[bool] = []
        self.first_on_worker: list[bool] = []  # each call's first ask
        self.lock = threading.Lock()

    def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
        with self.lock:
            self.on_worker.append(_on_worker())
            n = self.asks[id(call)] = self.asks.get(id(call), 0) + 1
            if n == 1:
                self.first_on_worker.append(_on_worker())
        return Delay(0.001) if n <= self.times else Admit()


def _registry(policy: BasePolicy, ran: list[bool]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[policy])
    def ping(n: int) -> int:
        ran.append(_on_worker())
        return n

    return reg


def _calls(n: int) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name="ping", arguments={"n": i}) for i in range(n)]


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[Job]:
    """Every job handed to a tool's pool of workers."""
    jobs: list[Job] = []
    add = ToolPool.add

    def counted(self: ToolPool, job: Job) -> None:
        jobs.append(job)
        add(self, job)

    monkeypatch.setattr(ToolPool, "add", counted)
    return jobs


def test_a_policy_that_never_blocks_is_never_what_a_worker_is_taken_for(
    make_executor: MakeExecutor, queued: list[Job]
) -> None:
    """Eighty asks (three delays and an admission per call), twenty jobs for
    the workers: one per tool run. (It may be asked on a worker's thread: one
    that reports runs the scheduler, and dispatches what is due, itself.)"""
    gate = Gate(times=3)
    ran: list[bool] = []
    ex = make_executor(_registry(gate, ran), max_parallel=8, timeout=30)
    result = ex.execute_batch(_calls(20))
    assert [r.status for r in result] == ["ok"] * 20
    assert len(gate.on_worker) == 20 * 4
    assert len(queued) == 20 and all(type(j) is BegunJob for j in queued), queued
    assert ran == [True] * 20  # the tool itself always runs on a worker


def test_calls_waiting_on_a_rate_limit_start_no_worker(
    make_executor: MakeExecutor, clock: FakeClock
) -> None:
    """Two admitted in the window (a clock that stands still: never more);
    eighteen wait. Only the admitted two ever reached the pool."""
    rl = rate_limit("2/second", clock=clock)
    ran: list[bool] = []
    ex = make_executor(_registry(rl, ran), max_parallel=64, timeout=60)
    done = threading.Event()
    statuses: list[str] = []

    def client() -> None:
        statuses.extend(r.status for r in ex.execute_batch(_calls(20)))
        done.set()

    t = threading.Thread(target=client)
    t.start()
    wait_until(lambda: rl.waiting >= 18, 30, "18 calls waiting")
    wait_until(lambda: ex.stats().ok == 2, 30, "the window's 2 calls done")
    stats = ex.stats()
    assert 1 <= stats.workers_started <= 2, stats
    ex.close()
    t.join(timeout=30)
    assert done.is_set()
    assert sorted(statuses) == ["cancelled"] * 18 + ["ok"] * 2


def test_a_refusal_decided_off_the_workers_ends_the_call_without_one(
    make_executor: MakeExecutor,
) -> None:
    class Refuse(BasePolicy):
        name = "refuse"
        never_blocks = True

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            return Reject(ErrorCode.TOOL_NOT_ALLOWED, "not today")

    ran: list[bool] = []
    ex = make_executor(_registry(Refuse(), ran), max_parallel=8)
    result = ex.execute_batch(_calls(5))
    assert [(r.status, r.error_code) for r in result] == [
        ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    ] * 5
    assert ran == [] and ex.stats().workers_started == 0


def test_a_policy_that_raises_off_the_workers_fails_the_call_closed(
    make_executor: MakeExecutor,
) -> None:
    class Broken(BasePolicy):
        name = "broken-guard"
        never_blocks = True

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            raise RuntimeError("boom")

    ran: list[bool] = []
    ex = make_executor(_registry(Broken(), ran), max_parallel=8)
    r = ex.execute(_calls(1)[0])
    assert r.status == "rejected" and r.error_code == ErrorCode.TOOL_UNAVAILABLE
    assert "broken-guard" in (r.error or "")
    assert ran == [] and ex.stats().workers_started == 0


def test_a_policy_that_may_block_is_still_asked_on_a_worker(
    make_executor: MakeExecutor, queued: list[Job]
) -> None:
    gate = Gate(times=1, never_blocks=False)
    ran: list[bool] = []
    ex = make_executor(_registry(gate, ran), max_parallel=8)
    assert [r.status for r in ex.execute_batch(_calls(4))] == ["ok"] * 4
    assert gate.on_worker == [True] * 8
    assert len(queued) == 8 and not any(type(j) is BegunJob for j in queued)


def test_with_a_pre_call_hook_the_first_ask_is_on_a_worker_and_the_next_are_not(
    make_executor: MakeExecutor, queued: list[Job]
) -> None:
    """The hook is user code that may block: admission, and the policies
    after it, run on a worker. Asked again after a delay, the call is
    admitted already: nothing of the user's runs before the policy."""
    gate = Gate(times=2)
    ran: list[bool] = []
    hooked: list[bool] = []

    def hook(call: ToolCall) -> ToolCall:
        hooked.append(_on_worker())
        return call

    ex = make_executor(_registry(gate, ran), max_parallel=8, pre_call=[hook])
    assert [r.status for r in ex.execute_batch(_calls(3))] == ["ok"] * 3
    assert hooked == [True] * 3
    # Three first asks on workers (a job each); then two more asks per call,
    # the last admitting it: a job each, begun where it was dispatched.
    assert gate.first_on_worker == [True] * 3 and len(gate.on_worker) == 9
    assert len(queued) == 6, queued
    assert sum(type(j) is BegunJob for j in queued) == 3


def test_a_policy_that_cannot_be_hashed_is_still_asked(make_executor: MakeExecutor) -> None:
    class Unhashable(Gate):
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return self is other

    gate = Unhashable(times=1)
    ran: list[bool] = []
    ex = make_executor(_registry(gate, ran), max_parallel=8)
    assert [r.status for r in ex.execute_batch(_calls(3))] == ["ok"] * 3
    assert len(gate.on_worker) == 6


def test_a_never_blocking_policy_that_answers_with_an_awaitable_still_runs_the_tool(
    make_executor: MakeExecutor, queued: list[Job]
) -> None:
    """Its steps yield the awaitable, not HANDOFF: the worker resolves it and
    goes on past the handoff itself (review of session 36: it ended the call
    with an internal error)."""

    class AsyncAdmit(BasePolicy):
        name = "async-admit"
        never_blocks = True

        async def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            return Admit()

    ran: list[bool] = []
    ex = make_executor(_registry(AsyncAdmit(), ran), max_parallel=4)
    r = ex.execute(_calls(1)[0])
    assert (r.status, r.output) == ("ok", 0), r
    assert len(queued) == 1 and type(queued[0]) is BegunJob and queued[0].pending is not None


def test_an_injected_values_provider_keeps_the_first_ask_on_a_worker(
    make_executor: MakeExecutor, queued: list[Job]
) -> None:
    """A provider is the user's code, maybe async, maybe slow: it never runs
    on the dispatching thread under the scheduler's lock (review of session
    36: an async one ended every call with an internal error, a slow one
    held every other call back)."""

    async def user_id(call: ToolCall) -> str:
        return "u-42"

    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[rate_limit("100/second")])
    def whoami(q: str, user: Annotated[str, Injected]) -> str:
        return f"{q}:{user}"

    ex = make_executor(reg, max_parallel=4, timeout=10, inject={"user": user_id})
    r = ex.execute(ToolCall(id="c1", name="whoami", arguments={"q": "hi"}))
    assert (r.status, r.output) == ("ok", "hi:***"), r  # (an injected value is masked)
    assert len(queued) == 1 and type(queued[0]) is not BegunJob


def test_a_rate_limit_with_a_key_function_is_asked_on_a_worker() -> None:
    """A key function is the user's code: the limit does not claim to never block."""
    assert rate_limit("5/second").never_blocks is True
    assert rate_limit("5/second", key=lambda call: "k").never_blocks is False
    assert rate_limit("5/second", on_admit=lambda key, at: None).never_blocks is False


def test_a_call_whose_deadline_passes_while_it_waits_for_a_worker_timed_out_unbegun(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admitted where it was dispatched, then queued for a worker that does
    not come in time: the result says the tool timed out, as for any queued
    call, not that a pre-call hook did not return (review of session 36)."""
    let_go = threading.Event()
    take = ToolPool.take

    def held(self: ToolPool, w: Any) -> Job | None:
        let_go.wait(30)
        return take(self, w)

    monkeypatch.setattr(ToolPool, "take", held)
    ran: list[bool] = []
    ex = make_executor(_registry(rate_limit("100/second"), ran), timeout=0.2)
    try:
        r = ex.execute(_calls(1)[0])
    finally:
        let_go.set()
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT), r
    assert "pre-call" not in (r.error or "") and "timed out" in (r.error or ""), r.error
    assert ran == []
