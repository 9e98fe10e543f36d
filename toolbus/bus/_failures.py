"""Receivers' failures, logged under their names and rate-limited.

Reporting a failure never raises: it runs on a delivery thread or in an
observer actor, where anything escaping would stop that receiver's delivery
for good (or, from a pykka actor, stop every actor in the process). So an
exception is described without trusting it: its `__str__` may raise, even a
`BaseException` (`describe_error`, `format_error`).

A receiver's record is kept by its identity, not by its name: two receivers
may share a qualified name (two closures of one factory, lambdas of one
module), and each must have its own first failure logged. Records hold their
receivers weakly (a closed subscription's receiver is not kept alive), and
are dropped once their receiver is gone and what they held back was logged.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Hashable
from types import MethodType
from typing import Any

from ._queues import Route, describe, queue_key

__all__ = ["ERROR_LOG_INTERVAL", "FailureLog", "describe_error", "format_error"]

log = logging.getLogger("toolbus.bus")

ERROR_LOG_INTERVAL = 60.0
_SWEEP_ABOVE = 64  # records kept before the first look for dead receivers


def describe_error(error: BaseException) -> str:
    """`Type: message`; `<exception str() failed>` for the message when the
    exception's `__str__` raises (anything: `SystemExit` included)."""
    try:
        name = type(error).__name__
    except BaseException:
        name = "<exception>"
    try:
        return f"{name}: {error}"
    except BaseException:
        return f"{name}: <exception str() failed>"


def format_error(error: BaseException) -> str:
    """`error`'s traceback, as `traceback.format_exception` writes it, or its
    frames and `describe_error` where that raises (it guards `__str__`, not
    everything: a `__notes__` property that raises gets through)."""
    try:
        return "".join(traceback.format_exception(error))
    except BaseException:
        pass
    try:
        frames = "".join(traceback.format_tb(error.__traceback__))
    except BaseException:
        frames = ""
    return f"Traceback (most recent call last):\n{frames}{describe_error(error)}\n"


class _Failures:
    """One receiver's record: its name, what was held back, and a weak
    reference to the receiver (None: a name, or one that cannot be referenced
    weakly), to tell it from a newcomer given its id once it is gone."""

    __slots__ = ("base", "label", "last", "logged_at", "number", "ref", "unreported")

    def __init__(self, now: float, base: str, number: int, ref: weakref.ref[Any] | None) -> None:
        self.logged_at = now
        self.unreported = 0
        self.last = ""
        self.base = base
        self.number = number
        self.label = base if number == 1 else f"{base} #{number}"
        self.ref = ref

    def dead(self) -> bool:
        return self.ref is not None and self.ref() is None

    def of(self, owner: object, name: str) -> bool:
        """Whether this is the record of `owner` (named `name`), not of one gone
        whose id it was given."""
        if self.ref is not None:
            return self.ref() is owner
        return self.base == name  # no weak reference: its name is all there is to go by


def _identity(who: object) -> tuple[Hashable, object | None, str]:
    """Whose failure this is: its record's key, the object that lives as long
    as it does (None for a failure that is a name, not a receiver's), its name.

    As blinker tells receivers apart: a bound method by its instance and
    function (each lookup makes a new one); a subscription's routes (one per
    signal) are the subscription."""
    if isinstance(who, str):
        return who, None, who
    if type(who) is Route:
        return queue_key(who.owner), who.owner, who.label
    owner = who.__self__ if type(who) is MethodType else who
    return queue_key(who), owner, describe(who)


def _weak(obj: object | None) -> weakref.ref[Any] | None:
    if obj is None:
        return None
    try:
        return weakref.ref(obj)
    except TypeError:  # not weakly referenceable: told apart by its name alone
        return None


class FailureLog:
    """Logs receivers' failures under their names, rate-limited.

    A receiver's first failure is logged with its traceback; after that, at most
    one summary line (how many failures, the last one) per receiver every
    `interval` seconds, and a last one on `flush()` (or once the receiver is
    gone). Two receivers of one name are told apart by a number: `name #2`.
    """

    def __init__(
        self, interval: float = ERROR_LOG_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[Hashable, _Failures] = {}
        self._sweep_at = _SWEEP_ABOVE

    def failed(self, who: object, signal: str, error: BaseException) -> None:
        """Report that `who` (a receiver, a `Route`, a publisher, a hook; or a str
        naming a failure that is no receiver's) raised `error` on `signal`.

        Never raises, whatever `who` and `error` do."""
        try:
            self._failed(who, signal, error)
        except BaseException:  # a bug here: the failure must not stop delivery
            try:
                sys.stderr.write(
                    f"toolbus.bus: could not report a receiver's failure on {signal}\n"
                )
            except BaseException:
                pass

    def _failed(self, who: object, signal: str, error: BaseException) -> None:
        last = f"{describe_error(error)} (on {signal})"  # __str__ is user code: not under the lock
        key, owner, name = _identity(who)
        now = self._clock()
        gone: list[_Failures] = []
        summary: tuple[str, int] | None = None
        with self._lock:
            state = self._records.get(key)
            if state is not None and not state.of(owner, name):
                gone.append(self._records.pop(key))  # its receiver died; this one has its id
                state = None
            if state is None:
                if len(self._records) >= self._sweep_at:
                    gone += self._sweep()
                state = _Failures(now, name, self._number(name), _weak(owner))
                self._records[key] = state
                first = True
            else:
                first = False
                state.unreported += 1
                state.last = last
                if now - state.logged_at >= self.interval:
                    summary = (state.label, state.unreported)
                    state.unreported, state.logged_at = 0, now
        self._report_gone(gone)
        if first:
            log.error(
                "receiver %s raised on %s; other receivers and execution go on "
                "(its further failures: one summary line per %gs):\n%s",
                state.label,
                signal,
                self.interval,
                format_error(error),
            )
        elif summary is not None:
            self._summary(*summary, last)

    def _number(self, base: str) -> int:
        """1 for the only live receiver named `base`, else one past the highest (under the lock)."""
        taken = [s.number for s in self._records.values() if s.base == base and not s.dead()]
        return max(taken) + 1 if taken else 1

    def _sweep(self) -> list[_Failures]:
        """Drop the records of receivers that are gone; return them (under the lock)."""
        dead = [(k, s) for k, s in self._records.items() if s.dead()]
        for k, _ in dead:
            del self._records[k]
        self._sweep_at = max(_SWEEP_ABOVE, 2 * len(self._records))
        return [s for _, s in dead]

    def _report_gone(self, gone: list[_Failures]) -> None:
        for s in gone:  # they will not fail again: what they held back is logged now
            if s.unreported:
                self._summary(s.label, s.unreported, s.last)

    def flush(self) -> None:
        """Log the failures not yet reported, one line per receiver."""
        with self._lock:
            pending = [
                (s.label, s.unreported, s.last) for s in self._records.values() if s.unreported
            ]
            now = self._clock()
            for s in self._records.values():
                if s.unreported:
                    s.unreported, s.logged_at = 0, now
            self._sweep()  # nothing held back any more: the dead go without a word
        for label, count, last in pending:
            self._summary(label, count, last)

    def _summary(self, label: str, count: int, last: str) -> None:
        log.error("receiver %s raised %d more times (last: %s)", label, count, last)
