"""A tool pool's bookkeeping for jobs that ask their policies first (pure: no threads).

A job whose call has policies left to ask may end there, told to wait: the
worker that takes it wakes nobody until the policies let the call through
(`ToolPool.passes`), and `add` wakes nobody while it asks. Found by a
stress run (session 36): 60 calls waiting on a 5/second limit started 14
workers on a busy machine, each woken by the cascade only to hear "wait".
"""

from __future__ import annotations

import dataclasses
import enum
import queue
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, BaseModel, Field

from tests.conftest import MakeExecutor
from toolbus import Executor, Injected, ToolCall, ToolRegistry
from toolbus.backends._quick_asks import QuickAsks
from toolbus.backends._thread_pool import WAKE, PoolWorker, ToolPool
from toolbus.policies import BasePolicy, RateLimit, rate_limit


@dataclass(eq=False)
class FakeRun:
    policies: tuple[Any, ...] = ()
    policy_at: int = 0
    quick: bool = True  # what `asks_quickly` says of it


@dataclass(eq=False)
class FakeJob:
    run: FakeRun = field(default_factory=FakeRun)
    attempt: int = 1
    timed_out_in: str | None = None


def asks_first(quick: bool = True) -> Any:
    return FakeJob(FakeRun(policies=("a rate limit",), quick=quick))


def plain() -> Any:
    return FakeJob(FakeRun())


class Pool:
    """A ToolPool whose workers are records: `spawned` lists those started,
    each with its inbox (a nudge puts WAKE in it)."""

    def __init__(self) -> None:
        self.spawned: list[PoolWorker] = []
        self.pool = ToolPool(
            SimpleNamespace(name="t"),  # type: ignore[arg-type]
            60.0,
            self._spawn,
            lambda run: run.quick,  # type: ignore[attr-defined]
        )

    def _spawn(self, pool: ToolPool) -> PoolWorker:
        ref = SimpleNamespace(actor_inbox=queue.SimpleQueue(), stop=lambda block=False: None)
        w = PoolWorker(ref, pool, len(self.spawned) + 1)  # type: ignore[arg-type]
        self.spawned.append(w)
        return w

    def nudges(self) -> int:
        n = 0
        for w in self.spawned:
            while not w.ref.actor_inbox.empty():
                assert w.ref.actor_inbox.get().message is WAKE
                n += 1
        return n


def test_asks_that_end_in_a_wait_are_served_by_one_worker() -> None:
    p = Pool()
    for _ in range(10):
        p.pool.add(asks_first())
    (w,) = p.spawned
    served = 0
    while (job := p.pool.take(w)) is not None:
        assert w.asking and p.pool.asking == 1 and p.pool.searching == 0
        if served == 3:
            for _ in range(5):  # more calls come while it asks: nobody is woken
                p.pool.add(asks_first())
        assert p.pool.finished(w, job)  # told to wait: back to the queue
        assert not w.asking and p.pool.asking == 0
        served += 1
    assert served == 15
    assert len(p.spawned) == 1 and p.nudges() == 0
    assert w in p.pool.idle


def test_a_call_its_policies_let_through_wakes_one_for_the_rest() -> None:
    p = Pool()
    for _ in range(5):
        p.pool.add(asks_first())
    (w1,) = p.spawned
    first = p.pool.take(w1)
    assert first is not None and len(p.spawned) == 1  # no cascade on an ask
    p.pool.passes(w1)  # admitted: its tool may take long
    assert len(p.spawned) == 2 and not w1.asking
    w2 = p.spawned[1]
    second = p.pool.take(w2)
    assert second is not None
    p.pool.passes(w2)  # w1 is still in its tool: a third one
    assert len(p.spawned) == 3
    w3 = p.spawned[2]
    third = p.pool.take(w3)
    assert third is not None and p.pool.finished(w3, third)  # this one waits
    assert p.pool.finished(w1, first)  # w1 is back: two searching
    p.pool.passes(w2)  # (already counted: nothing more)
    assert len(p.spawned) == 3 and p.nudges() == 0


