"""Retry decisions, made with tenacity's strategies but without its sleep loop.

The supervisor never sleeps: after a failed attempt a worker asks the policy
"retry, and after how long?" and the supervisor arms a timer. Decisions follow
tenacity's own order: `retry(state)` says whether the outcome is worth retrying,
`wait(state)` gives the delay, `stop(state)` gives up.

Rules that no policy can override: rejections are never retried (they never
reach a policy), and a timed-out attempt of a mutating tool is not retried
because the abandoned attempt may still complete.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import tenacity
from tenacity import RetryCallState
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from ._options import non_negative_int, non_negative_number, positive_number

__all__ = [
    "AttemptFailure",
    "AttemptTimeout",
    "RetryDecision",
    "RetryPolicy",
    "new_retry_state",
    "record_failure",
    "wait_proportional_jitter",
]


class AttemptTimeout(TimeoutError):
    """The outcome recorded for an attempt that did not finish by its deadline."""


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """What `should_retry` is told about a failed attempt.

    `state` is the call's tenacity `RetryCallState`, with this failure recorded,
    so any tenacity strategy can be evaluated on it. `read_only` is true when
    running the call again is safe: the tool is read-only or `idempotent`.
    """

    attempt: int
    error: BaseException
    timed_out: bool
    read_only: bool
    policy: RetryPolicy
    state: RetryCallState

    @property
    def retryable(self) -> bool | None:
        """What the tool said about this failure (`ToolError(retryable=...)`), if anything."""
        value = getattr(self.error, "retryable", None)
        return value if isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """`retry` and the `delay` in seconds before the next attempt."""

    retry: bool
    delay: float = 0.0

    @classmethod
    def give_up(cls) -> RetryDecision:
        return _GIVE_UP


_GIVE_UP = RetryDecision(False, 0.0)


class wait_proportional_jitter(wait_base):
    """Stretch another wait by a random factor in `[1, 1 + jitter]` (Akka's randomFactor)."""

    def __init__(self, inner: wait_base, jitter: float, rng: random.Random | None = None) -> None:
        self.inner = inner
        self.jitter = jitter
        self.rng = rng or random.Random()

    def __call__(self, retry_state: RetryCallState) -> float:
        base: float = self.inner(retry_state)
        return base * (1.0 + self.rng.uniform(0.0, self.jitter)) if self.jitter else base


def _exception_types(value: object) -> tuple[type[BaseException], ...]:
    """`retry_on` as a tuple of exception classes (one class alone is accepted too)."""
    items = (value,) if isinstance(value, type) else value
    if isinstance(items, tuple | list) and all(
        isinstance(t, type) and issubclass(t, BaseException) for t in items
    ):
        return tuple(items)
    raise TypeError(f"RetryPolicy: retry_on must be a tuple of exception classes, got {value!r}")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed attempt is tried again.

    The simple knobs build tenacity strategies; pass `stop`, `wait` or `retry`
    (any tenacity strategy object, composable with `|` and `&`) to take full
    control of that part. `max_retries=0` means one attempt and no retries.

    Delay before retry n (n = 1, 2, ...) is
    `min(max_backoff, backoff_base * backoff_factor ** (n - 1))`, stretched by up
    to `jitter` (0.1 = up to 10 % longer).

    Every setting is checked when the policy is made: a non-number (`bool` and
    `"1"` included), NaN, infinity or a value out of range (`max_retries`,
    `backoff_base`, `max_backoff`, `jitter` >= 0; `backoff_factor` > 0) raises
    `TypeError` or `ValueError` naming the option; so does a `retry_on` that is
    not a tuple of exception classes, or a `stop`/`wait`/`retry` that is not callable.
    """

    max_retries: int = 0
    backoff_base: float = 1.0
    backoff_factor: float = 2.0
    max_backoff: float = 30.0
    jitter: float = 0.1
    retry_on: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    stop: stop_base | None = None
    wait: wait_base | None = None
    retry: retry_base | None = None
    _strategies: tuple[stop_base, wait_base, retry_base] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Checked here, not at first use: a bad number in a policy would
        # otherwise surface as a failed retry decision in the middle of a call.
        checked = {
            "max_retries": non_negative_int(self.max_retries, "max_retries", "RetryPolicy"),
            "backoff_base": non_negative_number(self.backoff_base, "backoff_base", "RetryPolicy"),
            "backoff_factor": positive_number(self.backoff_factor, "backoff_factor", "RetryPolicy"),
            "max_backoff": non_negative_number(self.max_backoff, "max_backoff", "RetryPolicy"),
            "jitter": non_negative_number(self.jitter, "jitter", "RetryPolicy"),
            "retry_on": _exception_types(self.retry_on),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        for name in ("stop", "wait", "retry"):
            strategy = getattr(self, name)
            if strategy is not None and not callable(strategy):
                raise TypeError(
                    f"RetryPolicy: {name} must be a tenacity strategy, "
                    f"got {type(strategy).__name__}"
                )
        stop = self.stop or tenacity.stop_after_attempt(self.max_retries + 1)
        wait: wait_base = self.wait or wait_proportional_jitter(
            tenacity.wait_exponential(
                multiplier=self.backoff_base,
                exp_base=self.backoff_factor,
                min=0,
                max=self.max_backoff,
            ),
            self.jitter,
        )
        retry = self.retry or tenacity.retry_if_exception_type(self.retry_on)
        object.__setattr__(self, "_strategies", (stop, wait, retry))

    @property
    def max_attempts(self) -> int | None:
        """The most attempts a call gets, the first included; None when `stop` sets no
        count this can read (say, only a delay)."""
        stop = self._strategies[0]
        if isinstance(stop, tenacity.stop_after_attempt):
            return int(stop.max_attempt_number)
        parts = getattr(stop, "stops", ())
        counts = [
            int(s.max_attempt_number) for s in parts if isinstance(s, tenacity.stop_after_attempt)
        ]
        if counts and isinstance(stop, tenacity.stop_any):  # `a | b`: the first to stop it
            return min(counts)
        if counts and isinstance(stop, tenacity.stop_all) and len(counts) == len(parts):
            return max(counts)  # `a & b`: only when every one says stop
        return None

    @property
    def may_retry(self) -> bool:
        """False when the policy can never retry (lets the hot path skip bookkeeping)."""
        return self.max_retries > 0 or self.stop is not None

    def decide(
        self,
        state: RetryCallState,
        *,
        read_only: bool,
        timed_out: bool,
        retryable: bool | None = None,
    ) -> RetryDecision:
        """Decide after a failure already recorded on `state` (see `record_failure`).

        `retryable` (from `ToolError`) overrides the `retry` predicate either
        way; `stop` and `wait` still apply.
        """
        if timed_out and not read_only:
            return _GIVE_UP
        stop, wait, retry = self._strategies
        if retryable is False or (retryable is None and not retry(state)):
            return _GIVE_UP
        delay = max(0.0, float(wait(state)))
        state.upcoming_sleep = delay
        if stop(state):
            return _GIVE_UP
        return RetryDecision(True, delay)


NO_RETRY = RetryPolicy()


def new_retry_state() -> RetryCallState:
    """A tenacity state for one call, built by hand as tenacity's own tests do."""
    return RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]


def record_failure(state: RetryCallState, attempt: int, error: BaseException) -> None:
    """Record attempt number `attempt` as failed with `error` on `state`."""
    if attempt > state.attempt_number:
        # The previous decision said "retry"; account for the wait tenacity
        # would have slept, then move to this attempt.
        state.idle_for += state.upcoming_sleep or 0.0
        state.prepare_for_next_attempt()
        state.attempt_number = attempt
    state.set_exception((type(error), error, error.__traceback__))
