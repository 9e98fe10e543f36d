"""Plans: what every call of a tool shares is resolved once, and never outlives a change.

An executor keeps a plan per tool (its timeout, retry policy, policies and
backend, `toolbus/_executor/_plan.py`). A tool re-registered, replaced, or
given a new setting, and an executor given a new default, must be called with
a new plan from the next call on.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, FunctionTool, Tool, ToolCall, ToolRegistry
from toolbus.backends import ThreadBackend
from toolbus.bus import Recorder
from toolbus.policies import Admit, BasePolicy, Decision, Reject


def _call(name: str = "f", **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=dict(arguments))


def test_a_tool_registered_again_is_called_with_its_new_plan(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def f() -> str:
        return "first"

    ex = make_executor(reg)
    assert ex.execute(_call()).output == "first"
    reg.unregister("f")
    assert ex.execute(_call()).error_code is ErrorCode.TOOL_NOT_FOUND

    @reg.tool(read_only=True, name="f")
    async def f_again() -> str:  # async now: another backend, too
        return "second"

    assert ex.execute(_call()).output == "second"


def test_a_replaced_tool_is_called_with_its_new_plan(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def f() -> str:
        return "old"

    ex = make_executor(reg)
    assert ex.execute(_call()).output == "old"
    other = ToolRegistry()

    @other.tool(read_only=True, name="f")
    def new() -> str:
        return "new"

    assert reg.replace(f, new)
    assert ex.execute(_call()).output == "new"


@pytest.mark.parametrize("where", ["on the tool", "on the executor"])
def test_a_new_timeout_reaches_the_next_call(make_executor: MakeExecutor, where: str) -> None:
    """A timeout set after a first call, on the tool or as the executor's default."""
    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def slow() -> str:
        release.wait(10)
        return "done"

    ex = make_executor(reg, timeout=30)
    release.set()
    assert ex.execute(_call("slow")).status == "ok"  # planned with a 30 s timeout
    release.clear()
    if where == "on the tool":
        slow.timeout = 0.05
    else:
        ex.timeout = 0.05
    try:
        r = ex.execute(_call("slow"))
    finally:
        release.set()
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert "0.05" in (r.error or "")


def test_a_new_output_schema_makes_a_new_plan(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def f() -> dict[str, int]:
        return {"n": 1}

    ex = make_executor(reg)
    assert ex.execute(_call()).output == {"n": 1}
    plan = ex._plans.plan("f", reg, ex.timeout, ex.retry_policy, ex._policies, ex._backends)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    f.output_schema = schema
    again = ex._plans.plan("f", reg, ex.timeout, ex.retry_policy, ex._policies, ex._backends)
    assert again is not plan and again is not None and again.tool.output_schema == schema
    assert ex.execute(_call()).output == {"n": 1}


def test_policies_given_to_a_tool_later_guard_its_next_call(make_executor: MakeExecutor) -> None:
    class Never(BasePolicy):
        name = "never"

        def admit(self, call: ToolCall, tool: object, now: float) -> Decision:
            return Reject(ErrorCode.TOOL_NOT_ALLOWED, "not today")

    class Always(BasePolicy):
        name = "always"

        def admit(self, call: ToolCall, tool: object, now: float) -> Decision:
            return Admit()

    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[Always()])
    def f() -> str:
        return "ran"

    ex = make_executor(reg)
    assert ex.execute(_call()).output == "ran"
    other = ToolRegistry()

    @other.tool(read_only=True, name="f", policies=[Never()])
    def guarded() -> str:
        return "ran"

    assert reg.replace(f, guarded)
    r = ex.execute(_call())
    assert (r.status, r.error) == ("rejected", "not today")


