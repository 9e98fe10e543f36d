"""Decisions beyond yes and no: each kind, what forging one gets, single use
and expiry (under concurrency too), and pending approvals kept by a journal
across a restart and decided from another process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor, at_once
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, bus
from toolbus.approvals import ApprovalDecision, ApprovalRequest
from toolbus.policies import requires_approval

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-live-5e6f7a8b9c0d1e2f3a4b"


def registry(ran: list[dict[str, Any]]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def transfer(amount: int, to: str, api_key: str = "") -> str:
        ran.append({"amount": amount, "to": to})
        return f"sent {amount} to {to}"

    @reg.tool(policies=[requires_approval()])
    def quote(item: str) -> int:
        ran.append({"item": item})
        return 42

    return reg


CALL = ToolCall(id="t1", name="transfer", arguments={"amount": 500, "to": "bob", "api_key": SECRET})


def ask(ex: Executor, call: ToolCall = CALL) -> ApprovalRequest:
    r = ex.execute(call)
    assert r.status == "deferred" and r.approval_request is not None
    return r.approval_request


def test_each_kind_of_decision(make_executor: MakeExecutor, recorder: bus.Recorder) -> None:
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran))
    request = ask(ex)
    approve = ex.approve(request, decided_by="ada")
    assert (approve.kind, approve.decided_by) == ("approve", "ada")
    assert approve.decided_at is not None and approve.mac is not None
    assert ex.execute(CALL, approval=approve).output == "sent 500 to bob"
    edited = {"amount": 50, "to": "bob", "api_key": SECRET}
    edit = ex.approve(request, arguments=edited, decided_by="ada")
    assert edit.kind == "edit"
    assert ex.execute(CALL, approval=edit).output == "sent 50 to bob"
    deny = ex.deny(request, "not this month", decided_by="bo")
    r = ex.execute(CALL, approval=deny)
    assert (r.status, r.error_code, r.error) == (
        "rejected",
        ErrorCode.TOOL_NOT_ALLOWED,
        "Tool 'transfer' was not approved: not this month",
    )
    answer = ex.answer(request, "sent by hand", decided_by="bo")
    r = ex.execute(CALL, approval=answer)
    assert (r.status, r.output, r.attempts) == ("ok", "sent by hand", 0)
    assert r.metadata == {"decision": "answer", "decided_by": "bo"}
    assert ran == [{"amount": 500, "to": "bob"}, {"amount": 50, "to": "bob"}]
    # The plain ones of the request itself still work, with who decided.
    plain = request.approve(decided_by="cy")
    assert (plain.decided_by, plain.mac) == ("cy", None)
    assert ex.execute(CALL, approval=plain).ok
    # The edit is published masked, as any call's arguments are.
    ex.drain_events()
    executing = [e for name, e in recorder.events if name == bus.EXECUTING]
    assert [e.arguments["amount"] for e in executing] == [500, 50, 500]
    assert SECRET not in repr(recorder.events)


def test_forged_and_foreign_decisions_are_refused(make_executor: MakeExecutor) -> None:
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran))
    request = ask(ex)
    plain = request.approve()
    forgeries = [
        plain.model_copy(update={"arguments": {"amount": 99999, "to": "eve"}}),
        plain.model_copy(update={"answered": True, "output": "done"}),
        # A genuine edit altered: its MAC no longer matches.
        ex.approve(request, arguments={"amount": 5, "to": "bob"}).model_copy(
            update={"arguments": {"amount": 99999, "to": "eve"}}
        ),
        # Expiry or single use stripped from a genuine one.
        ex.approve(request, single_use=True).model_copy(update={"single_use": False}),
        ex.approve(request, expires_in=60).model_copy(update={"expires_at": None}),
    ]
    for forged in forgeries:
        r = ex.execute(CALL, approval=forged)
        assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED), forged
        assert "not made by this executor" in (r.error or "")
    # Another executor's (another secret): it does not even name this call.
    other = make_executor(registry([]))
    foreign = other.approve(ask(other), arguments={"amount": 1, "to": "eve"})
    assert ex.execute(CALL, approval=foreign).status == "deferred"
    assert ran == []


def test_an_edit_is_admitted_again(make_executor: MakeExecutor) -> None:
    """Validated (a bad edit ends INVALID_ARGUMENTS) and authorized again
    (the authorizer sees the edited call), unrun when refused."""
    ran: list[dict[str, Any]] = []
    seen: list[Any] = []

    def authorize(call: ToolCall) -> bool:
        seen.append(call.arguments.get("to"))
        return call.arguments.get("to") != "eve"

    ex = make_executor(registry(ran), authorize=authorize)
    request = ask(ex)
    bad = ex.execute(CALL, approval=ex.approve(request, arguments={"amount": "lots", "to": "bob"}))
    assert (bad.status, bad.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    eve = ex.execute(CALL, approval=ex.approve(request, arguments={"amount": 5, "to": "eve"}))
    assert (eve.status, eve.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert seen[-1] == "eve" and ran == []


def test_an_answer_must_fit_the_output_schema(make_executor: MakeExecutor) -> None:
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran))
    call = ToolCall(id="q", name="quote", arguments={"item": "tea"})
    request = ask(ex, call)
    r = ex.execute(call, approval=ex.answer(request, "cheap"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    assert "should be of type integer" in (r.error or "")
    assert ex.execute(call, approval=ex.answer(request, 7)).output == 7
    assert ran == []


def test_single_use_and_expiry(make_executor: MakeExecutor) -> None:
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran))
    request = ask(ex)
    once = ex.approve(request, single_use=True)
    assert ex.execute(CALL, approval=once).ok
    again = ex.execute(CALL, approval=once)
    assert (again.status, again.error_code) == ("rejected", ErrorCode.DECISION_EXPIRED)
    assert "already used" in (again.error or "")
    # Expired: minted with a lifetime already over (the clock passing is the claim).
    late = ex.approve(request, expires_in=1e-9)
    r = ex.execute(CALL, approval=late)
    assert (r.error_code, r.error) == (
        ErrorCode.DECISION_EXPIRED,
        "Tool 'transfer' was not run: its approval expired; ask for a new one",
    )
    assert len(ran) == 1
    with pytest.raises(ValueError, match="expires_in"):
        ex.approve(request, expires_in=0)
    with pytest.raises(TypeError, match="arguments must be a dict"):
        ex.approve(request, arguments=[1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output must be JSON"):
        ex.answer(request, object())


def test_a_single_use_decision_runs_once_from_sixteen_threads(make_executor: MakeExecutor) -> None:
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran), max_parallel=16)
    once = ex.approve(ask(ex), single_use=True)
    results = at_once(16, lambda _: ex.execute(CALL, approval=once))
    assert sorted(r.status for r in results) == ["ok"] + ["rejected"] * 15
    assert {r.error_code for r in results if not r.ok} == {ErrorCode.DECISION_EXPIRED}
    assert len(ran) == 1


def test_pending_approvals_outlive_a_restart_and_are_decided_elsewhere(tmp_path: Path) -> None:
    """A call deferred before a restart is listed after it; another process
    holding the journal lists it too and mints an edit under the journal's
    secret, which the restarted executor takes, once."""
    path = tmp_path / "journal.sqlite"
    ran: list[dict[str, Any]] = []
    with Executor(registry(ran), journal=path) as ex:
        ask(ex)
        assert [r.call_id for r in ex.pending()] == ["t1"]
    code = textwrap.dedent(
        f"""
        from toolbus import Journal
        with Journal({str(path)!r}) as journal:
            [request] = journal.pending()
            assert request.arguments_masked["api_key"] != {SECRET!r}
            edit = {{"amount": 50, "to": "bob"}}
            decision = journal.approve(request, arguments=edit, decided_by="ops", single_use=True)
            print(decision.model_dump_json())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    decision = ApprovalDecision.model_validate_json(out.stdout.strip())
    with Executor(registry(ran), journal=path) as ex:
        assert [r.call_id for r in ex.pending()] == ["t1"]
        assert ex.execute(CALL, approval=decision).output == "sent 50 to bob"
        assert ex.pending() == []
        # Again: the journal answers with what that call did (the decision is
        # spent when a call runs, and this one does not run again).
        again = ex.execute(CALL, approval=decision)
        assert (again.output, again.metadata.get("replayed")) == ("sent 50 to bob", True)
    # A third executor on the journal: the decision stays used for another call.
    with Executor(registry(ran), journal=path) as ex:
        call = CALL.model_copy(update={"id": "t2"})
        assert ex.execute(call, approval=decision).error_code is ErrorCode.DECISION_EXPIRED
    assert ran == [{"amount": 50, "to": "bob"}]