def test_nobody_is_woken_for_the_rest_while_another_worker_asks() -> None:
    p = Pool()
    for _ in range(3):
        p.pool.add(asks_first())
    (w1,) = p.spawned
    a = p.pool.take(w1)
    p.pool.passes(w1)
    w2 = p.spawned[1]
    b = p.pool.take(w2)  # w2 asks
    assert a is not None and b is not None
    assert p.pool.finished(w1, a)  # w1 searches again ...
    c = p.pool.take(w1)  # ... and takes the last one to ask it
    assert c is not None and p.pool.asking == 2
    p.pool.passes(w2)  # queue empty: nobody to wake
    assert len(p.spawned) == 2 and p.nudges() == 0


@pytest.mark.parametrize(
    "make",
    [plain, lambda: asks_first(quick=False)],
    ids=["no policies", "asking may block"],
)
def test_other_jobs_still_hand_the_search_on(make: Any) -> None:
    """No policy to ask, or asking may block (a pre-call hook, a policy that
    waits on the network): the worker may be held, so the queue gets another
    worker at once (the cascade: a slow burst fans out)."""
    p = Pool()
    for _ in range(3):
        p.pool.add(make())
    (w1,) = p.spawned
    assert p.pool.take(w1) is not None
    assert len(p.spawned) == 2 and not w1.asking and p.pool.asking == 0


def test_an_asking_worker_detached_by_a_cancel_leaves_the_queue_to_another() -> None:
    p = Pool()
    first: Any = asks_first()
    for job in (first, asks_first(), asks_first()):
        p.pool.add(job)
    (w1,) = p.spawned
    taken = p.pool.take(w1)
    assert id(taken) == id(first)  # (by identity: `is` would narrow `first` for mypy)
    assert p.pool.cancel(first)  # its policy never answered: the deadline
    assert p.pool.asking == 0 and not w1.asking
    assert len(p.spawned) == 2  # a fresh worker for the two still queued
    assert not p.pool.finished(w1, first)  # detached: it waits to rejoin


# -- which calls ask quickly (`QuickAsks`) ------------------------------------------------


def _executor_parts(**options: Any) -> tuple[Any, Any]:
    """An executor's services and a registry with tools to judge (closed at once)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[rate_limit("5/second")])
    def plain_tool(q: str) -> str:
        return q

    @reg.tool(read_only=True, policies=[rate_limit("5/second")])
    def checked(q: Annotated[str, AfterValidator(str.strip)]) -> str:
        return q

    @reg.tool(read_only=True, policies=[rate_limit("5/second")])
    def injected(q: str, user: Annotated[str, Injected]) -> str:
        return q

    @reg.tool(read_only=True, policies=[rate_limit("5/second", key=lambda call: "k")])
    def keyed(q: str) -> str:
        return q

    ex = Executor(reg, **options)
    ex.close()
    return ex._services, reg


def _run(reg: ToolRegistry, name: str, *, admitted: bool = False) -> Any:
    tool = reg.get(name)
    return SimpleNamespace(tool=tool, policies=tuple(tool.policies), admitted=admitted)


def test_a_rate_limits_calls_ask_quickly_when_nothing_of_the_users_runs_first() -> None:
    services, reg = _executor_parts()
    assert QuickAsks(reg.get("plain_tool"), services)(_run(reg, "plain_tool"))
    # A validator of the user's, a key function: not quick.
    assert not QuickAsks(reg.get("checked"), services)(_run(reg, "checked"))
    assert not QuickAsks(reg.get("keyed"), services)(_run(reg, "keyed"))
    # Injected parameters without providers: quick; with one, not.
    assert QuickAsks(reg.get("injected"), services)(_run(reg, "injected"))
    services, reg = _executor_parts(inject={"user": lambda call: "u"})
    assert not QuickAsks(reg.get("injected"), services)(_run(reg, "injected"))


def test_a_pre_call_hook_makes_the_first_ask_slow_but_not_the_next() -> None:
    services, reg = _executor_parts(pre_call=[lambda call: call])
    quick = QuickAsks(reg.get("plain_tool"), services)
    assert not quick(_run(reg, "plain_tool"))
    assert quick(_run(reg, "plain_tool", admitted=True))  # asked again after a wait


def test_a_policy_of_the_users_is_not_assumed_to_answer_at_once() -> None:
    class Remote(BasePolicy):
        def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
            return None

    class Trusted(Remote):
        never_blocks = True

    services, reg = _executor_parts()
    tool = reg.get("plain_tool")
    assert not QuickAsks(tool, services)(SimpleNamespace(policies=(Remote(),), admitted=True))
    assert QuickAsks(tool, services)(SimpleNamespace(policies=(Trusted(),), admitted=True))
    assert QuickAsks(tool, services)(SimpleNamespace(policies=(BasePolicy(),), admitted=True))


def test_a_pre_call_hook_that_calls_its_own_tool_is_not_stranded(
    make_executor: MakeExecutor,
) -> None:
    """The nested call joins the same tool's queue while the outer worker is
    in the hook: it must get a worker of its own (review of session 36: with
    the queue held for the asking worker, both calls hung)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[rate_limit("100/second")])
    def fetch(url: str) -> str:
        return url

    def robots_first(call: ToolCall) -> ToolCall:
        if call.arguments.get("url") != "robots.txt":
            inner = ex.execute(ToolCall(name="fetch", arguments={"url": "robots.txt"}))
            assert inner.status == "ok", inner
        return call

    ex = make_executor(reg, pre_call=[robots_first], timeout=30)
    r = ex.execute(ToolCall(name="fetch", arguments={"url": "a"}))
    assert (r.status, r.output) == ("ok", "a"), r


