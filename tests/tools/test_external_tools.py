"""External tools (`@tool(external=True)`): never run by toolbus; the call ends
`deferred` with an `ExternalRequest`, its result supplied later, each
submission with exactly one `tool:finished`, in the same process and after a
restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor, at_once
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, bus
from toolbus.approvals import ExternalRequest

SECRET = "sk-live-0a1b2c3d4e5f6a7b8c9d"


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(external=True)
    def ask_manager(question: str, api_key: str = "") -> int:
        """Ask the manager for a discount, in percent."""
        raise AssertionError("an external tool is never run")

    return reg


def ask(ex: Executor, call_id: str = "m1", question: str = "discount?") -> ExternalRequest:
    r = ex.execute(
        ToolCall(
            id=call_id, name="ask_manager", arguments={"question": question, "api_key": SECRET}
        )
    )
    assert (r.status, r.error_code) == ("deferred", ErrorCode.INPUT_REQUIRED)
    assert r.error == (
        "Tool 'ask_manager' is answered outside toolbus: its result has not been supplied yet"
    )
    assert isinstance(r.approval_request, ExternalRequest)
    return r.approval_request


def test_completed_later_once(make_executor: MakeExecutor, recorder: bus.Recorder) -> None:
    ex = make_executor(registry())
    request = ask(ex)
    assert request.arguments_masked == {"question": "discount?", "api_key": "***"}
    assert ex.pending() == [request]
    wrong = ex.complete(request, "a lot")
    assert (wrong.status, wrong.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    assert "does not fit its output schema (should be of type integer)" in (wrong.error or "")
    assert ex.pending() == [request]  # still waiting
    done = ex.complete(request, 15, decided_by="manager")
    assert (done.status, done.output, done.attempts, done.call_id) == ("ok", 15, 0, "m1")
    assert done.metadata == {"external": True, "decided_by": "manager"}
    assert ex.pending() == []
    again = ex.complete(request, 20)
    assert (again.status, again.error_code) == ("rejected", ErrorCode.DECISION_EXPIRED)
    ex.drain_events()
    finished = [e.result for name, e in recorder.events if name == bus.FINISHED]
    assert [r.status for r in finished] == ["deferred", "rejected", "ok", "rejected"]
    assert SECRET not in repr(recorder.events)


@pytest.mark.parametrize(
    "forge",
    [
        lambda r: r.model_copy(update={"mac": "0" * 64}),
        lambda r: r.model_copy(update={"call_id": "other"}),
        lambda r: "not a request",
    ],
)
def test_a_forged_request_completes_nothing(make_executor: MakeExecutor, forge: Any) -> None:
    ex = make_executor(registry())
    request = ask(ex)
    r = ex.complete(forge(request), 15)
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert ex.pending() == [request]


def test_answered_or_denied_when_submitted_again(make_executor: MakeExecutor) -> None:
    ex = make_executor(registry())
    call = ToolCall(id="m2", name="ask_manager", arguments={"question": "q", "api_key": SECRET})
    request = ask(ex, "m2", "q")
    assert ex.execute(call, approval=request.approve()).status == "deferred"  # still waiting
    denied = ex.execute(call, approval=ex.deny(request, "not now"))
    assert (denied.status, denied.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    answered = ex.execute(call, approval=ex.answer(request, 10))
    assert (answered.status, answered.output) == ("ok", 10)


def test_pending_after_a_restart_and_completed_there(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    with Executor(registry(), journal=path) as ex:
        request = ask(ex)
    with Executor(registry(), journal=path) as ex:
        [held] = ex.pending()
        assert held == request
        assert ex.complete(held, 12).output == 12
        assert ex.pending() == []
    with Executor(registry(), journal=path) as ex:
        assert ex.complete(request, 12).error_code is ErrorCode.DECISION_EXPIRED


def test_external_is_checked_at_registration() -> None:
    with pytest.raises(TypeError, match="external must be True or False"):
        ToolRegistry().tool(name="t", external="yes")(lambda: 1)  # type: ignore[call-overload]


# -- found by the second review of issue 28 ----------------------------------------------


@pytest.mark.parametrize("journal", [False, True])
def test_completed_once_from_sixteen_threads(tmp_path: Path, journal: bool) -> None:

    options: dict[str, Any] = {"journal": tmp_path / "j.sqlite"} if journal else {}
    with Executor(registry(), **options) as ex:
        request = ask(ex)
        results = at_once(16, lambda _: ex.complete(request, 15))
    assert sorted(r.status for r in results) == ["ok"] + ["rejected"] * 15
    assert {r.error_code for r in results if not r.ok} == {ErrorCode.DECISION_EXPIRED}


def test_complete_never_raises_and_keeps_the_request_when_refused(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(registry())
    request = ask(ex)
    odd = ex.complete(request, {"when": object()})
    assert odd.error_code is ErrorCode.INVALID_ARGUMENTS and ex.pending() == [request]
    constructed = ExternalRequest.model_construct(call_id=None, tool=None, digest=None, mac=None)
    assert ex.complete(constructed, 1).error_code is ErrorCode.TOOL_NOT_ALLOWED
    assert ex.complete(request, 1, decided_by=5).error_code is ErrorCode.INVALID_ARGUMENTS  # type: ignore[arg-type]
    altered = request.model_copy(update={"arguments_masked": {"question": "other"}})
    assert ex.complete(altered, 1).error_code is ErrorCode.TOOL_NOT_ALLOWED
    assert ex.complete(request, 15).ok
    ex.close()
    assert ex.complete(request, 15).status == "cancelled"  # (the executor is closed)


def test_two_calls_with_the_same_arguments_wait_apart(make_executor: MakeExecutor) -> None:
    ex = make_executor(registry())
    alice, bob = ask(ex, "alice-1"), ask(ex, "bob-7")
    assert [r.call_id for r in ex.pending()] == ["alice-1", "bob-7"]
    assert ex.complete(alice, 10).ok
    assert [r.call_id for r in ex.pending()] == ["bob-7"]
    assert ex.complete(bob, 5).ok


def test_an_external_tool_that_needs_approval_is_answered(make_executor: MakeExecutor) -> None:
    from toolbus.policies import requires_approval

    reg = ToolRegistry()

    @reg.tool(external=True, policies=[requires_approval()])
    def refund_by_hand(order: str) -> str:
        """A person refunds an order."""
        raise AssertionError("never run")

    ex = make_executor(reg)
    call = ToolCall(id="r", name="refund_by_hand", arguments={"order": "7"})
    approval = ex.execute(call).approval_request
    assert approval is not None
    waiting = ex.execute(call, approval=approval.approve())
    assert isinstance(waiting.approval_request, ExternalRequest)
    done = ex.execute(call, approval=ex.answer(waiting.approval_request, "refunded"))
    assert (done.status, done.output) == ("ok", "refunded")


# -- found by the third review of issue 28 -----------------------------------------------


class Faults:
    """Makes the journal's pending-request and decision writes fail while on."""

    def __init__(self, ex: Executor, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        store = ex._services.pending.store
        assert store is not None
        record = ex._services.used_decisions.record
        assert record is not None
        for name in ("hold_request", "release_request", "claim_unheld"):
            monkeypatch.setattr(store, name, self.faulty(getattr(store, name)))
        monkeypatch.setattr(ex._services.used_decisions, "record", self.faulty(record))

    def faulty(self, write: Any) -> Any:
        def written(*args: Any) -> Any:
            if self.on:
                raise OSError("disk I/O error")
            return write(*args)

        return written


def test_a_request_the_journal_failed_to_hold_is_completed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Executor(registry(), journal=tmp_path / "j.sqlite") as ex:
        faults = Faults(ex, monkeypatch)
        faults.on = True
        request = ask(ex)
        faults.on = False
        assert ex.pending() == [request]  # listed beside the journal's
        assert ex.complete(request, 12).output == 12
        assert ex.pending() == []
        assert ex.complete(request, 12).error_code is ErrorCode.DECISION_EXPIRED


def test_a_journal_that_cannot_say_is_not_told_as_a_used_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing journal read as "completed already" (DECISION_EXPIRED), and
    the request was lost from memory."""
    with Executor(registry(), journal=tmp_path / "j.sqlite") as ex:
        faults = Faults(ex, monkeypatch)
        request = ask(ex)
        faults.on = True
        r = ex.complete(request, 12)
        assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
        assert "try again" in (r.error or "")
        faults.on = False
        assert ex.pending() == [request]
        assert ex.complete(request, 12).output == 12


def test_a_single_use_decision_the_journal_cannot_record_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolbus.policies import requires_approval

    ran: list[int] = []
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def pay(amount: int) -> str:
        ran.append(amount)
        return "paid"

    call = ToolCall(id="p", name="pay", arguments={"amount": 3})
    with Executor(reg, journal=tmp_path / "j.sqlite") as ex:
        faults = Faults(ex, monkeypatch)
        asked = ex.execute(call)
        assert asked.approval_request is not None
        once = ex.approve(asked.approval_request, single_use=True)
        faults.on = True
        r = ex.execute(call, approval=once)
        assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE), r
        assert ran == []
        faults.on = False
        assert [p.call_id for p in ex.pending()] == ["p"]  # still waiting
        assert ex.execute(call, approval=once).ok and ran == [3]


@pytest.mark.parametrize("journal", [False, True])
def test_a_completion_the_closing_executor_drops_leaves_the_request_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: bool
) -> None:
    """Claimed, then the executor closed before the completion was submitted:
    the request was gone (from the journal too: after a restart it could
    never be completed), the output never delivered."""
    import threading

    from toolbus._executor._deciding import Completions
    from toolbus.pipeline._held import PendingRequests

    path = tmp_path / "j.sqlite"
    ex = Executor(registry(), **({"journal": path} if journal else {}))
    request = ask(ex)
    closing = threading.Event()
    wait, claim = Completions.wait, PendingRequests.claim

    def waited(self: Completions, timeout: float) -> bool:
        closing.set()  # close() has stopped every call and waits for completions
        return wait(self, timeout)

    def claim_then_close(self: PendingRequests, digest: str, call_id: str) -> bool | None:
        claimed = claim(self, digest, call_id)
        closer.start()
        assert closing.wait(60)
        return claimed

    closer = threading.Thread(target=ex.close)
    monkeypatch.setattr(Completions, "wait", waited)
    monkeypatch.setattr(PendingRequests, "claim", claim_then_close)
    r = ex.complete(request, 12)
    closer.join(60)
    assert r.status == "cancelled" and ex.closed
    monkeypatch.undo()
    if not journal:
        assert ex.pending() == [request]
        return
    with Executor(registry(), journal=path) as again:
        assert again.pending() == [request]
        assert again.complete(request, 12).output == 12


def test_a_request_held_again_only_here_is_still_completed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held in the journal, asked again while the journal failed: it was
    listed twice and completed twice (once here, once from the journal)."""
    with Executor(registry(), journal=tmp_path / "j.sqlite") as ex:
        faults = Faults(ex, monkeypatch)
        request = ask(ex)
        faults.on = True
        assert ask(ex) == request
        faults.on = False
        assert ex.pending() == [request]
        results = [ex.complete(request, n) for n in (1, 2, 3)]
        assert [r.status for r in results] == ["ok", "rejected", "rejected"]
        assert ex.pending() == []


def test_two_executors_complete_a_request_held_again_only_in_one_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-held in A's memory alone (its journal write failed), completed by
    B from the journal, then by A: both ended ok."""
    path = tmp_path / "j.sqlite"
    with Executor(registry(), journal=path) as a, Executor(registry(), journal=path) as b:
        faults = Faults(a, monkeypatch)
        request = ask(a)
        faults.on = True
        ask(a)
        faults.on = False
        assert b.complete(request, 1).ok
        assert a.complete(request, 2).error_code is ErrorCode.DECISION_EXPIRED
        # Failing again when A claims: unavailable, not completed, still waiting.
        again = ask(a, "m2")
        faults.on = True
        ask(a, "m2")
        r = a.complete(again, 3)
        assert r.error_code is ErrorCode.TOOL_UNAVAILABLE
        faults.on = False
        assert a.complete(again, 3).ok and b.complete(again, 4).status == "rejected"


def test_complete_given_an_object_that_raises_when_read_does_not_raise(
    make_executor: MakeExecutor,
) -> None:
    class Hostile:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(name)

    ex = make_executor(registry())
    r = ex.complete(Hostile(), 1)  # type: ignore[arg-type]
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)


def test_a_call_asked_again_after_it_was_completed_is_completed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completed, asked again while the journal failed: listed, yet its
    completion found the earlier asking's mark and refused it."""
    with Executor(registry(), journal=tmp_path / "j.sqlite") as ex:
        faults = Faults(ex, monkeypatch)
        first = ask(ex)
        assert ex.complete(first, 1).ok
        faults.on = True
        again = ask(ex)
        faults.on = False
        assert ex.pending() == [again]
        assert ex.complete(again, 2).output == 2
        assert ex.complete(again, 3).error_code is ErrorCode.DECISION_EXPIRED


def test_a_halt_after_a_failed_completion_still_drops_the_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Executor(registry(), journal=tmp_path / "j.sqlite") as ex:
        faults = Faults(ex, monkeypatch)
        r = ex.execute(
            ToolCall(id="m1", name="ask_manager", arguments={"question": "q"}), agent_run="r"
        )
        assert r.approval_request is not None
        faults.on = True
        assert ex.complete(r.approval_request, 1).error_code is ErrorCode.TOOL_UNAVAILABLE
        faults.on = False
        ex.halt("r", "ops")
        assert ex.pending() == []


def test_complete_given_arguments_no_call_carries_does_not_raise(
    make_executor: MakeExecutor,
) -> None:
    class Keyless(dict[str, Any]):
        def keys(self) -> Any:
            raise RuntimeError("keys")

    ex = make_executor(registry())
    odd = ExternalRequest.model_construct(
        call_id="m1", tool="ask_manager", arguments_masked={1: "x"}, digest="d", mac="m"
    )
    assert ex.complete(odd, 1).error_code is ErrorCode.TOOL_NOT_ALLOWED
    keyless = ExternalRequest.model_construct(
        call_id="m1", tool="ask_manager", arguments_masked=Keyless(a=1), digest="d", mac="m"
    )
    assert ex.complete(keyless, 1).error_code is ErrorCode.TOOL_NOT_ALLOWED


def test_a_run_halted_while_its_request_is_written_leaves_nothing_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j.sqlite"
    with Executor(registry(), journal=path) as ex:
        store = ex._services.pending.store
        assert store is not None
        write = store.hold_request

        def halted_meanwhile(request: Any, agent_run: str | None = None) -> None:
            ex.halt("r", "ops")  # (its release reaches the journal first)
            write(request, agent_run)

        monkeypatch.setattr(store, "hold_request", halted_meanwhile)
        call = ToolCall(id="m1", name="ask_manager", arguments={"question": "q"})
        ex.execute(call, agent_run="r")
        assert ex.pending() == []
    with Executor(registry(), journal=path) as ex:
        assert ex.pending() == []


def test_a_result_too_deep_to_check_against_a_recursive_output_schema_is_refused(
    make_executor: MakeExecutor,
) -> None:
    """jsonschema checks by recursion: a result nesting ~240 levels against an
    output schema that refers to itself raised RecursionError out of `complete`."""
    reg = ToolRegistry()

    @reg.tool(external=True)
    def tree() -> dict[str, Any]:
        """A tree, built elsewhere."""
        raise AssertionError("an external tool is never run")

    reg.get("tree").output_schema = {  # type: ignore[union-attr]
        "$ref": "#/$defs/N",
        "$defs": {"N": {"type": "object", "properties": {"c": {"$ref": "#/$defs/N"}}}},
    }
    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="t1", name="tree", arguments={}))
    assert isinstance(r.approval_request, ExternalRequest)
    value: dict[str, Any] = {}
    for _ in range(240):
        value = {"c": value}
    refused = ex.complete(r.approval_request, value)
    assert (refused.status, refused.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    assert refused.error == (
        "Tool 'tree' was not completed: the result does not fit its output schema "
        "(it nests too deeply to be checked against the schema)"
    )
    assert ex.complete(r.approval_request, {"c": {"c": {}}}).status == "ok"


def test_an_external_call_beyond_the_held_requests_ends_overloaded(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a journal, a request past the most an executor holds was
    dropped in silence, the oldest first: its completion then ended
    DECISION_EXPIRED ("completed or answered already"), though nobody had."""
    import toolbus.pipeline._held as held

    monkeypatch.setattr(held, "KEPT", 1)
    ex = make_executor(registry())
    first = ask(ex, "m1")
    r = ex.execute(ToolCall(id="m2", name="ask_manager", arguments={"question": "more?"}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.OVERLOADED)
    assert (r.error or "").startswith(
        "Tool 'ask_manager' cannot wait for a decision: 1 requests already wait for one"
    )
    assert ex.pending() == [first]
    assert ex.complete(first, 15).output == 15
    assert ask(ex, "m2", "more?").call_id == "m2"
