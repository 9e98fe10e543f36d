"""Authorization fails closed: only `True` admits a call (issue 21, item 4).

`authorize` used to admit whatever was truthy: `lambda call: "no"`,
`{"allowed": False}`, `"False"` and `0.0001` all ran the call. Now any answer
but `True`, from a sync or an async hook, given as `Executor(authorize=...)`
or as an `is_allowed` override, ends the call `rejected` (`TOOL_NOT_ALLOWED`)
with the type it got named in the error text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from toolbus import ErrorCode, Executor, RetryDecision, ToolCall, ToolRegistry


class _Truthy:
    def __bool__(self) -> bool:
        return True


class _Unanswerable:
    """Neither true nor false: `bool()` of it raises."""

    def __bool__(self) -> bool:
        raise ValueError("the truth value is ambiguous")


# Every answer that is not True, by case id: none of them may admit a call.
REFUSING: dict[str, Any] = {
    "none": None,
    "str-True": "True",
    "str-False": "False",
    "str-yes": "yes",
    "str-empty": "",
    "int-1": 1,
    "int-0": 0,
    "float-tiny": 0.0001,
    "float-0": 0.0,
    "dict-allowed-false": {"allowed": False},
    "dict-allowed-true": {"allowed": True},
    "dict-empty": {},
    "list-true": [True],
    "tuple-empty": (),
    "object": object(),
    "truthy-object": _Truthy(),
    "unanswerable-object": _Unanswerable(),
    "retry-decision": RetryDecision(True),
    "type-bool": bool,
}
ANSWERS: dict[str, Any] = {**REFUSING, "True": True, "False": False}
TOOLS = ["echo_sync", "echo_async"]  # hooks run on a worker thread / on the event loop


def _answer(call: ToolCall) -> Any:
    assert isinstance(call.arguments, dict)
    case = call.arguments["text"]
    if case == "raises":
        raise PermissionError("policy service down")
    return ANSWERS[case]


async def _answer_async(call: ToolCall) -> Any:
    await asyncio.sleep(0)
    return _answer(call)


class _SyncOverride(Executor):
    def is_allowed(self, call: ToolCall) -> Any:
        return _answer(call)


class _AsyncOverride(Executor):
    async def is_allowed(self, call: ToolCall) -> Any:  # type: ignore[override]
        return await _answer_async(call)


def _registry(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo_sync(text: str) -> str:
        ran.append(f"sync:{text}")
        return text

    @reg.tool(read_only=True)
    async def echo_async(text: str) -> str:
        await asyncio.sleep(0)
        ran.append(f"async:{text}")
        return text

    return reg


MAKERS: dict[str, Callable[[ToolRegistry], Executor]] = {
    "option-sync": lambda reg: Executor(reg, authorize=_answer),
    "option-async": lambda reg: Executor(reg, authorize=_answer_async),
    "override-sync": _SyncOverride,
    "override-async": _AsyncOverride,
}


@pytest.fixture(scope="module", params=list(MAKERS))
def authorized(request: pytest.FixtureRequest) -> Iterator[tuple[Executor, list[str]]]:
    """One executor per way of authorizing, shared by the module's cases."""
    ran: list[str] = []
    with MAKERS[request.param](_registry(ran)) as ex:
        yield ex, ran


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("case", list(REFUSING))
def test_an_answer_that_is_not_true_refuses_the_call(
    authorized: tuple[Executor, list[str]], case: str, tool: str
) -> None:
    ex, ran = authorized
    r = ex.execute(ToolCall(name=tool, arguments={"text": case}))
    assert (r.status, r.error_code, r.attempts) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED, 0)
    kind = type(REFUSING[case]).__name__
    assert r.error == (
        f"Tool '{tool}' is not allowed: authorize returned {kind}, not True/False: "
        "the call is refused"
    )
    assert not [x for x in ran if x.endswith(f":{case}")], "the tool ran"


@pytest.mark.parametrize("tool", TOOLS)
def test_true_admits_and_false_keeps_its_message(
    authorized: tuple[Executor, list[str]], tool: str
) -> None:
    ex, ran = authorized
    ok = ex.execute(ToolCall(name=tool, arguments={"text": "True"}))
    assert (ok.status, ok.output) == ("ok", "True")
    no = ex.execute(ToolCall(name=tool, arguments={"text": "False"}))
    assert (no.status, no.error_code, no.error) == (
        "rejected",
        ErrorCode.TOOL_NOT_ALLOWED,
        f"Tool '{tool}' is not allowed",
    )
    assert f"{tool.removeprefix('echo_')}:True" in ran
    assert not [x for x in ran if x.endswith(":False")]


@pytest.mark.parametrize("tool", TOOLS)
def test_an_authorize_that_raises_still_refuses_with_its_error(
    authorized: tuple[Executor, list[str]], tool: str
) -> None:
    ex, ran = authorized
    r = ex.execute(ToolCall(name=tool, arguments={"text": "raises"}))
    assert (r.status, r.error_code, r.error) == (
        "rejected",
        ErrorCode.TOOL_NOT_ALLOWED,
        "PermissionError: policy service down",
    )
    assert not [x for x in ran if x.endswith(":raises")]


def test_a_batch_runs_only_the_calls_authorize_said_true_to(
    authorized: tuple[Executor, list[str]],
) -> None:
    ex, _ = authorized
    cases = ["True", "none", "str-True", "int-1", "False", "True"]
    batch = ex.execute_batch([ToolCall(name="echo_sync", arguments={"text": c}) for c in cases])
    assert [r.status for r in batch] == ["ok", *["rejected"] * 4, "ok"]
    assert {r.error_code for r in batch if r.status == "rejected"} == {ErrorCode.TOOL_NOT_ALLOWED}


def test_the_refusal_is_logged_naming_the_type_only(caplog: pytest.LogCaptureFixture) -> None:
    """A non-bool answer is a bug in the application: it is logged, by type,
    never by value (the value may hold anything, a secret among it)."""
    secret = {"allowed": False, "token": "sk-live-0123456789"}
    with Executor(_registry([]), authorize=lambda call: secret) as ex:
        with caplog.at_level(logging.WARNING, logger="toolbus"):
            r = ex.execute(ToolCall(name="echo_sync", arguments={"text": "x"}))
    assert r.status == "rejected" and "sk-live" not in (r.error or "")
    logged = [
        rec.getMessage() for rec in caplog.records if "authorize returned" in rec.getMessage()
    ]
    assert logged and "dict" in logged[0] and "sk-live" not in logged[0]
