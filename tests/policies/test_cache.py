"""`policies.cache`: read-only results kept for a while; identical calls at once run once.

The state machine is driven directly on a fake clock (admit / on_result with
the `now` a test chooses); the rest goes through an executor: 8 identical calls
at once run the tool once, errors are not kept, a lost or cancelled leader
hands over to one follower, a cache is refused on a mutating tool.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import gc
import threading
import time
from typing import Annotated, Any

import pytest

from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import (
    Injected,
    ToolCall,
    ToolError,
    ToolRegistry,
    ToolResult,
    bus,
    tool,
)
from toolbus.policies import (
    CACHE_HIT,
    Admit,
    BasePolicy,
    Cache,
    Decision,
    Delay,
    Respond,
    cache,
    circuit_breaker,
)


def _call(id: str, q: Any = "x", name: str = "lookup") -> ToolCall:
    return ToolCall(id=id, name=name, arguments={"q": q})


def _ok(call: ToolCall, output: Any = "answer") -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, status="ok", output=output, attempts=1)


def _failed(call: ToolCall) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, status="error", error="boom", attempts=1)


@tool(read_only=True)
def lookup(q: str) -> str:
    return q


@tool
def bump(q: str) -> str:
    return q


# -- the state machine, on a fake clock ------------------------------------------------


def test_a_miss_is_admitted_stored_and_hit_until_the_ttl_runs_out() -> None:
    c = cache(ttl=10, maxsize=4)
    first = _call("a")
    assert c.admit(first, lookup, 100.0) == Admit()
    stored = c.on_result(first, _ok(first), 101.0)
    assert stored is not None and stored.metadata == {"cache": "miss"}
    hit = c.admit(_call("b"), lookup, 110.9)
    assert isinstance(hit, Respond)
    assert hit.result.output == "answer" and hit.result.metadata == {"cache": "hit"}
    # Stored at 101: gone at 111 (the fake clock, not the wall's).
    assert c.admit(_call("c"), lookup, 111.0) == Admit()


def test_the_key_is_the_tool_and_the_canonical_arguments() -> None:
    c = cache(ttl=60)
    first = ToolCall(id="a", name="lookup", arguments={"q": "x", "n": 1})
    c.admit(first, lookup, 0.0)
    c.on_result(first, _ok(first), 0.0)
    same = ToolCall(id="b", name="lookup", arguments='{"n": 1,  "q": "x"}')
    assert isinstance(c.admit(same, lookup, 1.0), Respond)
    assert c.admit(ToolCall(id="c", name="lookup", arguments={"q": "x", "n": 2}), lookup, 1.0) == (
        Admit()
    )
    other_tool = ToolCall(id="d", name="search", arguments={"q": "x", "n": 1})
    assert c.admit(other_tool, lookup, 1.0) == Admit()


def test_the_least_recently_used_result_goes_first_when_full() -> None:
    c = cache(ttl=60, maxsize=2)
    for q in ("a", "b"):
        call = _call(q, q)
        c.admit(call, lookup, 0.0)
        c.on_result(call, _ok(call, q), 0.0)
    assert isinstance(c.admit(_call("a2", "a"), lookup, 1.0), Respond)  # "a" used last
    third = _call("c", "c")
    c.admit(third, lookup, 1.0)
    c.on_result(third, _ok(third, "c"), 1.0)
    assert isinstance(c.admit(_call("a3", "a"), lookup, 2.0), Respond)
    assert c.admit(_call("b2", "b"), lookup, 2.0) == Admit()
    assert len(c) == 2


def test_followers_wait_for_the_leader_and_hit_its_result() -> None:
    c = cache(ttl=60, wait=30)
    leader, f1, f2 = _call("L"), _call("f1"), _call("f2")
    assert c.admit(leader, lookup, 0.0) == Admit()
    d1, d2 = c.admit(f1, lookup, 1.0), c.admit(f2, lookup, 2.0)
    assert isinstance(d1, Delay) and isinstance(d2, Delay)
    assert (d1.seconds, d2.seconds) == (29.0, 28.0)  # until the flight's budget runs out
    assert d1.until is d2.until and d1.until is not None and not d1.until.done()
    assert c.waiting == 2
    c.on_result(leader, _ok(leader), 3.0)
    assert d1.until.done() and c.waiting == 0
    for f in (f1, f2):
        decision = c.admit(f, lookup, 3.0)
        assert isinstance(decision, Respond) and decision.result.metadata["cache"] == "hit"


def test_a_failed_leader_is_not_kept_and_one_follower_leads_the_next_try() -> None:
    c = cache(ttl=60, wait=30)
    leader, f1, f2 = _call("L"), _call("f1"), _call("f2")
    c.admit(leader, lookup, 0.0)
    d1 = c.admit(f1, lookup, 0.0)
    c.admit(f2, lookup, 0.0)
    assert c.on_result(leader, _failed(leader), 1.0) is None  # an error: unmarked, not kept
    assert isinstance(d1, Delay) and d1.until is not None and d1.until.done()
    assert c.admit(f1, lookup, 1.0) == Admit()  # the first asked leads
    again = c.admit(f2, lookup, 1.0)
    assert isinstance(again, Delay) and again.until is not d1.until  # the others follow it
    c.on_result(f1, _ok(f1), 2.0)
    assert isinstance(c.admit(f2, lookup, 2.0), Respond)


@pytest.mark.parametrize("told", ["on_dropped", "on_result", "both"])
def test_a_follower_that_ends_while_it_waits_leaves_the_flight(told: str) -> None:
    """Review 9: cancelled while it waited, a follower is no longer counted as
    waiting, nor answered when the flight ends; told both ways, it leaves once."""
    c = cache(ttl=60, wait=30)
    leader, f1, f2 = _call("L"), _call("f1"), _call("f2")
    c.admit(leader, lookup, 0.0)
    c.admit(f1, lookup, 0.0)
    c.admit(f2, lookup, 0.0)
    gone = f1  # the object it was asked about, as the executor tells it
    result = ToolResult(call_id="f1", name="lookup", status="cancelled", error="x", attempts=0)
    if told in ("on_dropped", "both"):
        c.on_dropped(gone, result, 1.0)
    if told in ("on_result", "both"):
        assert c.on_result(gone, result, 1.0) is None
    assert c.waiting == 1
    c.on_result(leader, _ok(leader), 2.0)
    (entry,) = c._results.values()
    assert list(entry.shared_with.values()) == [f2]  # f1 is not waiting for an answer any more


def test_calls_that_share_an_id_are_told_apart() -> None:
    """Review of issue 21: flights knew calls by their id, which a model may
    repeat: a follower named like its leader could not leave the flight
    (still counted waiting, later told its answer was shared), and a
    follower's failure ended the leader's flight."""
    c = cache(ttl=60, wait=30)
    leader, f1, f2 = _call("dup"), _call("dup"), _call("dup")
    assert c.admit(leader, lookup, 0.0) == Admit()
    d1, d2 = c.admit(f1, lookup, 0.0), c.admit(f2, lookup, 0.0)
    assert isinstance(d1, Delay) and isinstance(d2, Delay)
    assert c.waiting == 2
    c.on_dropped(f1, ToolResult(call_id="dup", name="lookup", status="cancelled"), 1.0)
    assert c.waiting == 1
    assert c.on_result(f1, _failed(f1), 1.0) is None  # not the leader: its flight goes on
    assert d2.until is not None and not d2.until.done()
    c.on_result(leader, _ok(leader), 2.0)
    assert d2.until.done()
    (entry,) = c._results.values()
    assert list(entry.shared_with.values()) == [f2]


def test_a_follower_woken_by_its_answer_that_ends_before_asking_is_not_kept() -> None:
    """Review of issue 21: cancelled between its wake-up and its asking
    again, a follower stayed in the entry's `shared_with` (its call and its
    arguments held) until the entry's ttl ran out."""
    c = cache(ttl=60, wait=30)
    leader, follower = _call("L"), _call("F")
    c.admit(leader, lookup, 0.0)
    assert isinstance(c.admit(follower, lookup, 0.0), Delay)
    c.on_result(leader, _ok(leader), 1.0)
    gone = ToolResult(call_id="F", name="lookup", status="cancelled", error="x", attempts=0)
    c.on_dropped(follower, gone, 1.5)
    (entry,) = c._results.values()
    assert entry.shared_with == {}


