"""`quota`: a budget of calls, per tool or per key, for the policy's lifetime or a sliding window.

Asked at submission (`at_submission = True`): on the caller's thread, in the
batch's order, before the batch fans out. So in a batch over budget the first
calls run and the rest end `rejected` (`QUOTA_EXCEEDED`), and batches submitted
from several threads at once never overshoot: each admission is counted under
the policy's lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._options import positive_int, positive_number
from ..models import ErrorCode, ToolCall, ToolResult
from ._keyed import KeyFunction, check_key, key_of, seconds_text
from ._protocol import ADMIT, BasePolicy, Decision, Reject
from ._signals import scrub

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Quota", "quota"]


class Quota(BasePolicy):
    """At most `max_calls` calls admitted per key (per tool by default): for
    the policy object's lifetime (`window=None`) or in any `window` seconds.

    Promises: the calls it admits are counted at once, so however many threads
    submit, no more than `max_calls` are admitted per key (per window). What it
    counts is admissions: the call is asked about once (retries are the same
    call and do not count), and an admitted call counts however it is
    answered: run, or refused after the quota (its arguments invalid, another
    policy rejecting it, a person denying it). A call that ends unanswered
    gives its unit back when told how it ended: `deferred` for an approval,
    or `cancelled` before its first attempt (its batch cancelled, stopped, or
    aborted behind a deferred call), or refused before it for a full queue
    (`OVERLOADED`: `max_queued`, shed for a higher priority): it was not let
    through to run, and the same call comes again (approved, resubmitted) to
    be counted then. Over
    budget, the call ends `rejected` with `QUOTA_EXCEEDED` and a message the
    model can read. `reset()` starts over.
    """

    at_submission = True

    def __init__(
        self,
        max_calls: int,
        *,
        window: float | None = None,
        key: KeyFunction | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.max_calls = positive_int(max_calls, "max_calls", "quota")
        self.window = None if window is None else positive_number(window, "window", "quota")
        self._key = check_key(key, "quota")
        if clock is not None and not callable(clock):
            raise TypeError(f"quota: clock must be callable, got {clock!r}")
        self._clock = clock
        per = f" per {self.window:g} s" if self.window is not None else ""
        self.name = f"quota({self.max_calls}{per}{', per key' if key is not None else ''})"
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}  # window None: admissions per key
        self._times: dict[str, deque[float]] = {}  # a window: their times, oldest first
        # The admissions whose calls have not ended yet, by the call object
        # asked about (`on_result` gets the same one; ids repeat): (the call,
        # key, at), the oldest first (one object may be submitted twice).
        # What a unit given back is taken from: the key as it was at
        # admission (hooks may change the arguments a key is taken from).
        self._open: dict[int, list[tuple[ToolCall, str, float]]] = {}

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        """Admit and count `call` if its key has budget left; else `Reject(QUOTA_EXCEEDED)`."""
        # At submission the arguments are not masked yet: a failing key function's
        # message may quote them (int('sk-...')), so only its type is told.
        key = key_of(call, self._key, self.name, detail=False)
        if isinstance(key, Reject):
            return key
        at = self._clock() if self._clock is not None else now
        with self._lock:
            frees_in = self._take(key, at)
            if frees_in is None:
                self._open.setdefault(id(call), []).append((call, key, at))
        if frees_in is None:
            return ADMIT
        return Reject(ErrorCode.QUOTA_EXCEEDED, self._refusal(call, key, frees_in))

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
        """An admitted call ended: it stays counted, unless it ended
        unanswered (deferred, or cancelled before it was attempted)."""
        with self._lock:
            admitted = self._open.get(id(call))
            if not admitted:
                return  # admitted before a reset(), or not by this policy
            _, key, at = admitted.pop(0)
            if not admitted:
                del self._open[id(call)]
            if _unanswered(result):
                self._give_back(key, at)

    def _give_back(self, key: str, at: float) -> None:
        """Uncount the admission of `key` at `at` (under the lock)."""
        if self.window is None:
            used = self._counts.get(key, 0)
            if used > 1:
                self._counts[key] = used - 1
            else:
                self._counts.pop(key, None)
            return
        times = self._times.get(key)
        if times is not None and at in times:  # (not if it left the window already)
            times.remove(at)

    def _take(self, key: str, at: float) -> float | None:
        """Count one admission for `key` at `at`: None if there was room; else
        the seconds until there is (0 for a lifetime budget: never). Pure over
        the policy's state and `at`; call it holding the lock."""
        if self.window is None:
            used = self._counts.get(key, 0)
            if used >= self.max_calls:
                return 0.0
            self._counts[key] = used + 1
            return None
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = deque()
        horizon = at - self.window
        while times and times[0] <= horizon:  # out of the window: no longer counted
            times.popleft()
        if len(times) >= self.max_calls:
            return times[0] - horizon
        times.append(at)
        return None

    def used(self, key: str, now: float | None = None) -> int:
        """How many admissions count against `key` (a tool's name, for a quota
        per tool) at `now` (default: the policy's clock, else `time.monotonic()`)."""
        if now is None:
            now = self._clock() if self._clock is not None else time.monotonic()
        with self._lock:
            if self.window is None:
                return self._counts.get(key, 0)
            return sum(1 for t in self._times.get(key, ()) if t > now - self.window)

    def reset(self) -> None:
        """Start over: every key's budget is whole again."""
        with self._lock:
            self._counts.clear()
            self._times.clear()
            self._open.clear()  # the calls in flight count against nothing now

    def _refusal(self, call: ToolCall, key: str, frees_in: float) -> str:
        # Masked like the call's arguments: a key may be taken from a secret one.
        whose = f" for {scrub(key)!r}" if self._key is not None else f" for tool '{call.name}'"
        if self.window is None:
            return (
                f"Quota exceeded{whose}: at most {self.max_calls} calls, all used. This call "
                "was not made; do not call it again."
            )
        return (
            f"Quota exceeded{whose}: at most {self.max_calls} calls in any {self.window:g} s. "
            f"This call was not made; the next one may be made in {seconds_text(frees_in)}."
        )


def _unanswered(result: ToolResult) -> bool:
    """The call ended without running and without an answer to its caller: it
    waits for an approval, or was cancelled or refused for a full queue
    (`OVERLOADED`: "try again later") before its first attempt."""
    if result.status == "deferred":
        return True
    if result.attempts:
        return False
    return result.status == "cancelled" or result.error_code is ErrorCode.OVERLOADED


def quota(
    max_calls: int,
    window: float | None = None,
    key: KeyFunction | None = None,
    *,
    clock: Callable[[], float] | None = None,
) -> Quota:
    """At most `max_calls` calls per tool (or per `key(call)`): for the policy
    object's lifetime, or in any `window` seconds (a sliding count).

    Give one object to several executors and they share its budget. `clock`
    replaces the executor's clock (for tests). Calls over budget end `rejected`
    (`QUOTA_EXCEEDED`); in a batch, the first calls in order are the ones that run.
    """
    return Quota(max_calls, window=window, key=key, clock=clock)
