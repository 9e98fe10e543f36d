"""Guardrails: input and output checks, sync and async, each verdict, failing
closed, tripping a wire that halts the run, and what they publish."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, ToolResult, bus
from toolbus.policies import (
    GUARDRAIL_TRIPPED,
    Pass,
    Refuse,
    Replace,
    Trip,
    cache,
    guardrail,
)

SECRET = "sk-live-9a8b7c6d5e4f3a2b1c0d"


def registry(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo(text: str, api_key: str = "") -> str:
        ran.append(text)
        return f"echo {text}"

    @reg.tool(read_only=True)
    async def aecho(text: str, api_key: str = "") -> str:
        await asyncio.sleep(0)
        ran.append(text)
        return f"echo {text}"

    return reg


def verdict_for(text: str, stage: str) -> Any:
    """The verdict the test's guards give: the text names it."""
    if f"{stage}-refuse" in text:
        return Refuse(f"{stage} refused")
    if f"{stage}-replace" in text:
        return Replace({"replaced": stage})
    if f"{stage}-trip" in text:
        return Trip(f"{stage} tripped, key {SECRET}")
    if f"{stage}-pass" in text:
        return Pass()
    return None


@guardrail
def check_in(call: ToolCall) -> Any:
    return verdict_for(call.arguments["text"], "in")


@guardrail(stage="output")
async def check_out(call: ToolCall, result: ToolResult) -> Any:
    await asyncio.sleep(0)  # an async check, as a remote classifier's would be
    return verdict_for(str(result.output), "out")


def call(text: str, tool: str = "echo") -> ToolCall:
    return ToolCall(id=text, name=tool, arguments={"text": text, "api_key": SECRET})


@pytest.mark.parametrize("tool", ["echo", "aecho"])
def test_each_verdict_at_each_stage(
    make_executor: MakeExecutor, recorder: bus.Recorder, tool: str
) -> None:
    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[check_in, check_out])

    def go(text: str) -> ToolResult:
        return ex.execute(call(text, tool), agent_run=f"run-{text}")

    r = go("in-pass")
    assert (r.status, r.output) == ("ok", "echo in-pass")
    r = go("in-refuse")
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert (
        r.error == f"Tool '{tool}' was not called: guardrail check_in refused the call: in refused"
    )
    r = go("in-replace")
    assert (r.status, r.output, r.attempts) == ("ok", {"replaced": "in"}, 0)
    r = go("out-replace")
    assert (r.status, r.output, r.attempts) == ("ok", {"replaced": "out"}, 1)
    assert r.metadata["guardrail"] == "check_out"
    r = go("out-refuse")
    assert (r.status, r.error_code, r.output) == ("rejected", ErrorCode.CONTENT_BLOCKED, None)
    assert "ran, but guardrail check_out withheld its result: out refused" in (r.error or "")
    for text in ("in-trip", "out-trip"):
        r = go(text)
        assert (r.status, r.error_code) == ("cancelled", ErrorCode.HALTED)
        assert ex.halted(f"run-{text}") is not None
        assert ex.execute(call("in-pass", tool), agent_run=f"run-{text}").error_code is (
            ErrorCode.HALTED
        )
    # The tool ran for the passing, output-checked ones only.
    assert sorted(ran) == sorted(["in-pass", "out-replace", "out-refuse", "out-trip"])
    ex.drain_events()
    tripped = recorder.of(GUARDRAIL_TRIPPED)
    assert [(e.guardrail, e.stage, e.call_id) for e in tripped] == [
        ("check_in", "input", "in-trip"),
        ("check_out", "output", "out-trip"),
    ]
    published = repr(recorder.events) + repr(ex.halted("run-in-trip"))
    assert SECRET not in published


def test_a_trip_halts_the_rest_of_the_run(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[check_in], max_parallel=1)
    batch = ex.execute_batch([call(t) for t in ("a", "b", "in-trip", "c", "d")], agent_run="r")
    assert [r.status for r in batch.results] == ["ok", "ok", "cancelled", "cancelled", "cancelled"]
    assert {r.error_code for r in batch.results[2:]} == {ErrorCode.HALTED}
    assert ran == ["a", "b"]


@pytest.mark.parametrize("stage", ["input", "output"])
@pytest.mark.parametrize("broken", ["raises", "answers 42"])
def test_a_broken_guardrail_fails_closed(
    make_executor: MakeExecutor, stage: str, broken: str
) -> None:
    def check(*args: Any) -> Any:
        if broken == "raises":
            raise RuntimeError(f"classifier down ({SECRET})")
        return 42

    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[guardrail(stage=stage, name="flaky")(check)])  # type: ignore[arg-type]
    r = ex.execute(call("hello"))
    assert r.status == "rejected"
    assert "flaky" in (r.error or "")
    assert SECRET not in (r.error or "")
    if stage == "input":
        assert r.error_code is ErrorCode.TOOL_UNAVAILABLE and ran == []
    else:
        assert r.error_code is ErrorCode.CONTENT_BLOCKED and ran == ["hello"]


