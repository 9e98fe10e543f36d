"""Async hooks: options and subclass overrides alike, awaited with the caller's contextvars."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from tests.conftest import HANG_TIMEOUT, MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, ToolResult, bus

tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo_sync(text: str, tag: str = "") -> str:
        return f"{text}|{tag}"

    @reg.tool(read_only=True)
    async def echo_async(text: str, tag: str = "") -> str:
        await asyncio.sleep(0)
        return f"{text}|{tag}"

    return reg


TOOLS = ["echo_sync", "echo_async"]


async def _inject(call: ToolCall) -> ToolCall:
    await asyncio.sleep(0)
    args = dict(call.arguments) if isinstance(call.arguments, dict) else {}
    return call.model_copy(update={"arguments": {**args, "tag": f"tok-{tenant.get()}"}})


async def _upper(call: ToolCall, result: ToolResult) -> ToolResult:
    await asyncio.sleep(0)
    return result.model_copy(update={"output": str(result.output).upper()})


@pytest.mark.parametrize("name", TOOLS)
def test_async_pre_and_post_call_hooks_are_awaited(make_executor: MakeExecutor, name: str) -> None:
    ex = make_executor(_registry(), pre_call=[_inject], post_call=[_upper])
    token = tenant.set("acme")
    try:
        r = ex.execute(ToolCall(name=name, arguments={"text": "hi"}))
    finally:
        tenant.reset(token)
    assert (r.status, r.output) == ("ok", "HI|TOK-ACME")


@pytest.mark.parametrize("name", TOOLS)
def test_sync_and_async_hooks_chain_in_order(make_executor: MakeExecutor, name: str) -> None:
    def tag(call: ToolCall) -> ToolCall:
        args = dict(call.arguments) if isinstance(call.arguments, dict) else {}
        return call.model_copy(update={"arguments": {**args, "text": args["text"] + "+sync"}})

    ex = make_executor(_registry(), pre_call=[tag, _inject, tag])
    r = ex.execute(ToolCall(name=name, arguments={"text": "a"}))
    assert r.output == "a+sync+sync|tok-none"


@pytest.mark.parametrize("name", TOOLS)
@pytest.mark.parametrize("verdict", [False, None, 0])
def test_an_async_authorize_that_says_no_rejects(
    make_executor: MakeExecutor, name: str, verdict: Any
) -> None:
    async def deny(call: ToolCall) -> Any:
        await asyncio.sleep(0)
        return verdict

    ex = make_executor(_registry(), authorize=deny)
    r = ex.execute(ToolCall(name=name, arguments={"text": "a"}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)


@pytest.mark.parametrize("name", TOOLS)
def test_an_async_authorize_that_raises_rejects(make_executor: MakeExecutor, name: str) -> None:
    async def boom(call: ToolCall) -> bool:
        raise PermissionError("no entry")

    ex = make_executor(_registry(), authorize=boom)
    r = ex.execute(ToolCall(name=name, arguments={"text": "a"}))
    assert (r.status, r.error_code, r.error) == (
        "rejected",
        ErrorCode.TOOL_NOT_ALLOWED,
        "PermissionError: no entry",
    )


@pytest.mark.parametrize("name", TOOLS)
def test_an_async_masker_masks_what_is_published(make_executor: MakeExecutor, name: str) -> None:
    async def masker(call: ToolCall) -> Any:
        await asyncio.sleep(0)
        return {**call.arguments, "text": "***"} if isinstance(call.arguments, dict) else {}

    ex = make_executor(_registry(), masker=masker)
    with bus.Recorder(bus.EXECUTING, sender=ex) as rec:
        r = ex.execute(ToolCall(name=name, arguments={"text": "s3cr3t-value"}))
        (executing,) = rec.wait_for(bus.EXECUTING)
    # What the masker hid is scrubbed from the output too.
    assert (r.status, r.output) == ("ok", "***|")
    assert executing.arguments == {"text": "***"}
    assert "s3cr3t-value" not in repr(executing)


@pytest.mark.parametrize("name", TOOLS)
def test_async_subclass_overrides(make_executor: MakeExecutor, name: str) -> None:
    seen: list[str] = []

    class Audited(Executor):
        async def pre_execute(self, call: ToolCall) -> ToolCall:  # type: ignore[override]
            seen.append(f"pre:{tenant.get()}")
            return call

        async def is_allowed(self, call: ToolCall) -> bool:  # type: ignore[override]
            return call.arguments != {"text": "forbidden"}

        async def post_execute(  # type: ignore[override]
            self, call: ToolCall, result: ToolResult
        ) -> ToolResult:
            seen.append(f"post:{result.status}")
            return result

    with Audited(_registry()) as ex:
        token = tenant.set("t1")
        try:
            ok = ex.execute(ToolCall(name=name, arguments={"text": "x"}))
            no = ex.execute(ToolCall(name=name, arguments={"text": "forbidden"}))
        finally:
            tenant.reset(token)
    assert ok.status == "ok"
    assert (no.status, no.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert seen == ["pre:t1", "post:ok", "pre:t1"]


@pytest.mark.parametrize("name", TOOLS)
async def test_async_hooks_from_aexecute(make_executor: MakeExecutor, name: str) -> None:
    ex = make_executor(_registry(), pre_call=[_inject], post_call=[_upper])
    tenant.set("async-caller")
    r = await ex.aexecute(ToolCall(name=name, arguments={"text": "x"}))
    assert r.output == "X|TOK-ASYNC-CALLER"


@pytest.mark.parametrize("name", TOOLS)
def test_a_hung_async_hook_times_out_the_call(make_executor: MakeExecutor, name: str) -> None:
    async def forever(call: ToolCall) -> ToolCall:
        await asyncio.Event().wait()
        return call

    ex = make_executor(_registry(), pre_call=[forever], timeout=HANG_TIMEOUT)
    r = ex.execute(ToolCall(name=name, arguments={"text": "x"}))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert (
        r.error is not None
        and "pre-call steps (hooks, masking, content scanning) did not return" in r.error
    )
