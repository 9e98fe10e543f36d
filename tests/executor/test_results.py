"""Every status and error code, through the public API; bad input never raises."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from tests.concurrency_tools import finished as _finished
from tests.concurrency_tools import in_thread as _in_thread
from tests.concurrency_tools import ok_registry as _ok_registry
from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import (
    ErrorCode,
    Executor,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    bus,
)
from toolbus.actors._messages import Close


def _registry(release: threading.Event) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def add(a: int, b: int = 0) -> int:
        """Add two integers."""
        return a + b

    @reg.tool
    def explode(message: str) -> None:
        raise ValueError(message)

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def stuck() -> str:
        release.wait()
        return "too late"

    @reg.tool(type="custom")
    def shout(text: str) -> str:
        return text.upper()

    class Point(BaseModel):
        x: int
        y: int

    @reg.tool(read_only=True)
    def as_model(x: int) -> Point:
        return Point(x=x, y=-x)

    @reg.tool(read_only=True)
    def garbage() -> object:
        return object()

    @reg.tool(read_only=True)
    def precise() -> None:
        raise ToolError("the record is locked; try another id")

    return reg


@pytest.fixture
def ex(make_executor: MakeExecutor, release: threading.Event) -> Executor:
    return make_executor(_registry(release), timeout=5.0)


def test_ok_from_dict_and_raw_json(ex: Executor) -> None:
    r1 = ex.execute(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))
    r2 = ex.execute(ToolCall(id="c2", name="add", arguments='{"a": 2, "b": 3}'))
    r3 = ex.execute(ToolCall(id="c3", name="add", arguments='  {"a": 1}  '))
    assert (r1.status, r1.output, r1.call_id, r1.attempts) == ("ok", 5, "c1", 1)
    assert (r2.status, r2.output) == ("ok", 5)
    assert (r3.status, r3.output) == ("ok", 1)
    assert r1.error is None and r1.error_code is None
    assert r1.duration > 0


def test_openai_shaped_mapping_is_accepted(ex: Executor) -> None:
    call = {"id": "x1", "type": "function", "function": {"name": "add", "arguments": '{"a": 4}'}}
    r = ex.execute(call)
    assert (r.call_id, r.status, r.output) == ("x1", "ok", 4)


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"a": 1, "b": ', "not valid JSON"),
        ('{"a": 1,, }', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"just a string"', "must be a JSON object"),
        ("", "a: Field required"),
        ('{"a": "seven"}', "a: Input should be a valid integer"),
        ('{"a": 1, "c": 2}', "c: Extra inputs are not permitted"),
    ],
)
def test_bad_arguments_are_rejected_with_a_specific_message(
    ex: Executor, arguments: str, fragment: str
) -> None:
    r = ex.execute(ToolCall(name="add", arguments=arguments))
    assert r.status == "rejected"
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error is not None and fragment in r.error
    assert r.attempts == 0


def test_schema_errors_never_echo_the_value(ex: Executor) -> None:
    r = ex.execute(ToolCall(name="add", arguments={"a": "hunter2-value"}))
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error is not None and "hunter2" not in r.error


def test_oversize_arguments(make_executor: MakeExecutor, release: threading.Event) -> None:
    ex = make_executor(_registry(release), max_argument_bytes=100)
    r = ex.execute(ToolCall(name="add", arguments={"a": 1, "pad": "x" * 200}))
    assert r.status == "rejected" and r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error is not None and "limit is 100 bytes" in r.error
    raw = ex.execute(ToolCall(name="add", arguments='{"a": 1, "pad": "' + "y" * 300 + '"}'))
    assert raw.error_code is ErrorCode.INVALID_ARGUMENTS


def test_text_arguments_that_are_not_utf8_are_rejected_whatever_their_length(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    """A lone surrogate in raw arguments: rejected as invalid, not an internal
    error, also where the text is long enough to be sized in bytes."""
    ex = make_executor(_registry(release), max_argument_bytes=40)
    for pad in ("", "y" * 20):
        r = ex.execute(ToolCall(name="add", arguments='{"a": 1, "pad": "\ud800' + pad + '"}'))
        assert (r.status, r.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS), r.error


def test_arguments_too_deep_are_refused_alike_as_text_and_as_a_dict(ex: Executor) -> None:
    """As text they were read up to orjson's 1,024 levels: 300 levels went on
    to validation, 1,000 ended `error` ("internal error: RecursionError",
    from masking), where a dict was refused past 254 (bug hunt)."""
    for levels in (300, 1000):
        text = '{"a": 1, "b": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"
        results = [
            ex.execute(ToolCall(name="add", arguments=text)),
            ex.execute(ToolCall(name="add", arguments={"a": 1, "b": orjson.loads(text)["b"]})),
        ]
        for r in results:
            assert (r.status, r.error_code, r.error) == (
                "rejected",
                ErrorCode.INVALID_ARGUMENTS,
                "Invalid arguments for 'add': Arguments nest too deeply"
                " (more than 254 levels of objects and arrays)",
            )


def test_unknown_tool(ex: Executor) -> None:
    r = ex.execute(ToolCall(id="u", name="no_such_tool", arguments="{oops"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_FOUND)
    assert r.error == (
        "Unknown tool 'no_such_tool'. "
        "Available tools: add, explode, stuck, shout, as_model, garbage, precise"
    )
    assert r.call_id == "u"


def test_unreadable_call_mapping_still_gets_a_result(ex: Executor) -> None:
    r = ex.execute({"arguments": 42})
    assert r.status == "rejected" and r.error_code is ErrorCode.TOOL_NOT_FOUND


def test_tool_error_and_tool_error_message(ex: Executor) -> None:
    r = ex.execute(ToolCall(name="explode", arguments={"message": "disk full"}))
    assert (r.status, r.error_code, r.error) == (
        "error",
        ErrorCode.TOOL_ERROR,
        "ValueError: disk full",
    )
    p = ex.execute(ToolCall(name="precise"))
    assert p.error == "the record is locked; try another id"


def test_timeout(ex: Executor) -> None:
    r = ex.execute(ToolCall(name="stuck"))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert r.error == f"Tool 'stuck' timed out after {HANG_TIMEOUT}s"
    assert r.attempts == 1


def test_not_allowed(make_executor: MakeExecutor, release: threading.Event) -> None:
    ex = make_executor(_registry(release), authorize=lambda call: call.name != "explode")
    r = ex.execute(ToolCall(name="explode", arguments={"message": "x"}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert r.error == "Tool 'explode' is not allowed"
    assert ex.execute(ToolCall(name="add", arguments={"a": 1})).status == "ok"


def test_custom_tool_gets_raw_text(ex: Executor) -> None:
    r = ex.execute(ToolCall(name="shout", arguments="not json { at all"))
    assert (r.status, r.output) == ("ok", "NOT JSON { AT ALL")


def test_outputs_are_normalised(ex: Executor) -> None:
    r = ex.execute(ToolCall(name="as_model", arguments={"x": 3}))
    assert r.output == {"x": 3, "y": -3}
    g = ex.execute(ToolCall(name="garbage"))
    assert (g.status, g.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert g.error is not None and "not JSON-serializable" in g.error


def test_cancelled_and_aborted(ex: Executor) -> None:
    batch = ex.execute_batch(
        [
            ToolCall(name="explode", arguments={"message": "first failure"}),
            ToolCall(name="add", arguments={"a": 1}),
            ToolCall(name="explode", arguments={"message": "never runs"}),
        ],
        stop_on_error=True,
    )
    assert [r.status for r in batch] == ["error", "cancelled", "cancelled"]
    assert [r.error_code for r in batch][1:] == [ErrorCode.ABORTED, ErrorCode.ABORTED]
    assert batch.summary.executed == 1
    assert batch.summary.failed == 3


async def test_cancelled_by_the_awaiting_task(ex: Executor, release: threading.Event) -> None:
    started = threading.Event()
    reg = ToolRegistry()

    @reg.tool
    async def forever(ctx: ToolContext) -> None:
        started.set()
        await asyncio.Event().wait()

    with Executor(reg) as own, bus.Recorder(bus.FINISHED, sender=own) as rec:
        task = asyncio.ensure_future(own.aexecute(ToolCall(id="f", name="forever")))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (finished,) = await asyncio.to_thread(rec.wait_for, bus.FINISHED)
        assert finished.result.status == "cancelled"
        assert finished.result.error_code is ErrorCode.CANCELLED


def test_only_the_stuck_tool_is_refused_when_its_budget_is_spent(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    ex = make_executor(_registry(release), max_abandoned_workers=3, max_abandoned_per_tool=1)
    assert ex.execute(ToolCall(name="stuck")).status == "timeout"
    assert ex.stats().abandoned_workers == 1
    # The stuck tool has spent its budget...
    r = ex.execute(ToolCall(name="stuck"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert r.error is not None and "stuck" in r.error and "per tool" in r.error
    # ...healthy tools, even ones never used, go on.
    assert ex.execute(ToolCall(name="add", arguments={"a": 1})).status == "ok"
    assert ex.execute(ToolCall(name="explode", arguments={"message": "x"})).status == "error"


def test_every_sync_tool_is_refused_when_stuck_threads_fill_the_budget(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    ex = make_executor(_registry(release), max_abandoned_workers=1)
    assert ex.execute(ToolCall(name="stuck")).status == "timeout"
    assert ex.stats().abandoned_workers == 1
    # Nothing can free the budget but the stuck thread: refuse rather than queue forever.
    r = ex.execute(ToolCall(name="add", arguments={"a": 1}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert r.error is not None and "stuck" in r.error
    release.set()  # the stuck thread returns: its worker serves again
    wait_until(lambda: ex.stats().abandoned_workers == 0)
    assert ex.execute(ToolCall(name="add", arguments={"a": 1})).status == "ok"


def test_closed_executor_still_answers(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    ex = make_executor(_registry(release))
    ex.close()
    r = ex.execute(ToolCall(name="add", arguments={"a": 1}))
    assert (r.status, r.error_code) == ("cancelled", ErrorCode.CANCELLED)
    b = ex.execute_batch([ToolCall(name="add", arguments={"a": 1})] * 2)
    assert [x.status for x in b] == ["cancelled", "cancelled"]


def test_tool_subclass_with_params_model_and_context(make_executor: MakeExecutor) -> None:
    class RepeatParams(BaseModel):
        word: str
        times: int = 2

    seen: list[Any] = []

    class Repeat(Tool):
        name = "repeat"
        description = "Repeat a word."
        Params = RepeatParams
        read_only = True

        def run(self, params: RepeatParams, ctx: ToolContext) -> str:
            seen.append((ctx.call_id, ctx.attempt, ctx.deadline is not None))
            return " ".join([params.word] * params.times)

    reg = ToolRegistry([Repeat()])
    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="rp", name="repeat", arguments={"word": "hi", "times": 3}))
    assert r.output == "hi hi hi"
    assert seen == [("rp", 1, True)]


def test_empty_batch(ex: Executor) -> None:
    b = ex.execute_batch([])
    assert b.results == () and b.summary.total == 0


async def test_async_twins(ex: Executor) -> None:
    r = await ex.aexecute(ToolCall(name="add", arguments={"a": 40, "b": 2}))
    assert r.output == 42
    b = await ex.aexecute_batch(
        [ToolCall(name="add", arguments={"a": i}) for i in range(5)] + [ToolCall(name="nope")]
    )
    assert [x.output for x in b.results[:5]] == [0, 1, 2, 3, 4]
    assert b.results[5].error_code is ErrorCode.TOOL_NOT_FOUND
    assert (b.summary.total, b.summary.succeeded, b.summary.failed) == (6, 5, 1)


def test_unknown_tool_suggests_close_names(ex: Executor) -> None:
    r = ex.execute(ToolCall(name="ad"))
    assert r.error.startswith("Unknown tool 'ad'. Did you mean 'add'? Available tools: add, ")


class _BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _ExitingStr(Exception):
    def __str__(self) -> str:
        raise SystemExit("no text")


@pytest.mark.parametrize("error", [_BadStr, _ExitingStr])
@pytest.mark.parametrize("is_async", [False, True])
def test_an_exception_whose_str_fails_is_a_tool_error_named_by_its_type(
    make_executor: MakeExecutor, is_async: bool, error: type[Exception]
) -> None:
    # As on Ray (review 11): the call's error, with tool:error, not an internal error.
    # A __str__ raising SystemExit was "internal error: SystemExit" (hunt 6).
    registry = ToolRegistry()
    if is_async:

        @registry.tool
        async def odd() -> str:
            raise error

    else:

        @registry.tool
        def odd() -> str:
            raise error

    ex = make_executor(registry)
    with bus.Recorder(bus.ERROR, sender=ex) as errors:
        result = ex.execute(ToolCall(id="o", name="odd", arguments={}))
        errors.wait_for(bus.ERROR, 1, timeout=5)
    assert (result.status, result.error_code, result.error) == (
        "error",
        ErrorCode.TOOL_ERROR,
        error.__name__,
    )


def test_batch_submitted_after_close_was_handled_is_released() -> None:
    """A batch submitted just as close() was handled hung its caller (concurrency review)."""
    # What happens when execute_batch passed `_tell`'s `_closed` check just before
    # close() set it and its Submit reaches the supervisor after Close.
    ex = Executor(_ok_registry())
    try:
        ex._supervisor.ask(Close("closed"))
        th, out = _in_thread(lambda: ex.execute_batch([ToolCall(name="ok", arguments={"i": 1})]))
        assert _finished(th, out), "execute_batch hangs"
    finally:
        ex.close(timeout=1)


def test_submit_after_the_supervisor_actor_stopped_is_not_lost() -> None:
    """A call submitted after the supervisor actor stopped was lost (concurrency review)."""
    # Submissions no longer go through the actor's mailbox (admission is inline,
    # under the scheduler's lock); an actor stopped some other way than close()
    # closes the scheduler, and later calls still get exactly one result.
    ex = Executor(_ok_registry())
    try:
        ex._supervisor.stop()
        th, out = _in_thread(lambda: ex.execute(ToolCall(name="ok", arguments={"i": 1})))
        assert _finished(th, out), "execute hangs"
        assert out["r"].status == "cancelled"
    finally:
        ex.close(timeout=1)
