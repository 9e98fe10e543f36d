"""A run's two clocks, decided without threads or timers (`pipeline/_clock.py`):
which clock a timeout names, and what a deadline timer firing while the run is
off the attempt's clock does."""

from __future__ import annotations

import contextvars

import pytest

from toolbus import ErrorCode, RetryPolicy, ToolCall
from toolbus.pipeline import (
    ADMISSION,
    JOURNALING,
    POLICIES,
    STARTING,
    Run,
    off_clock,
    ran_out,
    spent_result,
)

NOW = 1000.0


def _run(*, timeout: float | None = 2.0, due: float | None = None) -> Run:
    run = Run(
        ToolCall(name="lookup", arguments={"q": "x"}),
        None,
        context=contextvars.copy_context(),
        timeout=timeout,
        policy=RetryPolicy(),
    )
    run.due = due
    return run


# -- off the attempt's clock ------------------------------------------------------------------


@pytest.mark.parametrize("phase", [POLICIES, JOURNALING, STARTING])
def test_the_whole_calls_deadline_is_never_off_the_clock(phase: str) -> None:
    run = _run(due=NOW + 0.0005)  # within the timer's early margin
    run.phase = phase
    assert off_clock(run, NOW) == ("spent", 0.0)


@pytest.mark.parametrize("phase", [JOURNALING, STARTING])
def test_a_step_off_the_clock_is_looked_at_again_a_timeout_later(phase: str) -> None:
    run = _run(timeout=2.0)
    run.phase = phase
    assert off_clock(run, NOW) == ("wait", 2.0)


def test_a_look_again_is_never_after_the_whole_calls_deadline() -> None:
    run = _run(timeout=2.0, due=NOW + 0.5)
    run.phase = STARTING
    assert off_clock(run, NOW) == ("wait", 0.5)


def test_policies_get_a_timeout_of_their_own_counted_from_when_they_were_asked() -> None:
    run = _run(timeout=2.0)
    run.phase = POLICIES
    run.asking_since = NOW - 1.5
    what, delay = off_clock(run, NOW)
    assert what == "wait" and delay == pytest.approx(0.5)
    run.asking_since = NOW - 2.0
    assert off_clock(run, NOW) == ("undecided", 0.0)


def test_policies_without_a_timeout_are_bounded_by_the_whole_calls_deadline_only() -> None:
    run = _run(timeout=None, due=NOW + 3.0)
    run.phase = POLICIES
    run.asking_since = NOW - 100.0
    assert off_clock(run, NOW) == ("wait", 3.0)


# -- which clock ran out ----------------------------------------------------------------------


def test_an_attempts_own_timeout_is_execution_timeout() -> None:
    run = _run(timeout=2.0, due=NOW + 10)
    run.deadline = NOW + 2.0
    code, text = ran_out(run)
    assert code is ErrorCode.EXECUTION_TIMEOUT
    assert text == "Tool 'lookup' timed out after 2.0s"
    assert (
        ran_out(run, ADMISSION)[1]
        == "pre-call steps (hooks, masking, content scanning) did not return after 2.0s"
    )


def test_an_attempt_capped_by_the_whole_call_is_deadline_exceeded() -> None:
    run = _run(timeout=2.0, due=NOW + 1.0)
    run.budget = 1.0
    run.deadline = NOW + 1.0
    code, text = ran_out(run, ADMISSION)
    assert code is ErrorCode.DEADLINE_EXCEEDED
    assert "call_timeout of 1s in its pre-call steps" in text


def test_a_call_that_never_began_counts_only_the_attempts_that_ran() -> None:
    run = _run(due=NOW)
    run.budget = 0.25
    result = spent_result(run, 2)
    assert (result.status, result.error_code, result.attempts) == (
        "timeout",
        ErrorCode.DEADLINE_EXCEEDED,
        2,
    )
    assert result.metadata == {"between_attempts": True}
    assert "call_timeout of 0.25s" in (result.error or "")