# -- found by the second review of issue 28 ----------------------------------------------


def test_a_subclass_saying_it_needs_no_mac_is_still_checked(make_executor: MakeExecutor) -> None:
    """A decision subclass overriding `must_be_minted` ran an unminted edit."""

    class Lenient(ApprovalDecision):
        @property
        def must_be_minted(self) -> bool:
            return False

    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran))
    request = ask(ex)
    forged = Lenient(digest=request.digest, approved=True, arguments={"amount": 9, "to": "eve"})
    r = ex.execute(CALL, approval=forged)
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED) and ran == []
    odd = ApprovalDecision.model_construct(
        digest=request.digest, approved=True, arguments={"x": object()}, mac="0" * 64
    )
    assert ex.execute(CALL, approval=odd).error_code is ErrorCode.TOOL_NOT_ALLOWED


def test_a_single_use_approval_is_spent_when_the_call_runs(make_executor: MakeExecutor) -> None:
    """It was spent when first judged: with an approval policy on the executor
    and one on the tool, its first use was refused as used."""
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran), policies=[requires_approval()])
    once = ex.approve(ask(ex), single_use=True)
    assert ex.execute(CALL, approval=once).ok
    assert ex.execute(CALL, approval=once).error_code is ErrorCode.DECISION_EXPIRED
    assert len(ran) == 1


