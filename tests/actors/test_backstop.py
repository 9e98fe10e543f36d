"""The waiting side's backstop (`toolbus.actors._backstop.overdue`), pure: when
a caller looks again, and which attempts it reports overdue, once each."""

from __future__ import annotations

import contextvars

import pytest

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry
from toolbus.actors._backstop import POLL, SLACK, overdue
from toolbus.pipeline import Run


def _run(timeout: float | None = 1.0) -> Run:
    from toolbus import RetryPolicy

    return Run(
        ToolCall(name="t"),
        None,
        context=contextvars.copy_context(),
        timeout=timeout,
        policy=RetryPolicy(),
    )


def test_backstop_waits_for_the_earliest_deadline() -> None:
    a, b = _run(), _run()
    a.begin_attempt(1)
    b.begin_attempt(1)
    a.deadline, b.deadline = 100.0, 50.0
    late, wake = overdue([a, b], 10.0, set())
    assert late == []
    assert wake == pytest.approx(40.0 + SLACK)


def test_backstop_reports_an_overdue_attempt_once() -> None:
    a = _run()
    a.begin_attempt(1)
    a.deadline = 5.0
    noticed: set[tuple[Run, int]] = set()
    late, wake = overdue([a], 5.0 + SLACK, noticed)
    assert late == [(a, 1)]
    assert wake == POLL
    assert overdue([a], 6.0, noticed)[0] == []  # noticed already
    a.begin_attempt(2)  # a retry is a new attempt with a deadline of its own
    a.deadline = 7.0
    assert overdue([a], 8.0, noticed)[0] == [(a, 2)]


def test_backstop_ignores_finished_and_untimed_calls_not_settled_ones() -> None:
    queued, settled, untimed, done = _run(), _run(), _run(None), _run()
    settled.begin_attempt(1)
    settled.deadline = 1.0
    settled.try_settle(1)  # returned, but its post-call hooks are still running
    untimed.begin_attempt(1)
    done.begin_attempt(1)
    done.deadline = 1.0
    from toolbus import ToolResult

    done.result = ToolResult(call_id="x", name="t", status="ok")
    # The settled one is reported, so its hooks get bounded by hook_grace.
    assert overdue([queued, settled, done], 100.0, set()) == ([(settled, 1)], POLL)
    assert overdue([untimed, done], 100.0, set()) == ([], None)


def test_an_infinite_tool_timeout_means_no_deadline(make_executor: MakeExecutor) -> None:
    import math

    reg = ToolRegistry()

    @reg.tool(timeout=math.inf)
    def quick() -> int:
        return 1

    ex = make_executor(reg, timeout=0.01)
    assert ex.execute(ToolCall(name="quick")).status == "ok"
    assert overdue([_run(math.inf)], 1e9, set()) == ([], None)
