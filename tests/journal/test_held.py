"""The requests a journal holds for a decision (`toolbus/journal/_held.py`),
for calls whose ids the journal's UTF-8 cannot hold as they are."""

from __future__ import annotations

from pathlib import Path

from toolbus import Executor, Journal, ToolCall, ToolRegistry
from toolbus.policies import requires_approval


def test_a_request_whose_call_id_holds_a_lone_surrogate_is_held_and_released(
    tmp_path: Path,
) -> None:
    # A model's JSON "\udc80" decodes to a lone surrogate. The request was
    # never written to the journal (another process on it never saw it), and
    # once approved and run it was still listed as waiting.
    path = tmp_path / "journal.sqlite"
    ran: list[int] = []
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def refund(amount: int) -> str:
        ran.append(amount)
        return f"refunded {amount}"

    call = ToolCall(id="odd\udc80id", name="refund", arguments={"amount": 5})
    with Executor(reg, journal=path) as ex:
        asked = ex.execute(call)
        assert asked.status == "deferred" and asked.approval_request is not None
        with Journal(path) as elsewhere:  # as another process on the journal
            (held,) = elsewhere.pending()
            assert (held.call_id, held.digest) == (call.id, asked.approval_request.digest)
            decision = elsewhere.approve(held)
        assert ex.execute(call, approval=decision).output == "refunded 5"
        assert ex.pending() == []
    with Journal(path) as after:
        assert after.pending() == []
    assert ran == [5]


def test_a_request_asked_in_an_agent_run_whose_name_holds_a_lone_surrogate_is_held(
    tmp_path: Path,
) -> None:
    # (A DBOS workflow's id names its agent run: `dbos:<workflow id>`.)
    path = tmp_path / "journal.sqlite"
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    with Executor(reg, journal=path) as ex:
        asked = ex.execute(
            ToolCall(id="c1", name="refund", arguments={"amount": 5}), agent_run="run\udc80-1"
        )
        assert asked.status == "deferred"
        with Journal(path) as elsewhere:
            assert [r.call_id for r in elsewhere.pending()] == ["c1"]