def test_minting_refuses_what_would_do_nothing(make_executor: MakeExecutor) -> None:
    ex = make_executor(registry([]))
    request = ask(ex)
    from toolbus.approvals import InputRequest

    question = InputRequest(
        call_id="q", tool="transfer", digest="0" * 64, source="s", message="?", state=""
    )
    with pytest.raises(TypeError, match="accept/decline"):
        ex.approve(question)
    with pytest.raises(TypeError, match="decided_by"):
        ex.approve(request, decided_by=7)  # type: ignore[arg-type]


def test_a_free_text_tool_is_edited_with_text(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    got: list[str] = []

    @reg.tool(type="custom", policies=[requires_approval()])
    def run_sql(query: str) -> str:
        got.append(query)
        return "ran"

    ex = make_executor(reg)
    call = ToolCall(id="s", name="run_sql", arguments="DELETE FROM orders")
    request = ask(ex, call)
    assert ex.execute(call, approval=ex.approve(request, arguments="SELECT 1")).ok
    assert got == ["SELECT 1"]


def test_another_edit_is_another_operation_for_the_journal(tmp_path: Path) -> None:
    """With a journal, an edit of a call that already ran replayed the first result."""
    ran: list[dict[str, Any]] = []
    with Executor(registry(ran), journal=tmp_path / "j.sqlite") as ex:
        request = ask(ex)
        five = ex.approve(request, arguments={"amount": 5, "to": "bob"})
        seven = ex.approve(request, arguments={"amount": 7, "to": "carol"})
        assert ex.execute(CALL, approval=five).output == "sent 5 to bob"
        assert ex.execute(CALL, approval=seven).output == "sent 7 to carol"
        again = ex.execute(CALL, approval=five)
        assert again.metadata.get("replayed") is True
    assert ran == [{"amount": 5, "to": "bob"}, {"amount": 7, "to": "carol"}]


# -- found by the third review of issue 28 -----------------------------------------------


@pytest.mark.parametrize("single_use", [True, False])
def test_an_approval_that_expires_while_its_call_waits_does_not_run_it(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch, single_use: bool
) -> None:
    """Judged in time, then a later policy held the call past `expires_at`:
    the call ran anyway (and a single-use decision stayed unspent, so it could
    run twice)."""
    from toolbus.pipeline import _decisions
    from toolbus.policies import Admit, BasePolicy

    real = _decisions.time.time
    clock = {"ahead": 0.0}

    class Clock:
        @staticmethod
        def time() -> float:
            return real() + clock["ahead"]

    monkeypatch.setattr(_decisions, "time", Clock)

    class LongWait(BasePolicy):
        """Admits once the decision's lifetime is over (the clock moves on)."""

        def admit(self, call: ToolCall, tool: Any, now: float) -> Admit:
            clock["ahead"] += 120
            return Admit()

    ran: list[int] = []
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval(), LongWait()])
    def pay(amount: int) -> str:
        ran.append(amount)
        return "paid"

    ex = make_executor(reg)
    call = ToolCall(id="p", name="pay", arguments={"amount": 3})
    clock["ahead"] = -1e6  # asking: LongWait's move keeps the clock in the past
    once = ex.approve(ask(ex, call), single_use=single_use, expires_in=60)
    for _ in range(2):
        clock["ahead"] = 0.0
        r = ex.execute(call, approval=once)
        assert (r.status, r.error_code) == ("rejected", ErrorCode.DECISION_EXPIRED)
        assert "expired" in (r.error or "")
        # Its request waits for a new decision, as when it is judged expired.
        assert [p.call_id for p in ex.pending()] == ["p"]
    assert ran == []


