"""A tool's options are checked when it is made, with an error naming the tool
and the option; a timeout of `math.inf` means no deadline under an executor's.

Pins defects found outside the repo: a string, a bool or NaN must not be
taken as a timeout or a concurrency limit, and an option given as a class
attribute is checked too.
"""

from __future__ import annotations

import fractions
import math
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import (
    Executor,
    ToolCall,
    ToolContext,
    ToolRegistry,
    tool,
)

# -- 1. options are validated at registration ----------------------------------------------

NOT_NUMBERS = ["1", True, False, None, [1], b"1"]
NOT_POSITIVE = [0, -1, -0.5, math.nan, -math.inf]


def _noop() -> None:
    return None


@pytest.mark.parametrize("bad", ["1", True, b"2", 0, -1, -0.001, math.nan, -math.inf])
def test_tool_timeout_is_validated(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="tool 'slow': timeout must be"):
        tool(name="slow", timeout=bad)(_noop)
    reg = ToolRegistry()
    with pytest.raises((TypeError, ValueError), match="timeout"):
        reg.tool(timeout=bad)(_noop)
    assert len(reg) == 0


def test_a_refused_timeout_says_what_none_means_where_it_was_given() -> None:
    """On a tool (and per call) None is not "no deadline" but the executor's
    (the tool's) timeout: the message says so, and that inf is no deadline."""
    with pytest.raises(ValueError) as on_tool:
        tool(name="slow", timeout=0)(_noop)
    assert str(on_tool.value) == (
        "tool 'slow': timeout must be > 0 (inf for no deadline, None for the executor's "
        "timeout), got 0"
    )
    reg = ToolRegistry()
    reg.register(tool(name="quick")(_noop))
    with Executor(reg) as ex, pytest.raises(TypeError) as per_call:
        ex.execute(ToolCall(name="quick"), timeout="5")
    assert "(inf for no deadline, None for the tool's timeout)" in str(per_call.value)
    with pytest.raises(ValueError, match=r"> 0 \(or None for no deadline\), got 0"):
        Executor(reg, timeout=0)


def test_a_call_timeout_says_what_none_means_where_it_is_given() -> None:
    """`call_timeout=None` on a tool or a call adds no bound of its own (the
    others still apply), where the message said "None for no deadline"; and a
    batch's message named `execute` (issue 22's review)."""
    with pytest.raises(ValueError) as on_tool:
        tool(name="slow", call_timeout=0)(_noop)
    assert str(on_tool.value) == (
        "tool 'slow': call_timeout must be > 0 (None or inf: no bound of its own; "
        "the executor's call_timeout still applies), got 0"
    )
    reg = ToolRegistry()
    reg.register(tool(name="quick")(_noop))
    with Executor(reg) as ex:
        with pytest.raises(ValueError) as one:
            ex.execute(ToolCall(name="quick"), call_timeout=0)
        with pytest.raises(ValueError) as batch:
            ex.execute_batch([ToolCall(name="quick")], call_timeout=-1)
    assert str(one.value).startswith("execute, aexecute or submit: call_timeout must be > 0")
    assert "(None or inf: no bound of its own; the tool's and the executor's call_timeouts" in str(
        one.value
    )
    assert str(batch.value).startswith("execute_batch, aexecute_batch or submit_batch: ")


@pytest.mark.parametrize(
    ("given", "kept"),
    [(None, None), (2, 2), (0.5, 0.5), (math.inf, math.inf), (fractions.Fraction(1, 4), 0.25)],
)
def test_tool_timeout_accepts_numbers_and_no_deadline(given: Any, kept: Any) -> None:
    t = tool(timeout=given)(_noop)
    assert t.timeout == kept
    assert type(t.timeout) is type(kept)


def test_infinite_tool_timeout_means_no_deadline_under_an_executor_timeout(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool(timeout=math.inf)
    def patient(ctx: ToolContext) -> bool:
        return ctx.remaining is not None and ctx.remaining > 3600

    @reg.tool
    def hurried(ctx: ToolContext) -> bool:
        return ctx.remaining is not None and ctx.remaining > 3600

    ex = make_executor(reg, timeout=60)
    assert ex.execute(ToolCall(name="patient")).output is True
    assert ex.execute(ToolCall(name="hurried")).output is False


@pytest.mark.parametrize("bad", ["2", True, 0, -3, 1.5, math.nan])
def test_tool_max_concurrency_is_validated(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="tool 'busy': max_concurrency"):
        tool(name="busy", max_concurrency=bad)(_noop)


@pytest.mark.parametrize("flag", ["read_only", "idempotent", "open_world", "external"])
@pytest.mark.parametrize("bad", ["false", "yes", 1, 0, None])
def test_tool_flags_are_true_or_false(flag: str, bad: Any) -> None:
    # A truthy string read from a settings file ("false") would make a
    # mutating tool run beside others, its barrier gone.
    with pytest.raises(TypeError, match=f"tool 'flagged': {flag} must be True or False"):
        tool(name="flagged", **{flag: bad})(_noop)


@pytest.mark.parametrize("bad", [5, "", b"name", ["n"]])
def test_tool_name_is_a_non_empty_string(bad: Any) -> None:
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        tool(name=bad)(_noop)

    from toolbus import Tool

    class Named(Tool):
        name = bad

        def run(self, params: Any) -> None:
            return None

    # (an empty one: "Named needs a name", as a subclass that sets none)
    with pytest.raises((TypeError, ValueError), match=r"name must be a non-empty string|needs a"):
        Named()


def test_tool_retry_must_be_a_policy() -> None:
    with pytest.raises(TypeError, match="tool 'flaky': retry must be a RetryPolicy"):
        tool(name="flaky", retry=3)(_noop)  # type: ignore[call-overload]


def test_class_attribute_options_are_validated() -> None:
    from toolbus import Tool

    class Slow(Tool):
        name = "slow_class"
        timeout = "1"  # type: ignore[assignment]

        def run(self, params: Any) -> None:
            return None

    with pytest.raises(TypeError, match="tool 'slow_class': timeout"):
        Slow()