def test_a_cached_result_was_checked_when_it_was_made(make_executor: MakeExecutor) -> None:
    """The cache keeps what the output guardrail left: a hit is that, unchecked again."""
    checked: list[str] = []

    @guardrail(stage="output")
    def count(call: ToolCall, result: ToolResult) -> Any:
        checked.append(call.id)
        return Replace("clean")

    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[cache(ttl=60), count])
    first = ex.execute(ToolCall(id="1", name="echo", arguments={"text": "x"}))
    second = ex.execute(ToolCall(id="2", name="echo", arguments={"text": "x"}))
    assert (first.output, second.output) == ("clean", "clean")
    assert second.metadata.get("cache") == "hit"
    assert (ran, checked) == (["x"], ["1"])


def test_guardrails_are_made_right_or_refused() -> None:
    @guardrail(name="named")
    def check(call: ToolCall) -> None:
        return None

    assert check.name == "named"
    assert check(ToolCall(name="x")) is None  # the function stays callable
    with pytest.raises(ValueError, match="stage"):
        guardrail(stage="before")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="callable"):
        guardrail(42)  # type: ignore[call-overload]


def test_without_a_run_a_trip_halts_its_batch_alone(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex: Executor = make_executor(registry(ran), policies=[check_in], max_parallel=1)
    batch = ex.execute_batch([call(t) for t in ("a", "in-trip", "b")])
    assert [r.status for r in batch.results] == ["ok", "cancelled", "cancelled"]
    assert ex.execute(call("c")).status == "ok"


@pytest.mark.parametrize("stage", ["input", "output"])
def test_a_replacement_is_sent_as_any_output_is_or_fails_closed(
    make_executor: MakeExecutor, stage: str
) -> None:
    """An input Replace was handed on raw (a ToolOutput not unpacked, bytes that
    could not be serialised); an output one ended "internal error" (review)."""
    from toolbus import ToolOutput

    replacements = {"unpacked": ToolOutput(content="hello"), "bytes": b"\xff", "odd": object()}

    def check(*args: Any) -> Any:
        call = args[0]
        return Replace(replacements[call.arguments["text"]])

    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[guardrail(stage=stage, name="swap")(check)])  # type: ignore[arg-type]
    r = ex.execute(call("unpacked"))
    assert (r.status, r.output) == ("ok", "hello")
    for text in ("bytes", "odd"):
        r = ex.execute(call(text))
        assert r.status == "rejected" and "cannot send" in (r.error or "")
        r.model_dump_json()  # it serialises


def test_a_trip_after_an_edit_hides_the_secrets_the_edit_brought(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """The guardrail asked after an approval that edited the call published
    with the scrubber of the call as first sent, which did not know the
    edit's secret."""
    from toolbus.policies import requires_approval

    edited_secret = "sk-live-0f1e2d3c4b5a69788796"

    @guardrail
    def leaky(call: ToolCall) -> Any:
        return Trip(f"saw key {call.arguments.get('api_key')}")

    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval(), leaky])
    def echo(text: str, api_key: str = "") -> str:
        return text

    ex = make_executor(reg)
    first = ToolCall(id="e", name="echo", arguments={"text": "hi"})
    asked = ex.execute(first, agent_run="r1")
    assert asked.approval_request is not None
    edit = ex.approve(asked.approval_request, arguments={"text": "hi", "api_key": edited_secret})
    r = ex.execute(first, approval=edit, agent_run="r1")
    assert (r.status, r.error_code) == ("cancelled", ErrorCode.HALTED)
    ex.drain_events()
    [tripped] = recorder.of(GUARDRAIL_TRIPPED)
    published = repr(recorder.events) + repr(ex.halted("r1")) + repr(r)
    assert "saw key" in repr(tripped) and edited_secret not in published


class Exiting(BaseException):
    """Neither an Exception nor one of the interrupts toolbus passes on."""


@pytest.mark.parametrize("tool", ["echo", "aecho"])
@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize(
    "raised", [asyncio.CancelledError, SystemExit, GeneratorExit, Exiting, KeyboardInterrupt]
)
def test_an_output_guardrail_raising_a_base_exception_fails_closed(
    make_executor: MakeExecutor, raised: type[BaseException], is_async: bool, tool: str
) -> None:
    # Not a cancel of the call (nothing cancelled it): the guard's own
    # failure, which withholds the output naming it, as any exception does;
    # neither a hang (a CancelledError taken for the call's cancel) nor an
    # "internal error".
    def sync_check(call: ToolCall, result: ToolResult) -> Any:
        raise raised("boom")

    async def async_check(call: ToolCall, result: ToolResult) -> Any:
        raise raised("boom")

    check = async_check if is_async else sync_check
    ran: list[str] = []
    ex = make_executor(
        registry(ran), policies=[guardrail(check, stage="output", name="shaky")], timeout=None
    )
    r = ex.submit(ToolCall(name=tool, arguments={"text": "hi"})).result(timeout=30)
    assert r.status == "rejected", r
    assert r.error_code is ErrorCode.CONTENT_BLOCKED
    assert "shaky" in (r.error or "") and raised.__name__ in (r.error or "")
    assert ran == ["hi"]