def test_edits_under_a_callers_key_are_told_apart(tmp_path: Path) -> None:
    """With `idempotency_key` set, a second, other edit replayed the first's result."""
    ran: list[dict[str, Any]] = []
    call = CALL.model_copy(update={"idempotency_key": "order-17"})
    with Executor(registry(ran), journal=tmp_path / "j.sqlite") as ex:
        request = ask(ex, call)
        five = ex.approve(request, arguments={"amount": 5, "to": "bob"})
        seven = ex.approve(request, arguments={"amount": 7, "to": "carol"})
        assert ex.execute(call, approval=five).output == "sent 5 to bob"
        again = ex.execute(call, approval=five)
        assert (again.output, again.metadata.get("replayed")) == ("sent 5 to bob", True)
        other = ex.execute(call, approval=seven)
        assert other.status == "rejected" and "other arguments" in (other.error or ""), other
        fresh = call.model_copy(update={"idempotency_key": "order-18"})
        assert ex.execute(fresh, approval=seven).output == "sent 7 to carol"
    assert ran == [{"amount": 5, "to": "bob"}, {"amount": 7, "to": "carol"}]


@pytest.mark.parametrize("journal", [False, True])
def test_a_halted_runs_requests_wait_no_more(tmp_path: Path, journal: bool) -> None:
    """Halted, its calls answered HALTED, yet its requests stayed listed by
    `pending()` (and in the journal, across restarts)."""
    ran: list[dict[str, Any]] = []
    path = tmp_path / "j.sqlite"
    options: dict[str, Any] = {"journal": path} if journal else {}
    with Executor(registry(ran), **options) as ex:
        ask(ex, CALL)
        other = ToolCall(id="q1", name="quote", arguments={"item": "tea"})
        assert ex.execute(other, agent_run="r1").status == "deferred"
        assert ex.execute(CALL.model_copy(update={"id": "t2"}), agent_run="r2").status == (
            "deferred"
        )
        assert sorted(r.call_id for r in ex.pending()) == ["q1", "t1", "t2"]
        ex.halt("r1", "stopped by ops")
        assert sorted(r.call_id for r in ex.pending()) == ["t1", "t2"]
    if journal:
        with Executor(registry(ran), journal=path) as ex:
            assert sorted(r.call_id for r in ex.pending()) == ["t1", "t2"]


def test_a_halt_on_one_executor_leaves_anothers_requests(tmp_path: Path) -> None:
    """Two executors on one journal: a halt on one deleted the other's
    requests of a run of the same name (its external result then could
    never be delivered)."""
    path = tmp_path / "j.sqlite"
    with Executor(registry([]), journal=path) as a, Executor(registry([]), journal=path) as b:
        assert a.execute(CALL, agent_run="r").status == "deferred"
        b.halt("r", "ops")
        assert [p.call_id for p in a.pending()] == ["t1"]
        a.halt("r", "ops")
        assert a.pending() == [] and b.pending() == []


def test_a_call_that_halts_its_own_run_leaves_no_request(make_executor: MakeExecutor) -> None:
    """Deferred as its run was halted (the halt first): its request stayed listed."""
    from toolbus.policies import BasePolicy, RequireApproval

    ex: Executor

    class HaltsThenAsks(BasePolicy):
        def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
            ex.halt("r", "ops")
            return RequireApproval("asks anyway")

    reg = ToolRegistry()

    @reg.tool(policies=[HaltsThenAsks()])
    def pay(amount: int) -> str:
        return "paid"

    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="p", name="pay", arguments={"amount": 1}), agent_run="r")
    assert r.status in ("deferred", "cancelled") and ex.pending() == []


