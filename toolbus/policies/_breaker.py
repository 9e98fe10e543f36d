"""`circuit_breaker`: stop calling a tool that keeps failing, then try it again.

Per tool (or per key), a circuit is closed (calls run), open (calls end
`rejected` with `CIRCUIT_OPEN` at once, and are never retried: a rejection
never is) or half-open (one trial call runs; the others are rejected while it
does). `failures` failures in a row, all within `window` seconds, open it;
`reset_after` seconds later the next call is the trial; its success closes
the circuit, its failure opens it again.

The breaker hears how a call ended from `on_result`, which the executor calls
for every call it admitted, with the terminal result (after retries), however
the call ended. Only a result of the tool having run is evidence: `ok`, or a
failure (`error`, `timeout`, a crash) with at least one attempt. A call that
ended without running (rejected by a later policy, cancelled while it waited,
deferred for approval, answered from a cache) says nothing about the tool; if
it was the trial, the next call becomes the trial, so a circuit never stays
half-open for want of a result. The trial lapses when it ends (the executor
tells every policy that admitted a call how it ended, once, however it
ended); as a safety bound only, one still unheard of `reset_after` seconds
after its whole-call deadline (`call_timeout`) is presumed lost likewise. A
trial without a whole-call deadline that never ends (a tool hung without a
timeout) keeps the circuit half-open: its retries and backoffs are never
guessed, so two trials never run at once.

A result counts only in the state its call was admitted in: calls that were
running when the circuit opened do not keep it open longer, nor close it.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._options import positive_int, positive_number
from ..models import ErrorCode, ToolCall, ToolResult
from ._keyed import KeyFunction, check_key, key_of, seconds_text
from ._protocol import ADMIT, BasePolicy, Decision, Reject
from ._signals import (
    CIRCUIT_CLOSED,
    CIRCUIT_HALF_OPEN,
    CIRCUIT_OPEN,
    CircuitChanged,
    announce,
    asked_by_an_executor,
    scrub,
    time_left,
)

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker", "circuit_breaker"]

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half-open"

_SIGNALS = {OPEN: CIRCUIT_OPEN, HALF_OPEN: CIRCUIT_HALF_OPEN, CLOSED: CIRCUIT_CLOSED}


@dataclass(slots=True)
class _Circuit:
    """One key's circuit."""

    state: str = CLOSED
    failures: deque[float] = field(default_factory=deque)  # times of the failures in a row
    opened_at: float = 0.0
    # Bumped at every change of state: a call's result counts only if the
    # circuit is still in the state (the generation) it was admitted in.
    generation: int = 0
    trial: ToolCall | None = None  # half-open: the trial call (itself: ids may repeat)
    trial_lapses: float = 0.0  # when a trial without a result is presumed lost


@dataclass(frozen=True, slots=True)
class _Change:
    """A change of state to announce (after the lock is let go)."""

    state: str
    failures: int
    call: ToolCall


