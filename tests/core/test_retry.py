"""Unit tests for `toolbus.retry`: retry decisions without any sleeping."""

from __future__ import annotations

import dataclasses
import random

import pytest
import tenacity
from tenacity import RetryCallState

from toolbus.retry import (
    NO_RETRY,
    AttemptFailure,
    AttemptTimeout,
    RetryDecision,
    RetryPolicy,
    new_retry_state,
    record_failure,
    wait_proportional_jitter,
)
from toolbus.tools import ToolError


def _simulate(
    policy: RetryPolicy,
    errors: list[BaseException] | BaseException,
    *,
    read_only: bool = True,
    timed_out: bool = False,
    max_attempts: int = 50,
) -> tuple[list[RetryDecision], RetryCallState]:
    """Fail attempts 1, 2, ... until the policy gives up; return every decision."""
    state = new_retry_state()
    decisions: list[RetryDecision] = []
    for attempt in range(1, max_attempts + 1):
        error = errors[(attempt - 1) % len(errors)] if isinstance(errors, list) else errors
        record_failure(state, attempt, error)
        decision = policy.decide(state, read_only=read_only, timed_out=timed_out)
        decisions.append(decision)
        if not decision.retry:
            break
    return decisions, state


def _delays(decisions: list[RetryDecision]) -> list[float]:
    return [d.delay for d in decisions if d.retry]


# -- defaults and construction ---------------------------------------------------------


def test_defaults() -> None:
    p = RetryPolicy()
    assert p.max_retries == 0
    assert p.backoff_base == 1.0
    assert p.backoff_factor == 2.0
    assert p.max_backoff == 30.0
    assert p.jitter == 0.1
    assert p.retry_on == (ConnectionError, TimeoutError)
    assert p.stop is None
    assert p.wait is None
    assert p.retry is None


def test_negative_max_retries_raises() -> None:
    with pytest.raises(ValueError, match="max_retries must be >= 0"):
        RetryPolicy(max_retries=-1)


def test_policy_is_frozen() -> None:
    p = RetryPolicy(max_retries=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.max_retries = 5  # type: ignore[misc]


def test_replace_rebuilds_strategies() -> None:
    p = dataclasses.replace(RetryPolicy(max_retries=1, jitter=0), max_retries=3)
    decisions, _ = _simulate(p, ConnectionError("down"))
    assert _delays(decisions) == [1.0, 2.0, 4.0]


def test_give_up_decision() -> None:
    d = RetryDecision.give_up()
    assert d == RetryDecision(retry=False, delay=0.0)
    assert d is RetryDecision.give_up()
    assert RetryDecision(True).delay == 0.0


def test_may_retry() -> None:
    assert RetryPolicy().may_retry is False
    assert NO_RETRY.may_retry is False
    assert RetryPolicy(max_retries=1).may_retry is True
    assert RetryPolicy(stop=tenacity.stop_after_attempt(3)).may_retry is True
    # Other overrides alone do not make a zero-retry policy retry.
    assert RetryPolicy(wait=tenacity.wait_fixed(1)).may_retry is False
    assert RetryPolicy(retry=tenacity.retry_if_exception_type(ValueError)).may_retry is False


def test_no_retry_policy_never_retries() -> None:
    decisions, _ = _simulate(NO_RETRY, ConnectionError("down"))
    assert decisions == [RetryDecision(False, 0.0)]


# -- the retry state -------------------------------------------------------------------


def test_new_retry_state_is_fresh() -> None:
    state = new_retry_state()
    assert state.attempt_number == 1
    assert state.outcome is None
    assert state.idle_for == 0.0
    assert state.upcoming_sleep == 0.0
    assert new_retry_state() is not state


def test_record_failure_records_outcome_and_attempt() -> None:
    state = new_retry_state()
    err = ConnectionError("reset")
    record_failure(state, 1, err)
    assert state.attempt_number == 1
    assert state.outcome is not None
    assert state.outcome.failed
    assert state.outcome.exception() is err
    assert state.outcome_timestamp is not None

    err2 = TimeoutError("slow")
    record_failure(state, 2, err2)
    assert state.attempt_number == 2
    assert state.outcome.exception() is err2


def test_record_failure_accumulates_idle_time_from_decisions() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base=0.5, backoff_factor=3, jitter=0)
    state = new_retry_state()
    record_failure(state, 1, ConnectionError())
    assert policy.decide(state, read_only=True, timed_out=False) == RetryDecision(True, 0.5)
    assert state.upcoming_sleep == 0.5
    assert state.idle_for == 0.0
    record_failure(state, 2, ConnectionError())
    assert state.idle_for == 0.5
    assert policy.decide(state, read_only=True, timed_out=False) == RetryDecision(True, 1.5)
    record_failure(state, 3, ConnectionError())
    assert state.idle_for == 2.0
    assert state.attempt_number == 3