def test_a_leader_never_heard_of_again_is_presumed_lost_after_the_budget() -> None:
    c = cache(ttl=60, wait=10)
    leader, f1, f2 = _call("L"), _call("f1"), _call("f2")
    c.admit(leader, lookup, 0.0)
    d1 = c.admit(f1, lookup, 4.0)
    assert isinstance(d1, Delay) and d1.seconds == 6.0
    # Its timer ran out: f1 leads a new flight; the old one's followers are woken.
    assert c.admit(f1, lookup, 10.0) == Admit()
    assert d1.until is not None and d1.until.done()
    d2 = c.admit(f2, lookup, 10.0)
    assert isinstance(d2, Delay) and d2.seconds == 10.0
    # The lost leader fails after all: the new flight goes on.
    c.on_result(leader, _failed(leader), 11.0)
    assert d2.until is not None and not d2.until.done()
    # ... or ends ok: whoever brings a result answers the waiting calls.
    c.on_result(leader, _ok(leader, "late"), 12.0)
    assert d2.until.done()
    hit = c.admit(f2, lookup, 12.0)
    assert isinstance(hit, Respond) and hit.result.output == "late"


def test_lost_flights_nobody_waits_for_are_let_go() -> None:
    c = cache(ttl=60, wait=10)
    for q in ("a", "b", "c"):
        c.admit(_call(q, q), lookup, 0.0)  # three leaders never heard of again
    assert len(c._flights) == 3
    c.admit(_call("d", "d"), lookup, 10.0)  # the next flight lets them go
    assert len(c._flights) == 1