class Color(enum.Enum):
    RED = "red"


class Inner(BaseModel):
    a: int = 1


@dataclasses.dataclass
class Point:
    x: int


def test_arguments_that_would_run_code_of_the_users_as_they_validate_are_not_quick() -> None:
    """A default factory, an enum (its `_missing_`), a nested model (its
    hooks), a dataclass (its `__post_init__`), a parse set on the tool:
    pydantic or the tool runs them inside validation (review of session 36:
    a default factory that called its own tool hung both calls)."""

    services, _ = _executor_parts()
    reg = ToolRegistry()
    limit = rate_limit("5/second")

    @reg.tool(read_only=True, policies=[limit])
    def factory(q: Annotated[str, Field(default_factory=lambda: "x")]) -> str:
        return q

    @reg.tool(read_only=True, policies=[limit])
    def colored(c: Color) -> str:
        return c.value

    @reg.tool(read_only=True, policies=[limit])
    def nested(i: Inner) -> int:
        return i.a

    @reg.tool(read_only=True, policies=[limit])
    def point(p: Point) -> int:
        return p.x

    @reg.tool(read_only=True, policies=[limit])
    def scalars(q: str, n: int = 3, tags: list[str] | None = None, on: bool = False) -> str:
        return q

    for name in ("factory", "colored", "nested", "point"):
        assert not QuickAsks(reg.get(name), services)(_run(reg, name)), name
    assert QuickAsks(reg.get("scalars"), services)(_run(reg, "scalars"))
    tool = reg.get("scalars")
    tool.parse = lambda arguments: arguments  # type: ignore[method-assign]
    assert not QuickAsks(tool, services)(_run(reg, "scalars"))


def test_an_admit_of_its_own_is_not_trusted_to_never_block() -> None:
    class Traced(RateLimit):
        def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
            return super().admit(call, tool, now)

    assert Traced("5/second").never_blocks is False
    wrapped = rate_limit("5/second")
    wrapped.admit = lambda call, tool, now: None  # type: ignore[method-assign]
    services, reg = _executor_parts()
    quick = QuickAsks(reg.get("plain_tool"), services)
    assert not quick(SimpleNamespace(policies=(wrapped,), admitted=True))
