"""Receivers' failures, logged under their names and rate-limited."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable

__all__ = ["ERROR_LOG_INTERVAL", "FailureLog"]

log = logging.getLogger("toolbus.bus")

ERROR_LOG_INTERVAL = 60.0


class _Failures:
    __slots__ = ("last", "logged_at", "unreported")

    def __init__(self, now: float) -> None:
        self.logged_at = now
        self.unreported = 0
        self.last = ""


class FailureLog:
    """Logs receivers' failures under their names, rate-limited.

    A receiver's first failure is logged with its traceback; after that, at most
    one summary line (how many failures, the last one) per receiver every
    `interval` seconds, and a last one on `flush()`.
    """

    def __init__(
        self, interval: float = ERROR_LOG_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._by_label: dict[str, _Failures] = {}

    def failed(self, label: str, signal: str, error: BaseException) -> None:
        now = self._clock()
        with self._lock:
            state = self._by_label.get(label)
            if state is None:
                self._by_label[label] = _Failures(now)
            else:
                state.unreported += 1
                state.last = f"{type(error).__name__}: {error} (on {signal})"
                if now - state.logged_at < self.interval:
                    return
                count, last = state.unreported, state.last
                state.unreported, state.logged_at = 0, now
        if state is None:
            log.error(
                "receiver %s raised on %s; other receivers and execution go on "
                "(its further failures: one summary line per %gs):\n%s",
                label,
                signal,
                self.interval,
                "".join(traceback.format_exception(error)),
            )
        else:
            self._summary(label, count, last)

    def flush(self) -> None:
        """Log the failures not yet reported, one line per receiver."""
        with self._lock:
            pending = [(k, s.unreported, s.last) for k, s in self._by_label.items() if s.unreported]
            now = self._clock()
            for s in self._by_label.values():
                if s.unreported:
                    s.unreported, s.logged_at = 0, now
        for label, count, last in pending:
            self._summary(label, count, last)

    def _summary(self, label: str, count: int, last: str) -> None:
        log.error("receiver %s raised %d more times (last: %s)", label, count, last)