def test_the_budget_of_a_flight_follows_the_calls_deadline() -> None:
    from toolbus.policies._signals import asking, done_asking

    c = cache(ttl=60)
    c.admit(_call("L"), lookup, 0.0)
    token = asking(None, None, 1000.0)  # type: ignore[arg-type]
    try:
        c.admit(_call("L2", "y"), lookup, 0.0)
    finally:
        done_asking(token)
    plain, long = c.admit(_call("f"), lookup, 0.0), c.admit(_call("f2", "y"), lookup, 0.0)
    assert isinstance(plain, Delay) and plain.seconds == 600.0  # no deadline: a long time
    assert isinstance(long, Delay) and long.seconds == 4000.0  # 4 deadlines


def test_a_cache_guards_read_only_tools_only() -> None:
    c = cache()
    assert c.applies_to(lookup) and not c.applies_to(bump)
    with pytest.raises(ValueError, match="read-only"):
        c.check(bump)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"ttl": 0}, ValueError),
        ({"ttl": float("inf")}, ValueError),
        ({"ttl": "60"}, TypeError),
        ({"maxsize": 0}, ValueError),
        ({"maxsize": True}, ValueError),
        ({"wait": -1}, ValueError),
        ({"wait": float("nan")}, ValueError),
    ],
)
def test_bad_settings_are_refused(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        cache(**options)


# -- through an executor ---------------------------------------------------------------


class _Counted:
    """A read-only tool that counts its runs and holds the first until `go` is set."""

    def __init__(self, policies: list[Any], fail_first: bool = False) -> None:
        self.runs = 0
        self.go = threading.Event()
        self.started = threading.Event()
        self.registry = ToolRegistry()
        self._lock = threading.Lock()

        @self.registry.tool(read_only=True, policies=policies)
        def lookup(q: str) -> str:
            with self._lock:
                self.runs += 1
                first = self.runs == 1
            if first:
                self.started.set()
                assert self.go.wait(10)
                if fail_first:
                    raise ToolError("the backend is down")
            return f"answer to {q}"


def _calls(n: int, q: str = "x") -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "name": "lookup", "arguments": {"q": q}} for i in range(n)]


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


