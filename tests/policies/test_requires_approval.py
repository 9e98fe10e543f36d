"""`requires_approval(when=...)` fails closed: only `False` lets a call run
without an approval (issue 21, item 4).

`when` used to be read for its truthiness: `None`, `""`, `0` or `{}` (a
predicate that forgot to return, or returned a lookup) ran the call unapproved.
Now anything but `True` or `False`, from a sync or an async `when`, requires
approval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry
from toolbus.policies import Admit, RequireApproval, requires_approval

# What `when` may answer, by case id, that is not a bool: each requires approval.
NOT_BOOLS: dict[str, Any] = {
    "none": None,
    "str-False": "False",
    "str-empty": "",
    "str-no": "no",
    "int-0": 0,
    "int-1": 1,
    "float-0": 0.0,
    "dict-empty": {},
    "dict-needed-false": {"needed": False},
    "list-empty": [],
    "object": object(),
}
ANSWERS: dict[str, Any] = {**NOT_BOOLS, "True": True, "False": False}


def _when(call: ToolCall) -> Any:
    assert isinstance(call.arguments, dict)
    return ANSWERS[call.arguments["case"]]


async def _when_async(call: ToolCall) -> Any:
    await asyncio.sleep(0)
    return _when(call)


WHENS = {"sync-when": _when, "async-when": _when_async}


def _call(case: str) -> ToolCall:
    return ToolCall(id=f"c-{case}", name="deploy", arguments={"case": case})


# -- the policy alone ----------------------------------------------------------------


@pytest.mark.parametrize("how", list(WHENS))
@pytest.mark.parametrize("case", list(ANSWERS))
def test_only_false_admits_without_approval(how: str, case: str) -> None:
    policy = requires_approval(WHENS[how], reason="it deploys")
    decision: Any = policy.admit(_call(case), None, 0.0)  # type: ignore[arg-type]
    if how == "async-when":
        decision = asyncio.run(decision)
    if case == "False":
        assert isinstance(decision, Admit)
    else:
        assert decision == RequireApproval("it deploys"), case


def test_a_non_bool_answer_is_logged_by_type(caplog: pytest.LogCaptureFixture) -> None:
    policy = requires_approval(lambda call: {"token": "sk-live-0123456789"})
    with caplog.at_level(logging.WARNING, logger="toolbus"):
        assert isinstance(policy.admit(_call("x"), None, 0.0), RequireApproval)  # type: ignore[arg-type]
    (message,) = [r.getMessage() for r in caplog.records if "requires_approval" in r.getMessage()]
    assert "returned dict, not True/False" in message and "sk-live" not in message


# -- through an executor -------------------------------------------------------------


@pytest.fixture(scope="module", params=list(WHENS))
def guarded(request: pytest.FixtureRequest) -> Iterator[tuple[Executor, list[str]]]:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval(WHENS[request.param], reason="it deploys")])
    def deploy(case: str) -> str:
        ran.append(case)
        return case

    with Executor(reg) as ex:
        yield ex, ran


@pytest.mark.parametrize("case", [*NOT_BOOLS, "True"])
def test_a_call_when_does_not_clear_is_deferred_until_approved(
    guarded: tuple[Executor, list[str]], case: str
) -> None:
    ex, ran = guarded
    call = _call(case)
    first = ex.execute(call)
    assert (first.status, first.error_code, first.attempts) == (
        "deferred",
        ErrorCode.APPROVAL_REQUIRED,
        0,
    )
    assert first.approval_request is not None and case not in ran
    done = ex.execute(call, approval=first.approval_request.approve())
    assert (done.status, done.output) == ("ok", case)


def test_a_call_when_clears_runs_unapproved(guarded: tuple[Executor, list[str]]) -> None:
    ex, ran = guarded
    r = ex.execute(_call("False"))
    assert (r.status, r.output) == ("ok", "False") and "False" in ran
