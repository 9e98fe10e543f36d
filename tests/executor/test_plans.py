"""Plans: what every call of a tool shares is resolved once, and never outlives a change.

An executor keeps a plan per tool (its timeout, retry policy, policies and
backend, `toolbus/_executor/_plan.py`). A tool re-registered, replaced, or
given a new setting, and an executor given a new default, must be called with
a new plan from the next call on.
"""

from __future__ import annotations

import threading

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, ToolCall, ToolRegistry
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


def test_a_setting_changed_on_a_tool_reaches_its_next_call(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def slow() -> str:
        release.wait(10)
        return "done"

    ex = make_executor(reg, timeout=30)
    release.set()
    assert ex.execute(_call("slow")).status == "ok"  # planned with no timeout of its own
    release.clear()
    slow.timeout = 0.05
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


def test_a_new_executor_default_reaches_the_next_call(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def slow() -> str:
        release.wait(10)
        return "done"

    ex = make_executor(reg, timeout=30)
    release.set()
    assert ex.execute(_call("slow")).status == "ok"
    release.clear()
    ex.timeout = 0.05
    try:
        r = ex.execute(_call("slow"))
    finally:
        release.set()
    assert r.status == "timeout"


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