def _transfer(call_id: str, amount: int = 500) -> ToolCall:
    return ToolCall(id=call_id, name="transfer", arguments={"amount": amount, "to": "bob"})


@pytest.fixture
def kept_three(monkeypatch: pytest.MonkeyPatch) -> int:
    """The most requests an executor without a journal holds, made 3 (10 000 as shipped)."""
    import toolbus.pipeline._held as held

    monkeypatch.setattr(held, "KEPT", 3)
    return 3


def test_a_call_that_cannot_be_held_ends_overloaded_and_none_is_dropped(
    make_executor: MakeExecutor, kept_three: int
) -> None:
    """Without a journal, past the most requests an executor holds, the oldest
    undecided one was dropped from `pending()` in silence: its call stayed
    deferred for ever, with nobody shown the question. Now each request stays
    until decided, and a call that would wait beyond them ends `rejected`,
    `OVERLOADED`, saying so: every call still ends once, and says how."""
    ran: list[dict[str, Any]] = []
    ex = make_executor(registry(ran))
    requests = [ask(ex, _transfer(i)) for i in ("a", "b", "c")]
    r = ex.execute(_transfer("d"))
    assert (r.status, r.error_code, r.approval_request) == ("rejected", ErrorCode.OVERLOADED, None)
    assert r.error == (
        "Tool 'transfer' cannot wait for a decision: 3 requests already wait for one on this "
        "executor, the most it holds without a journal (decide some of executor.pending(), "
        "or give the executor a journal). It needs one: Tool 'transfer' needs approval "
        "before it runs"
    )
    assert [p.call_id for p in ex.pending()] == ["a", "b", "c"]
    # Asked again, a call that waits already waits on (it takes no more room).
    assert ex.execute(_transfer("b")).status == "deferred"
    assert [p.call_id for p in ex.pending()] == ["a", "c", "b"]
    # A decision makes room; another call then waits.
    assert ex.execute(_transfer("a"), approval=requests[0].approve()).ok
    assert ask(ex, _transfer("d")).call_id == "d"
    assert [p.call_id for p in ex.pending()] == ["c", "b", "d"]
    assert ran == [{"amount": 500, "to": "bob"}]


def test_requests_the_journal_could_not_store_are_never_let_go(
    tmp_path: Path, kept_three: int
) -> None:
    """With a journal, copies held in memory past the limit are let go (the
    journal lists them); a request whose write failed is held here alone,
    and is never let go, not even the one just asked (review helper-162)."""
    with Executor(registry([]), journal=tmp_path / "journal.sqlite") as ex:
        store = ex._services.pending.store
        assert store is not None

        def unreachable(*_: Any, **__: Any) -> None:
            raise OSError("journal unreachable")

        store.hold_request = unreachable  # type: ignore[method-assign]
        ids = [f"c{i}" for i in range(6)]
        assert [ex.execute(_transfer(i)).status for i in ids] == ["deferred"] * 6
        assert sorted(p.call_id for p in ex.pending()) == ids


def test_calls_racing_for_the_last_room_hold_exactly_the_limit(
    make_executor: MakeExecutor, kept_three: int
) -> None:
    ex = make_executor(registry([]), max_parallel=8)
    ask(ex, _transfer("first"))
    results = at_once(8, lambda i: ex.execute(_transfer(f"r{i}", amount=i)))
    deferred = sorted(r.call_id for r in results if r.status == "deferred")
    refused = [r for r in results if r.status != "deferred"]
    assert len(deferred) == 2 and len(refused) == 6
    assert {(r.status, r.error_code) for r in refused} == {("rejected", ErrorCode.OVERLOADED)}
    assert sorted(p.call_id for p in ex.pending()) == sorted(["first", *deferred])


def test_with_a_journal_every_request_is_held_past_the_limit(
    tmp_path: Path, kept_three: int
) -> None:
    """A journal holds them all (the executor's own copies are a cache of the
    newest): no call is refused for room, and each is listed until decided."""
    ran: list[dict[str, Any]] = []
    with Executor(registry(ran), journal=tmp_path / "j.sqlite") as ex:
        requests = [ask(ex, _transfer(f"j{i}")) for i in range(5)]
        assert [p.call_id for p in ex.pending()] == [f"j{i}" for i in range(5)]
        for i, request in enumerate(requests):
            assert ex.execute(_transfer(f"j{i}"), approval=ex.approve(request)).ok
        assert ex.pending() == [] and len(ran) == 5