def test_eight_identical_calls_at_once_run_once(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    c = cache(ttl=60)
    tool = _Counted([c])
    ex = make_executor(tool.registry)
    t, out = _in_thread(lambda: ex.execute_batch(_calls(8)))
    # Hold the leader until the other 7 are delayed for it (no slot, no thread).
    wait_until(lambda: c.waiting == 7, what="7 followers delayed")
    assert ex.stats().in_flight == 1
    tool.go.set()
    t.join(10)
    results = out[0].results
    assert tool.runs == 1
    assert {r.output for r in results} == {"answer to x"} and all(r.ok for r in results)
    # Whichever was asked first led (the batch's calls start in parallel).
    [leader] = [r for r in results if r.metadata == {"cache": "miss"}]
    followers = [r for r in results if r is not leader]
    assert leader.attempts == 1
    assert all(r.metadata == {"cache": "hit"} and r.attempts == 0 for r in followers)
    hits = recorder.wait_for(CACHE_HIT, 7, where=lambda e: e.shared)
    assert {e.call_id for e in hits} == {r.call_id for r in followers}
    # Later, from the cache: a plain hit, not shared.
    again = ex.execute({"id": "later", "name": "lookup", "arguments": {"q": "x"}})
    assert again.metadata == {"cache": "hit"} and tool.runs == 1
    assert recorder.wait_for(CACHE_HIT, where=lambda e: e.call_id == "later")[0].shared is False


def test_errors_are_not_cached_and_one_follower_runs_again(
    make_executor: MakeExecutor,
) -> None:
    c = cache(ttl=60)
    tool = _Counted([c], fail_first=True)
    ex = make_executor(tool.registry)
    t, out = _in_thread(lambda: ex.execute_batch(_calls(3)))
    wait_until(lambda: c.waiting == 2, what="2 followers delayed")
    tool.go.set()
    t.join(10)
    results = out[0].results
    [failed] = [r for r in results if not r.ok]
    assert failed.status == "error" and "cache" not in failed.metadata
    # One follower led the second try; the other hit its result.
    assert tool.runs == 2
    rest = [r for r in results if r.ok]
    assert sorted(r.metadata["cache"] for r in rest) == ["hit", "miss"]
    assert all(r.output == "answer to x" for r in rest)


def test_a_cancelled_leader_hands_over_to_one_follower(make_executor: MakeExecutor) -> None:
    c = cache(ttl=60)
    runs: list[str] = []
    started = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[c])
    async def lookup(q: str) -> str:
        runs.append(q)
        if len(runs) == 1:
            started.set()
            await asyncio.sleep(30)  # cancelled with its call
        return f"answer to {q}"

    ex = make_executor(reg)

    async def scenario() -> list[ToolResult]:
        calls = _calls(3)
        leader = asyncio.ensure_future(ex.aexecute(calls[0]))
        await asyncio.to_thread(started.wait, 10)
        followers = [asyncio.ensure_future(ex.aexecute(call)) for call in calls[1:]]
        await asyncio.to_thread(wait_until, lambda: c.waiting == 2)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        return list(await asyncio.gather(*followers))

    results = asyncio.run(scenario())
    assert len(runs) == 2  # the cancelled leader, and one follower after it
    assert sorted(r.metadata["cache"] for r in results) == ["hit", "miss"]


def test_a_leader_that_times_out_hands_over(make_executor: MakeExecutor) -> None:
    c = cache(ttl=60)
    runs: list[str] = []
    started = threading.Event()
    reg = ToolRegistry()

    # 2 s: the leader hangs until then; the follower that leads after it runs
    # under the same timeout and must end ok, which a busy machine may not
    # manage within 0.2 s.
    @reg.tool(read_only=True, timeout=2, policies=[c])
    async def lookup(q: str) -> str:
        runs.append(q)
        if len(runs) == 1:
            started.set()
            await asyncio.sleep(30)
        return f"answer to {q}"

    ex = make_executor(reg)
    t, out = _in_thread(lambda: ex.execute_batch(_calls(3)))
    t.join(60)
    results = out[0].results
    assert sorted(r.status for r in results) == ["ok", "ok", "timeout"]
    assert len(runs) == 2
    assert sorted(r.metadata["cache"] for r in results if r.ok) == ["hit", "miss"]


def _always_times_out(policies: list[Any]) -> tuple[ToolRegistry, list[float], list[float]]:
    """A tool that never answers before its timeout, and when each of
    its attempts started and was cancelled."""
    reg = ToolRegistry()
    starts: list[float] = []
    ends: list[float] = []

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT, policies=policies)
    async def lookup(q: str) -> str:
        starts.append(time.monotonic())
        try:
            await asyncio.sleep(30)
        finally:
            ends.append(time.monotonic())
        return q

    return reg, starts, ends


def test_while_the_tool_keeps_failing_identical_calls_run_one_after_another(
    make_executor: MakeExecutor,
) -> None:
    """Errors are not cached: each follower leads the next try once the one
    before failed. Never two at once; each ends with its own failure."""
    c = cache(ttl=60)
    reg, starts, ends = _always_times_out([c])
    ex = make_executor(reg)
    results = ex.execute_batch(_calls(4)).results
    assert [r.status for r in results] == ["timeout"] * 4
    # The last attempt's task may see its cancellation after its result is out.
    wait_until(lambda: len(ends) == 4, 10, "the last attempt's cancellation")
    assert len(starts) == 4
    # Each began after the one before was cancelled at its timeout (never two
    # at once). Not a gap in time: a busy machine starts a tool late on its
    # clock (a stress run saw 0.088 s between two starts, seed 3362918849).
    assert all(nxt >= end for end, nxt in zip(ends, starts[1:], strict=False)), (starts, ends)
    assert c.waiting == 0