def test_a_plan_is_kept_while_nothing_changes(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def f() -> int:
        return 1

    ex = make_executor(reg)
    args = (reg, ex.timeout, ex.retry_policy, ex._policies, ex._backends)
    first = ex._plans.plan("f", *args)
    assert first is not None
    assert ex._plans.plan("f", *args) is first
    assert ex._plans.plan("nope", *args) is None


def test_a_plan_made_from_the_old_map_is_not_kept_for_the_new_one(
    make_executor: MakeExecutor,
) -> None:
    """A call planning against the map a `replace` swapped out left its plan in
    the new map's cache, and later calls ran the replaced tool (review of issue 20)."""
    armed, checking, go_on = threading.Event(), threading.Event(), threading.Event()

    class SlowCheck(ThreadBackend):
        def check(self, tool: Tool) -> None:  # user code: it may take a while
            # Slow only for the call's planning, not the executor's own check
            # of its tools when it is made (which would pass unraced).
            if getattr(tool, "slow_check", False) and armed.is_set():
                checking.set()
                go_on.wait(30)

    def make(value: str, slow: bool) -> Tool:
        def t() -> str:
            return value

        made = FunctionTool(t, name="t")
        made.backend = "slow"
        made.slow_check = slow  # type: ignore[attr-defined]
        return made

    old, new = make("old", True), make("new", False)
    reg = ToolRegistry([old])
    ex = make_executor(reg, backends={"slow": SlowCheck()})
    armed.set()
    before: list[object] = []
    caller = threading.Thread(target=lambda: before.append(ex.execute(_call("t")).output))
    caller.start()
    assert checking.wait(30)  # planning against the old map, inside check()
    assert reg.replace(old, new)
    assert ex.execute(_call("t")).output == "new"
    go_on.set()
    caller.join(30)
    assert before == ["old"]  # it looked the tool up before the replace
    assert [ex.execute(_call("t")).output for _ in range(3)] == ["new"] * 3


def test_a_backend_check_that_failed_is_asked_again(make_executor: MakeExecutor) -> None:
    """A plan kept the failure of a backend's `check` for good (review of issue 20)."""
    checks: list[int] = []

    class Flaky(ThreadBackend):
        def check(self, tool: Tool) -> None:
            checks.append(1)
            if len(checks) == 2:  # the executor binding the tool, then the first call
                raise ConnectionError("not ready yet")

    reg = ToolRegistry()

    @reg.tool(backend="flaky", read_only=True)
    def f() -> str:
        return "ran"

    ex = make_executor(reg, backends={"flaky": Flaky()})
    first = ex.execute(_call())
    assert (first.status, first.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert [ex.execute(_call()).output for _ in range(2)] == ["ran", "ran"]


def test_hooks_set_on_a_started_executor_are_called(make_executor: MakeExecutor) -> None:
    """Hooks set on the instance were skipped by a plan of the class's (review of issue 20)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def lookup(ssn: str, who: str) -> str:
        return f"record for {who}"

    ex = make_executor(reg)
    secret = "078-05-1120"
    call = _call("lookup", ssn=secret, who="mallory")
    assert ex.execute(call).status == "ok"
    ex.is_allowed = lambda c: c.arguments["who"] != "mallory"  # type: ignore[method-assign]
    ex.mask_arguments = lambda c: {**c.arguments, "ssn": "***"}  # type: ignore[method-assign]
    ex.post_execute = lambda c, r: r.model_copy(  # type: ignore[method-assign]
        update={"output": f"[audited] {r.output}"}
    )
    with Recorder(sender=ex) as rec:
        refused = ex.execute(call)
        ok = ex.execute(_call("lookup", ssn=secret, who="alice"))
        ex.drain_events()
    assert (refused.status, refused.error_code) == ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    assert ok.output == "[audited] record for alice"
    assert rec.events and not [e for e in rec.events if secret in repr(e)]


def test_a_parse_set_on_a_tool_is_asked(make_executor: MakeExecutor) -> None:
    """A tool's own `parse`, set on the instance, was skipped for dict arguments
    (review of issue 20)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def add(a: int, b: int) -> int:
        return a + b

    ex = make_executor(reg)
    plain = add.parse
    add.parse = lambda arguments: plain(  # type: ignore[method-assign]
        {"a": arguments["x"], "b": arguments["y"]} if isinstance(arguments, dict) else arguments
    )
    assert ex.execute(_call("add", x=1, y=2)).output == 3


def test_a_tools_schema_is_fixed_and_a_new_tool_in_its_place_validates_and_masks(
    make_executor: MakeExecutor, recorder: Recorder
) -> None:
    """A schema set after set-up kept the old validator and the old secret
    paths (a value the new one marks secret was published unmasked), and
    deriving them again under calls in flight let calls through unvalidated
    (review of issue 20): the schema is fixed, and a new tool takes its place."""

    class Echo(Tool):
        name = "echo"
        read_only = True
        parameters: ClassVar[dict[str, Any]] = {
            "type": "object",
            "properties": {"q": {"type": "string"}},
        }

        def run(self, params: dict[str, object]) -> str:
            return f"q={params['q']}"

    reg = ToolRegistry()
    echo = Echo()
    reg.register(echo)
    ex = make_executor(reg)
    assert ex.execute(_call("echo", q=1)).error_code is ErrorCode.INVALID_ARGUMENTS
    new = {
        "type": "object",
        "properties": {"q": {"type": "integer"}, "memo": {"type": "string", "writeOnly": True}},
    }
    for field, value in (("parameters", new), ("Params", None), ("type", "custom")):
        with pytest.raises(AttributeError, match=f"{field} is fixed once the tool is made"):
            setattr(echo, field, value)
    assert echo.secret_paths == () and echo.parameters is Echo.parameters

    class Echo2(Echo):
        parameters: ClassVar[dict[str, Any]] = new

    assert reg.replace(echo, Echo2())
    result = ex.execute(_call("echo", q=1, memo="sk-live-123456"))
    assert (result.status, result.output) == ("ok", "q=1")
    ex.drain_events()
    assert "sk-live-123456" not in repr(recorder.events)