def test_record_failure_same_attempt_does_not_advance() -> None:
    state = new_retry_state()
    record_failure(state, 1, ConnectionError("a"))
    state.upcoming_sleep = 7.0
    second = ConnectionError("b")
    record_failure(state, 1, second)
    assert state.attempt_number == 1
    assert state.idle_for == 0.0
    assert state.outcome is not None
    assert state.outcome.exception() is second


def test_record_failure_may_skip_attempt_numbers() -> None:
    state = new_retry_state()
    record_failure(state, 1, ConnectionError())
    record_failure(state, 4, ConnectionError())
    assert state.attempt_number == 4


# -- exponential backoff ---------------------------------------------------------------


@pytest.mark.parametrize("max_retries", [0, 1, 2, 3, 7])
def test_number_of_retries_equals_max_retries(max_retries: int) -> None:
    policy = RetryPolicy(max_retries=max_retries, jitter=0)
    decisions, state = _simulate(policy, ConnectionError("down"))
    assert [d.retry for d in decisions] == [True] * max_retries + [False]
    assert state.attempt_number == max_retries + 1


def test_exact_exponential_delays_without_jitter() -> None:
    policy = RetryPolicy(max_retries=6, backoff_base=0.25, backoff_factor=2.0, jitter=0)
    decisions, _ = _simulate(policy, ConnectionError("down"))
    assert _delays(decisions) == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
    assert decisions[-1] == RetryDecision(False, 0.0)


def test_delays_capped_at_max_backoff() -> None:
    policy = RetryPolicy(
        max_retries=6, backoff_base=1.0, backoff_factor=3.0, max_backoff=10.0, jitter=0
    )
    decisions, _ = _simulate(policy, TimeoutError())
    expected = [min(10.0, 1.0 * 3.0 ** (n - 1)) for n in range(1, 7)]
    assert expected == [1.0, 3.0, 9.0, 10.0, 10.0, 10.0]
    assert _delays(decisions) == expected


def test_factor_one_gives_constant_delay() -> None:
    policy = RetryPolicy(max_retries=4, backoff_base=1.5, backoff_factor=1.0, jitter=0)
    decisions, _ = _simulate(policy, ConnectionError())
    assert _delays(decisions) == [1.5, 1.5, 1.5, 1.5]


def test_zero_base_gives_zero_delay() -> None:
    policy = RetryPolicy(max_retries=2, backoff_base=0.0, jitter=0.5)
    decisions, _ = _simulate(policy, ConnectionError())
    assert _delays(decisions) == [0.0, 0.0]


def test_default_policy_delays_with_jitter_are_bounded() -> None:
    policy = RetryPolicy(max_retries=5)  # default jitter 0.1
    decisions, _ = _simulate(policy, ConnectionError())
    delays = _delays(decisions)
    assert len(delays) == 5
    for n, d in enumerate(delays, start=1):
        base = 2.0 ** (n - 1)
        assert base <= d <= base * 1.1


# -- what is retried -------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [ValueError("bad"), KeyError("k"), RuntimeError("boom"), PermissionError("denied")],
)
def test_non_retryable_exception_gives_up_at_once(error: BaseException) -> None:
    policy = RetryPolicy(max_retries=5, jitter=0)
    decisions, state = _simulate(policy, error)
    assert decisions == [RetryDecision(False, 0.0)]
    assert state.attempt_number == 1


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("x"),
        ConnectionResetError("x"),  # subclass of ConnectionError
        TimeoutError("x"),
        AttemptTimeout("deadline"),
    ],
)
def test_default_retry_on_includes_subclasses(error: BaseException) -> None:
    policy = RetryPolicy(max_retries=1, jitter=0)
    decisions, _ = _simulate(policy, error)
    assert decisions == [RetryDecision(True, 1.0), RetryDecision(False, 0.0)]


def test_custom_retry_on() -> None:
    policy = RetryPolicy(max_retries=3, retry_on=(ValueError,), jitter=0)
    decisions, _ = _simulate(policy, ValueError("flaky"))
    assert _delays(decisions) == [1.0, 2.0, 4.0]
    decisions, _ = _simulate(policy, ConnectionError("no longer retried"))
    assert decisions == [RetryDecision(False, 0.0)]