def test_a_breaker_after_the_cache_stops_the_serial_retries(make_executor: MakeExecutor) -> None:
    """The remedy docs/policies.md gives: the followers that lead a new try
    meet the open breaker and end at once."""
    reg, starts, _ = _always_times_out([cache(ttl=60), circuit_breaker(failures=2)])
    ex = make_executor(reg)
    results = ex.execute_batch(_calls(5)).results
    assert len(starts) == 2
    assert sorted(r.error_code.value for r in results if r.error_code) == (
        ["CIRCUIT_OPEN"] * 3 + ["EXECUTION_TIMEOUT"] * 2
    )


class _HoldOnce(BasePolicy):
    """Delays the first call it is asked about until `go` is resolved."""

    name = "hold-once"

    def __init__(self) -> None:
        import concurrent.futures

        self.go: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.held = threading.Event()

    def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
        if not self.go.done():
            self.held.set()
            return Delay(60, "held", until=self.go)
        return Admit()


def test_a_leader_delayed_by_a_later_policy_still_answers_its_followers(
    make_executor: MakeExecutor,
) -> None:
    c, hold = cache(ttl=60), _HoldOnce()
    tool = _Counted([c, hold])
    tool.go.set()
    ex = make_executor(tool.registry)
    t, out = _in_thread(lambda: ex.execute_batch(_calls(4)))
    # The leader is admitted by the cache, then delayed by the next policy.
    assert hold.held.wait(10)
    wait_until(lambda: c.waiting == 3, what="3 followers delayed")
    hold.go.set_result(None)
    t.join(10)
    assert tool.runs == 1
    assert sorted(r.metadata["cache"] for r in out[0].results) == ["hit", "hit", "hit", "miss"]


user: contextvars.ContextVar[str] = contextvars.ContextVar("user", default="")


def test_injected_values_are_part_of_the_key(make_executor: MakeExecutor) -> None:
    c = cache(ttl=60)
    seen: list[str] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[c])
    def mine(q: str, who: Annotated[str, Injected]) -> str:
        seen.append(who)
        return f"{who}'s {q}"

    ex = make_executor(reg, inject={"who": lambda call: user.get()})
    outputs = []
    for name in ("ann", "bob", "ann"):
        user.set(name)
        outputs.append(ex.execute({"id": name, "name": "mine", "arguments": {"q": "notes"}}))
    assert seen == ["ann", "bob"]
    assert [r.output for r in outputs] == ["ann's notes", "bob's notes", "ann's notes"]
    assert outputs[2].metadata["cache"] == "hit"


class Session:
    """A per-request object, as an injected client or session is: not data."""

    def __init__(self, who: str, constant_repr: bool = False) -> None:
        self.who = who
        self.constant_repr = constant_repr

    def __repr__(self) -> str:
        return "Session()" if self.constant_repr else object.__repr__(self)


@dataclasses.dataclass(frozen=True)
class Account:
    who: str


@pytest.mark.parametrize("constant_repr", [False, True])
def test_an_injected_object_is_never_keyed_by_its_repr(
    make_executor: MakeExecutor, constant_repr: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # A default repr holds only the object's address, reused once the object
    # is freed; a custom one may show nothing of the user. Either would answer
    # one user's call with another's result: such calls are not cached.
    c = cache(ttl=60)
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[c])
    def profile(q: str, session: Annotated[object, Injected]) -> str:
        return f"{q} #{int(session.who[4:]) + 100}"  # type: ignore[attr-defined]

    ex = make_executor(reg, inject={"session": lambda call: Session(user.get(), constant_repr)})
    for i in range(20):
        user.set(f"user{i}")
        r = ex.execute(ToolCall(name="profile", arguments={"q": "inbox"}))
        assert r.output == f"inbox #{i + 100}"
        assert "cache" not in r.metadata
        gc.collect()  # frees the session: its address may be the next one's
    assert len(c) == 0
    assert "not cached" in caplog.text and "cache(key=" in caplog.text


