"""What every surface shares: a subscription to one executor's signals, and a handle.

`Signals` subscribes to some of toolbus's lifecycle signals and, if asked, to
every other signal defined with `bus.define_signal` (now or later). Each
surface is one subscription: one queue on the executor's delivery pool, so a
slow exporter delays nobody but itself. Each lingers (`LINGER`): its events
are handed over in bursts, a thread wake-up per burst of calls rather than
per call, which is most of what a subscriber costs the calls it watches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from .._options import wait_seconds
from ..bus import ALL_SIGNALS, BusPublisher, Subscription

if TYPE_CHECKING:
    from ..executor import Executor

__all__ = ["LINGER", "Handle", "Signals", "check_providers", "require_bus"]

_LIFECYCLE = frozenset(ALL_SIGNALS)

LINGER = 0.005
"""Seconds an event may wait for more before the surfaces get them (`bus.subscribe(linger=)`)."""


class Signals(Subscription):
    """A subscription to `names` of one executor, plus, with `others=True`, every
    signal that is not one of toolbus's own (`define_signal`'s), also those
    defined after it was made."""

    def __init__(
        self,
        executor: Executor,
        receiver: Callable[..., Any],
        names: tuple[str, ...],
        *,
        others: bool = False,
        flush: Callable[[], object] | None = None,
    ) -> None:
        self._wanted = frozenset(names)
        self._others = others
        # names=None: watch every signal, connect the ones this subscription wants.
        super().__init__(None, receiver, executor, linger=LINGER, flush=flush)

    def _connect(self, name: str) -> None:
        if name in self._wanted or (self._others and name not in _LIFECYCLE):
            super()._connect(name)


def require_bus(executor: Executor, owner: str = "toolbus.observe") -> None:
    """TypeError if `executor` is not an `Executor`, ValueError if its events
    do not go to the bus (a custom or null publisher); `owner` names the
    function it was given to."""
    from ..executor import Executor  # (the observe layer sits above it)

    if not isinstance(executor, Executor):
        raise TypeError(
            f"{owner}: executor must be a toolbus Executor, got {type(executor).__name__}"
        )
    if type(executor.publisher) is not BusPublisher:
        raise ValueError(
            f"executor {executor.name!r} sends its events to "
            f"{type(executor.publisher).__name__}, not to the bus: toolbus.observe "
            "subscribes to the bus (leave Executor(publisher=...) unset)"
        )


def check_providers(tracer_provider: object, meter_provider: object) -> None:
    """TypeError naming the option unless each of `instrument_otel`'s
    providers is None or one (OpenTelemetry would fail on another kind with
    an AttributeError naming nothing)."""
    for option, given, kind, method in (
        ("tracer_provider", tracer_provider, "TracerProvider", "get_tracer"),
        ("meter_provider", meter_provider, "MeterProvider", "get_meter"),
    ):
        if given is not None and not callable(getattr(given, method, None)):
            raise TypeError(
                f"instrument_otel: {option} must be an OpenTelemetry {kind} (or None: the "
                f"global one), got {type(given).__name__}"
            )


class Handle:
    """What `instrument_otel`, `instrument_prometheus` and `log_json` return.

    `close()` (or leaving a `with` block) detaches it from the executor; closing
    twice does nothing. The executor may be closed before or after.
    """

    def __init__(self, executor: Executor, owner: str = "toolbus.observe") -> None:
        require_bus(executor, owner)
        self.executor = executor
        self._close_lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = 5.0) -> None:
        """Detach: events announced from now on are not taken. Those announced
        before are handled first, within `timeout` seconds (`drain_events`;
        None: no bound). A bad `timeout` is refused before anything is done:
        the handle stays attached, and open."""
        seconds = wait_seconds(timeout, "timeout", f"{type(self).__name__}.close")
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._detach(seconds)

    def _detach(self, timeout: float | None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} of {self.executor.name!r}, {state}>"