class CircuitBreaker(BasePolicy):
    """A closed -> open -> half-open -> closed circuit per tool (or per key).

    Promises: after `failures` failures in a row within `window` seconds, the
    key's calls end `rejected` (`CIRCUIT_OPEN`) at once, without running, for
    `reset_after` seconds; then one trial call runs while the others are still
    rejected; its success closes the circuit, its failure opens it again for
    `reset_after`. A success while closed clears the failures. Each change is
    announced: `tool:circuit-open`, `tool:circuit-half-open`,
    `tool:circuit-closed` (a `CircuitChanged` event).
    """

    def __init__(
        self,
        failures: int = 5,
        *,
        window: float = 60.0,
        reset_after: float = 30.0,
        key: KeyFunction | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.failures = positive_int(failures, "failures", "circuit_breaker")
        self.window = positive_number(window, "window", "circuit_breaker")
        self.reset_after = positive_number(reset_after, "reset_after", "circuit_breaker")
        self._key = check_key(key, "circuit_breaker")
        if clock is not None and not callable(clock):
            raise TypeError(f"circuit_breaker: clock must be callable, got {clock!r}")
        self._clock = clock
        per = ", per key" if key is not None else ""
        self.name = f"circuit_breaker({self.failures} in {self.window:g} s{per})"
        self._lock = threading.Lock()
        self._circuits: dict[str, _Circuit] = {}
        # Calls admitted and not yet ended: id() of the call -> (the call, its
        # key, generation). Known by the object, not its id, which a model may
        # repeat (the executor tells `on_result` the call it asked `admit`
        # about; holding it keeps its id() from being reused meanwhile). The
        # key is kept, not asked again: `on_result` may run on another
        # thread, where a key read from the caller's context variables would differ.
        self._admitted: dict[int, tuple[ToolCall, str, int]] = {}

    # -- the seam ----------------------------------------------------------------------

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        """Admit `call` unless its circuit is open (or half-open with a trial under way)."""
        key = key_of(call, self._key, self.name)
        if isinstance(key, Reject):
            return key
        at = self._clock() if self._clock is not None else now
        # How long a trial may go on before it is presumed lost. Asked by an
        # executor, it is told how its call ended (`on_result`, once, however
        # it ended: cancelled, timed out, its executor closed), so it lapses
        # then; the whole-call deadline, if it has one, is only a safety
        # bound. Its retries' number and backoffs (a tenacity strategy, a
        # `should_retry` hook's delays) are not guessed: none is presumed to
        # end sooner than it does. Asked directly (a test, no executor to
        # tell it), `reset_after` alone.
        timeout: float | None = None
        if asked_by_an_executor():
            left = time_left()
            timeout = math.inf if left is None else max(0.0, left)
        with self._lock:
            circuit = self._circuits.get(key)
            if circuit is None:
                circuit = self._circuits[key] = _Circuit()
            decision, change = self._admit(circuit, call, at, timeout)
            if decision is ADMIT:
                self._admitted[id(call)] = (call, key, circuit.generation)
        self._announce(change, key)
        return decision

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        """Count how `call` ended toward its circuit's state (the result stands: None)."""
        at = self._clock() if self._clock is not None else now
        with self._lock:
            admitted = self._admitted.pop(id(call), None)
            if admitted is None:  # not one this breaker admitted
                return None
            _, key, generation = admitted
            change = self._ended(self._circuits[key], generation, call, result, at)
        self._announce(change, key)
        return None

    # -- the state machine: pure over the circuit, the call and the time --------------

    def _admit(
        self, c: _Circuit, call: ToolCall, at: float, timeout: float | None
    ) -> tuple[Decision, _Change | None]:
        change = None
        if c.state == OPEN:
            if at - c.opened_at < self.reset_after:
                retry_in = c.opened_at + self.reset_after - at
                return Reject(ErrorCode.CIRCUIT_OPEN, self._open_text(call, retry_in)), None
            c.state, c.trial = HALF_OPEN, None
            c.generation += 1
            change = _Change(HALF_OPEN, len(c.failures), call)
        if c.state == HALF_OPEN:
            if c.trial is not None and at < c.trial_lapses:
                return Reject(ErrorCode.CIRCUIT_OPEN, self._trial_text(call)), change
            # This call is the trial (the first, or the one after a trial that
            # ended saying nothing, or was presumed lost).
            c.trial = call
            c.trial_lapses = at + (timeout or 0.0) + self.reset_after
        return ADMIT, change

    def _ended(
        self, c: _Circuit, generation: int, call: ToolCall, result: ToolResult, at: float
    ) -> _Change | None:
        verdict = _verdict(result)
        if c.state == HALF_OPEN and c.trial is call and verdict is None:
            c.trial = None  # the trial said nothing: the next call is the trial
        if generation != c.generation or verdict is None:
            return None  # admitted in an earlier state, or not evidence about the tool
        if c.state == CLOSED:
            if verdict:
                c.failures.clear()
                return None
            c.failures.append(at)
            while c.failures and c.failures[0] <= at - self.window:
                c.failures.popleft()  # too old to be part of this run of failures
            if len(c.failures) < self.failures:
                return None
            return self._open(c, call, at)
        if c.state == HALF_OPEN:
            if not verdict:
                c.failures.append(at)
                return self._open(c, call, at)
            c.state, c.trial = CLOSED, None
            c.generation += 1
            c.failures.clear()
            return _Change(CLOSED, 0, call)
        return None

    def _open(self, c: _Circuit, call: ToolCall, at: float) -> _Change:
        c.state, c.trial, c.opened_at = OPEN, None, at
        c.generation += 1
        return _Change(OPEN, len(c.failures), call)

    # -- reading it ----------------------------------------------------------------------

    def state(self, key: str) -> str:
        """The circuit's state for `key` (a tool's name, for a breaker per tool):
        "closed", "open" or "half-open". An open circuit whose pause is over
        stays "open" until a call is asked about."""
        with self._lock:
            circuit = self._circuits.get(key)
            return circuit.state if circuit is not None else CLOSED

    def _announce(self, change: _Change | None, key: str) -> None:
        if change is None:
            return
        # Masked like the call's arguments: a key may be taken from a secret one.
        call, shown = change.call, scrub(key) if self._key is not None else None
        announce(
            _SIGNALS[change.state],
            lambda _batch: CircuitChanged(
                call.name, change.state, change.failures, shown, call_id=call.id
            ),
        )

    def _open_text(self, call: ToolCall, retry_in: float) -> str:
        failed = "it failed" if self.failures == 1 else f"it failed {self.failures} times in a row"
        return (
            f"Tool '{call.name}' is not being called: {failed}, so its circuit breaker is "
            f"open. It will be tried again in {seconds_text(retry_in)}; until then do not "
            "call it (use another tool, or tell the user it is failing)."
        )

    def _trial_text(self, call: ToolCall) -> str:
        return (
            f"Tool '{call.name}' is not being called: after repeated failures its circuit "
            "breaker lets one trial call through, and that call has not finished. Try again "
            "shortly."
        )


def _verdict(result: ToolResult) -> bool | None:
    """True: the tool ran and worked; False: it ran and failed; None: no evidence."""
    if result.attempts < 1:
        return None  # it never ran: rejected, cancelled, deferred, or answered from a cache
    if result.metadata.get("between_attempts") and result.error_code is ErrorCode.DEADLINE_EXCEEDED:
        return None  # the caller's budget ended it between attempts, not the tool
    if result.status == "ok":
        return True
    if result.status in ("error", "timeout") or result.error_code is ErrorCode.TOOL_CRASHED:
        return False
    return None  # cancelled while it ran: the caller's choice, not the tool's fault


def circuit_breaker(
    failures: int = 5,
    window: float = 60.0,
    reset_after: float = 30.0,
    key: KeyFunction | None = None,
    *,
    clock: Callable[[], float] | None = None,
) -> CircuitBreaker:
    """Stop calling a tool after `failures` failures in a row within `window`
    seconds; after `reset_after` seconds let one trial call through, and close
    again if it works. Per tool, or per `key(call)`.

    `clock` replaces the executor's clock (for tests that drive the pause).
    """
    return CircuitBreaker(failures, window=window, reset_after=reset_after, key=key, clock=clock)