def test_a_key_function_or_data_keys_injected_values(make_executor: MakeExecutor) -> None:
    by_key = cache(ttl=60, key=lambda call: [call.arguments["q"], call.arguments["session"].who])
    by_data = cache(ttl=60)
    reg = ToolRegistry()
    ran: list[str] = []

    @reg.tool(read_only=True, policies=[by_key])
    def profile(q: str, session: Annotated[object, Injected]) -> str:
        ran.append(session.who)  # type: ignore[attr-defined]
        return f"{session.who.upper()}'s {q}"  # type: ignore[attr-defined]

    @reg.tool(read_only=True, policies=[by_data])
    def account(q: str, acct: Annotated[Account, Injected]) -> str:
        ran.append(acct.who)
        return f"{acct.who.upper()}'s {q}"

    ex = make_executor(
        reg,
        inject={
            "session": lambda call: Session(user.get()),
            "acct": lambda call: Account(user.get()),
        },
    )
    for name in ("profile", "account"):
        ran.clear()
        outputs = []
        for who in ("ann", "bob", "ann", "bob"):
            user.set(who)
            outputs.append(ex.execute(ToolCall(name=name, arguments={"q": "notes"})))
        assert [r.output for r in outputs] == ["ANN's notes", "BOB's notes"] * 2
        assert [r.metadata["cache"] for r in outputs] == ["miss", "miss", "hit", "hit"]
        assert ran == ["ann", "bob"]


def test_a_cache_key_must_be_a_function() -> None:
    with pytest.raises(TypeError, match="key must be a function"):
        cache(key="user")  # type: ignore[arg-type]


def test_a_caller_editing_its_output_never_changes_the_cache(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[cache(ttl=60)])
    def orders(q: str) -> list[dict[str, int]]:
        return [{"id": 1, "total": 10}]

    ex = make_executor(reg)
    miss = ex.execute(_call("a", name="orders"))
    miss.output[0]["total"] = 999
    hit = ex.execute(_call("b", name="orders"))
    assert hit.metadata["cache"] == "hit" and hit.output == [{"id": 1, "total": 10}]
    hit.output.append("edited")
    assert ex.execute(_call("c", name="orders")).output == [{"id": 1, "total": 10}]
    # The policy itself (asked without an executor) hands out copies too.
    c = cache(ttl=60)
    first = _call("d")
    c.admit(first, lookup, 1.0)
    stored = c.on_result(first, _ok(first, {"n": [1]}), 1.0)
    assert stored is not None
    stored.output["n"].append(2)
    answer = c.admit(_call("e"), lookup, 2.0)
    assert isinstance(answer, Respond) and answer.result.output == {"n": [1]}
    answer.result.output["n"].append(3)
    again = c.admit(_call("f"), lookup, 3.0)
    assert isinstance(again, Respond) and again.result.output == {"n": [1]}


def test_a_cache_on_a_mutating_tool_is_refused_when_it_is_made() -> None:
    reg = ToolRegistry()
    with pytest.raises(ValueError, match="read-only"):

        @reg.tool(policies=[cache()])
        def send(to: str) -> str:
            return to

    assert "send" not in reg


def test_an_executor_cache_skips_mutating_tools(make_executor: MakeExecutor) -> None:
    runs = {"read": 0, "write": 0}
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def read(q: str) -> str:
        runs["read"] += 1
        return q

    @reg.tool
    def write(q: str) -> str:
        runs["write"] += 1
        return q

    ex = make_executor(reg, policies=[cache(ttl=60)])
    for i in range(2):
        for name in ("read", "write"):
            r = ex.execute({"id": f"{name}{i}", "name": name, "arguments": {"q": "x"}})
            assert r.ok
            assert r.metadata.get("cache") == (
                None if name == "write" else "miss" if i == 0 else "hit"
            )
    assert runs == {"read": 1, "write": 2}


def test_a_hit_takes_its_own_duration(make_executor: MakeExecutor) -> None:
    c = cache(ttl=60)
    gate = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[c])
    def slow(q: str) -> str:
        # A run far longer than a hit takes, even on a loaded machine (never
        # set: the wait is the point).
        gate.wait(1.0)
        return q

    ex = make_executor(reg)
    first = ex.execute({"id": "a", "name": "slow", "arguments": {"q": "x"}})
    hit = ex.execute({"id": "b", "name": "slow", "arguments": {"q": "x"}})
    assert isinstance(c, Cache)
    assert first.duration >= 1.0 and hit.duration < first.duration
    assert hit.call_id == "b" and hit.attempts == 0


@pytest.mark.parametrize("option", ["ttl", "wait"])
def test_an_option_past_a_floats_range_is_a_value_error_naming_it(option: str) -> None:
    with pytest.raises(ValueError, match=f"cache: {option} must be"):
        cache(**{option: 10**400})  # type: ignore[arg-type]