@pytest.mark.parametrize("tool", ["echo", "aecho"])
def test_an_async_input_guardrail_raising_generator_exit_fails_closed(
    make_executor: MakeExecutor, tool: str
) -> None:
    async def check(call: ToolCall) -> Any:
        raise GeneratorExit("boom")

    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[guardrail(check, name="shaky")])
    r = ex.submit(ToolCall(name=tool, arguments={"text": "hi"})).result(timeout=30)
    assert r.status == "rejected", r
    assert r.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert "shaky" in (r.error or "") and "GeneratorExit" in (r.error or "")
    assert ran == []


class _Checks:
    """Checks as methods, and a callable object: their signatures are read bound."""

    def one(self, call: ToolCall) -> None:
        return None

    def two(self, call: ToolCall, result: ToolResult) -> None:
        return None

    def __call__(self, call: ToolCall, result: ToolResult) -> None:
        return None


def _two(call: ToolCall, result: ToolResult) -> None:
    return None


def _three(call: ToolCall, result: ToolResult, extra: int) -> None:
    return None


def _keyword_only(call: ToolCall, *, strict: bool) -> None:
    return None


async def _none() -> None:
    return None


@pytest.mark.parametrize(
    ("stage", "check", "named", "shown"),
    [
        ("input", _two, "_two", "_two(call: 'ToolCall', result: 'ToolResult')"),
        ("input", _none, "_none", "_none()"),
        ("input", _keyword_only, "_keyword_only", "_keyword_only(call: 'ToolCall', *,"),
        ("output", lambda call: None, "<lambda>", "<lambda>(call)"),
        ("output", _three, "_three", "_three(call"),
        ("output", _Checks().one, "one", "_Checks.one(call: 'ToolCall')"),
        ("input", _Checks(), "judge", "_Checks(call: 'ToolCall', result"),
        ("input", functools.partial(_three, None), "judge", "functools.partial(_three, ...)"),
    ],
)
def test_a_check_that_cannot_take_its_arguments_is_refused_when_made(
    stage: str, check: Any, named: str, shown: str
) -> None:
    """A check with the wrong parameters was taken, and failed (closed) on
    every call; now the guardrail is not made: a TypeError naming the
    guardrail, the check and the signature it is called with."""
    expected = "check(call)" if stage == "input" else "check(call, result)"
    with pytest.raises(TypeError) as raised:
        guardrail(stage=stage, name=None if named != "judge" else "judge")(check)  # type: ignore[call-overload]
    text = str(raised.value)
    assert text.startswith(
        f"guardrail {named!r}: an {stage} guardrail's check is called as {expected}"
    )
    assert shown in text


@pytest.mark.parametrize(
    ("stage", "check"),
    [
        ("input", lambda call: None),
        ("input", lambda call, extra=1: None),
        ("input", lambda *args: None),
        ("input", _Checks().one),
        ("input", functools.partial(_two, result=None)),
        ("input", functools.partial(_three, extra=1, result=None)),
        ("output", _two),
        ("output", _Checks().two),
        ("output", _Checks()),
        ("output", functools.partial(_three, extra=1)),
        ("output", lambda call, *rest, **options: None),
        ("input", print),  # (a builtin: its signature is read, and it takes one)
    ],
)
def test_checks_that_take_their_arguments_are_made(stage: str, check: Any) -> None:
    made = guardrail(stage=stage, name="ok")(check)  # type: ignore[call-overload]
    assert made.stage == stage


def test_a_decorated_check_is_read_as_the_wrapper_that_is_called() -> None:
    """`functools.wraps` points inspect at the wrapped function: the check
    is the wrapper, which is what the guardrail calls (review helper-162)."""

    def with_denylist(check: Any) -> Any:
        @functools.wraps(check)
        def wrapper(call: Any) -> Any:
            return check(call, ("rm -rf",))

        return wrapper

    @with_denylist
    def no_danger(call: Any, denied: tuple[str, ...]) -> None:
        return None

    assert guardrail(no_danger, name="deny").stage == "input"

    def narrowed(check: Any) -> Any:
        @functools.wraps(check)
        def wrapper(call: Any) -> Any:
            return check(call, None)

        return wrapper

    with pytest.raises(TypeError, match="check\\(call, result\\)"):
        guardrail(stage="output", name="narrow")(narrowed(_two))


def test_a_check_whose_signature_cannot_be_read_is_taken_as_before() -> None:
    class Opaque:
        """A callable whose signature inspect cannot read."""

        @property
        def __signature__(self) -> Any:
            raise ValueError("no signature")

        def __call__(self, *args: Any) -> None:
            return None

    assert guardrail(Opaque(), name="opaque").name == "opaque"
    assert guardrail(stage="output", name="dict")(dict).stage == "output"