def test_retryable_then_non_retryable_stops() -> None:
    policy = RetryPolicy(max_retries=5, jitter=0)
    decisions, state = _simulate(policy, [ConnectionError(), ConnectionError(), KeyError()])
    assert [d.retry for d in decisions] == [True, True, False]
    assert state.attempt_number == 3


def test_attempt_timeout_is_a_timeout_error() -> None:
    assert issubclass(AttemptTimeout, TimeoutError)
    assert isinstance(AttemptTimeout(), RetryPolicy().retry_on)


# -- timeouts --------------------------------------------------------------------------


def test_timed_out_mutating_call_is_never_retried() -> None:
    policy = RetryPolicy(max_retries=5, jitter=0)
    decisions, _ = _simulate(policy, AttemptTimeout(), read_only=False, timed_out=True)
    assert decisions == [RetryDecision(False, 0.0)]


def test_timed_out_mutating_call_not_retried_even_with_permissive_policy() -> None:
    policy = RetryPolicy(
        stop=tenacity.stop_never,
        retry=tenacity.retry_always,
        wait=tenacity.wait_fixed(0.1),
    )
    state = new_retry_state()
    record_failure(state, 1, AttemptTimeout())
    assert policy.decide(state, read_only=False, timed_out=True) == RetryDecision(False, 0.0)
    # The same failure without the timeout flag is retried.
    assert policy.decide(state, read_only=False, timed_out=False) == RetryDecision(True, 0.1)


def test_timed_out_read_only_call_is_retried() -> None:
    policy = RetryPolicy(max_retries=2, jitter=0)
    decisions, _ = _simulate(policy, AttemptTimeout(), read_only=True, timed_out=True)
    assert decisions == [
        RetryDecision(True, 1.0),
        RetryDecision(True, 2.0),
        RetryDecision(False, 0.0),
    ]


def test_timed_out_read_only_not_retried_when_timeouts_excluded() -> None:
    policy = RetryPolicy(max_retries=2, retry_on=(ConnectionError,), jitter=0)
    decisions, _ = _simulate(policy, AttemptTimeout(), read_only=True, timed_out=True)
    assert decisions == [RetryDecision(False, 0.0)]


def test_failing_mutating_call_without_timeout_is_retried() -> None:
    policy = RetryPolicy(max_retries=1, jitter=0)
    decisions, _ = _simulate(policy, ConnectionError(), read_only=False, timed_out=False)
    assert decisions == [RetryDecision(True, 1.0), RetryDecision(False, 0.0)]


# -- jitter ----------------------------------------------------------------------------


def test_jitter_bounds_and_spread() -> None:
    wait = wait_proportional_jitter(tenacity.wait_fixed(2.0), 0.25, rng=random.Random(1234))
    state = new_retry_state()
    samples = [wait(state) for _ in range(1000)]
    assert all(2.0 <= s <= 2.5 for s in samples)
    assert len(set(samples)) > 1
    # The spread covers most of the range, not a corner of it.
    assert min(samples) < 2.05
    assert max(samples) > 2.45


def test_jitter_through_policy_bounds() -> None:
    policy = RetryPolicy(max_retries=1, backoff_base=4.0, jitter=0.5)
    samples = []
    for _ in range(1000):
        state = new_retry_state()
        record_failure(state, 1, ConnectionError())
        decision = policy.decide(state, read_only=True, timed_out=False)
        assert decision.retry
        samples.append(decision.delay)
    assert all(4.0 <= s <= 6.0 for s in samples)
    assert len(set(samples)) > 1


def test_zero_jitter_is_exact_and_does_not_use_rng() -> None:
    class NoRandom(random.Random):
        def uniform(self, a: float, b: float) -> float:
            raise AssertionError("rng used with jitter=0")

    wait = wait_proportional_jitter(tenacity.wait_fixed(3.0), 0.0, rng=NoRandom())
    assert wait(new_retry_state()) == 3.0


def test_jitter_seeded_rng_is_reproducible() -> None:
    a = wait_proportional_jitter(tenacity.wait_fixed(1.0), 0.3, rng=random.Random(7))
    b = wait_proportional_jitter(tenacity.wait_fixed(1.0), 0.3, rng=random.Random(7))
    state = new_retry_state()
    assert [a(state) for _ in range(20)] == [b(state) for _ in range(20)]


def test_jitter_stretches_inner_wait_per_attempt() -> None:
    class Max(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    inner = tenacity.wait_exponential(multiplier=1, exp_base=2, min=0, max=100)
    wait = wait_proportional_jitter(inner, 0.5, rng=Max())
    state = new_retry_state()
    state.attempt_number = 3
    assert wait(state) == 4.0 * 1.5


# -- tenacity strategies ---------------------------------------------------------------


def test_custom_stop_after_attempt_or_delay() -> None:
    policy = RetryPolicy(
        stop=tenacity.stop_after_attempt(2) | tenacity.stop_after_delay(100),
        wait=tenacity.wait_fixed(0.5),
    )
    decisions, _ = _simulate(policy, ConnectionError())
    assert decisions == [RetryDecision(True, 0.5), RetryDecision(False, 0.0)]


def test_custom_stop_after_delay_triggers_on_elapsed_time() -> None:
    policy = RetryPolicy(
        stop=tenacity.stop_after_attempt(10) | tenacity.stop_after_delay(100),
        wait=tenacity.wait_fixed(0.5),
    )
    state = new_retry_state()
    record_failure(state, 1, ConnectionError())
    assert policy.decide(state, read_only=True, timed_out=False) == RetryDecision(True, 0.5)
    # Pretend the call started 150 s ago (no real waiting).
    state.start_time -= 150
    record_failure(state, 2, ConnectionError())
    assert policy.decide(state, read_only=True, timed_out=False) == RetryDecision(False, 0.0)


def test_stop_before_delay_sees_upcoming_sleep() -> None:
    # decide() sets upcoming_sleep before asking stop, as tenacity itself does.
    short = RetryPolicy(stop=tenacity.stop_before_delay(10), wait=tenacity.wait_fixed(0.5))
    long = RetryPolicy(stop=tenacity.stop_before_delay(10), wait=tenacity.wait_fixed(20))
    state = new_retry_state()
    record_failure(state, 1, TimeoutError())
    assert short.decide(state, read_only=True, timed_out=False) == RetryDecision(True, 0.5)
    assert long.decide(state, read_only=True, timed_out=False) == RetryDecision(False, 0.0)


def test_custom_wait_fixed_replaces_backoff() -> None:
    policy = RetryPolicy(max_retries=3, wait=tenacity.wait_fixed(0.5))
    decisions, _ = _simulate(policy, ConnectionError())
    assert _delays(decisions) == [0.5, 0.5, 0.5]
    assert not decisions[-1].retry


def test_custom_wait_composed_by_addition() -> None:
    policy = RetryPolicy(
        max_retries=3,
        wait=tenacity.wait_fixed(1) + tenacity.wait_incrementing(start=0, increment=2),
    )
    decisions, _ = _simulate(policy, ConnectionError())
    assert _delays(decisions) == [1.0, 3.0, 5.0]


def test_custom_wait_chain() -> None:
    policy = RetryPolicy(
        max_retries=4,
        wait=tenacity.wait_chain(tenacity.wait_fixed(0.1), tenacity.wait_fixed(0.2)),
    )
    decisions, _ = _simulate(policy, ConnectionError())
    assert _delays(decisions) == [0.1, 0.2, 0.2, 0.2]


def test_negative_wait_is_clamped_to_zero() -> None:
    class Negative(tenacity.wait.wait_base):
        def __call__(self, retry_state: RetryCallState) -> float:
            return -3.0

    policy = RetryPolicy(max_retries=1, wait=Negative())
    decisions, _ = _simulate(policy, ConnectionError())
    assert decisions[0] == RetryDecision(True, 0.0)


def test_custom_retry_on_message() -> None:
    policy = RetryPolicy(
        max_retries=3,
        jitter=0,
        retry=tenacity.retry_if_exception_message(match=r"rate limit"),
    )
    decisions, _ = _simulate(policy, ValueError("rate limit exceeded"))
    assert _delays(decisions) == [1.0, 2.0, 4.0]
    # The custom predicate replaces retry_on entirely.
    decisions, _ = _simulate(policy, ConnectionError("connection reset"))
    assert decisions == [RetryDecision(False, 0.0)]


def test_custom_retry_composed_with_or_and_and() -> None:
    is_key_error = tenacity.retry_if_exception_type(KeyError)
    says_try_again = tenacity.retry_if_exception_message(message="try again")
    retry_either = is_key_error | says_try_again
    policy = RetryPolicy(max_retries=1, jitter=0, retry=retry_either)
    assert _simulate(policy, KeyError("k"))[0][0].retry
    assert _simulate(policy, RuntimeError("try again"))[0][0].retry
    assert not _simulate(policy, RuntimeError("fatal"))[0][0].retry

    is_runtime_error = tenacity.retry_if_exception_type(RuntimeError)
    not_fatal = tenacity.retry_if_not_exception_message(match="fatal.*")
    retry_both = is_runtime_error & not_fatal
    policy = RetryPolicy(max_retries=1, jitter=0, retry=retry_both)
    assert _simulate(policy, RuntimeError("transient"))[0][0].retry
    assert not _simulate(policy, RuntimeError("fatal: disk"))[0][0].retry
    assert not _simulate(policy, KeyError("transient"))[0][0].retry


def test_custom_retry_predicate_sees_the_exception() -> None:
    seen: list[BaseException] = []

    def predicate(e: BaseException) -> bool:
        seen.append(e)
        return getattr(e, "code", None) == 503

    class HttpError(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(code)
            self.code = code

    policy = RetryPolicy(max_retries=2, jitter=0, retry=tenacity.retry_if_exception(predicate))
    first, second = HttpError(503), HttpError(400)
    decisions, _ = _simulate(policy, [first, second])
    assert [d.retry for d in decisions] == [True, False]
    assert seen == [first, second]


def test_stop_never_with_max_retries_zero_keeps_retrying() -> None:
    policy = RetryPolicy(stop=tenacity.stop_never, wait=tenacity.wait_fixed(0))
    decisions, state = _simulate(policy, ConnectionError(), max_attempts=25)
    assert all(d.retry for d in decisions)
    assert len(decisions) == 25
    assert state.attempt_number == 25


def test_retry_checked_before_stop() -> None:
    """A non-retryable error gives up without the stop strategy being consulted."""
    calls: list[int] = []

    class RecordingStop(tenacity.stop.stop_base):
        def __call__(self, retry_state: RetryCallState) -> bool:
            calls.append(retry_state.attempt_number)
            return False

    policy = RetryPolicy(stop=RecordingStop(), wait=tenacity.wait_fixed(0))
    _simulate(policy, [ConnectionError(), ConnectionError(), ValueError()])
    assert calls == [1, 2]


# -- retryable override (ToolError(retryable=...)) ---------------------------------------


def _decide_once(
    policy: RetryPolicy,
    error: BaseException,
    *,
    retryable: bool | None,
    read_only: bool = True,
    timed_out: bool = False,
) -> RetryDecision:
    state = new_retry_state()
    record_failure(state, 1, error)
    return policy.decide(state, read_only=read_only, timed_out=timed_out, retryable=retryable)


def test_retryable_false_overrides_retry_on() -> None:
    policy = RetryPolicy(max_retries=3, jitter=0)
    assert _decide_once(policy, ConnectionError(), retryable=None) == RetryDecision(True, 1.0)
    assert _decide_once(policy, ConnectionError(), retryable=False) == RetryDecision(False, 0.0)


def test_retryable_true_overrides_retry_predicate() -> None:
    policy = RetryPolicy(max_retries=3, jitter=0)
    assert _decide_once(policy, ValueError(), retryable=None) == RetryDecision(False, 0.0)
    assert _decide_once(policy, ValueError(), retryable=True) == RetryDecision(True, 1.0)


def test_retryable_true_still_obeys_stop_and_wait() -> None:
    policy = RetryPolicy(max_retries=2, backoff_base=0.5, jitter=0)
    state = new_retry_state()
    decisions = []
    for attempt in range(1, 5):
        record_failure(state, attempt, ToolError("busy", retryable=True))
        d = policy.decide(state, read_only=False, timed_out=False, retryable=True)
        decisions.append(d)
        if not d.retry:
            break
    assert decisions == [RetryDecision(True, 0.5), RetryDecision(True, 1.0), RetryDecision(False)]
    assert _decide_once(NO_RETRY, ValueError(), retryable=True) == RetryDecision(False, 0.0)


def test_retryable_true_cannot_retry_timed_out_mutating_call() -> None:
    policy = RetryPolicy(max_retries=3, jitter=0)
    d = _decide_once(policy, AttemptTimeout(), retryable=True, read_only=False, timed_out=True)
    assert d == RetryDecision(False, 0.0)


def _failure(error: BaseException) -> AttemptFailure:
    state = new_retry_state()
    record_failure(state, 1, error)
    return AttemptFailure(
        attempt=1, error=error, timed_out=False, read_only=True, policy=NO_RETRY, state=state
    )


def test_attempt_failure_retryable() -> None:
    class Flagged(Exception):
        retryable = "yes"  # not a bool: ignored

    assert _failure(ToolError("x", retryable=True)).retryable is True
    assert _failure(ToolError("x", retryable=False)).retryable is False
    assert _failure(ToolError("x")).retryable is None
    assert _failure(ConnectionError()).retryable is None
    assert _failure(Flagged()).retryable is None
