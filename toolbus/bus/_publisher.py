"""Where an executor's events go (`Publisher`), and how the engine announces them (`Emitter`).

blinker's `send()` stops at the first receiver that raises and propagates the
exception to the sender. toolbus instead hands each event to its executor's
`Announcer` (`_delivery.py`), which calls each receiver on its own, from its own
queue, and logs a failure: one faulty or slow observer never affects execution
or other observers. Nothing is built or sent for a signal without receivers.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._events import CallEvent, Event
from ._failures import format_error
from ._queues import describe
from ._signals import ALL_SIGNALS, namespace, signal

if TYPE_CHECKING:
    from ._delivery import Announcer

__all__ = ["BusPublisher", "Emitter", "NullPublisher", "Publisher"]

log = logging.getLogger("toolbus.bus")


@runtime_checkable
class Publisher(Protocol):
    """Where an executor's events go. Implement both methods to route them elsewhere.

    A custom publisher is one subscription of its own: both methods are called
    only on a delivery thread, one event at a time, in announcement order;
    never on a tool's or the supervisor's thread.
    """

    def wants(self, name: str) -> bool:
        """True if an event for signal `name` should be published."""
        ...

    def publish(self, name: str, event: Event) -> None:
        """Deliver one event."""
        ...


class BusPublisher:
    """Delivers events to the receivers of toolbus's blinker signals, with `sender`."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self._signals = {name: namespace.signal(name) for name in ALL_SIGNALS}

    def wants(self, name: str) -> bool:
        sig = self._signals.get(name) or namespace.get(name)
        return sig is not None and bool(sig.receivers)

    def publish(self, name: str, event: Event) -> None:
        """Call every receiver of `name` now, on this thread, each in its own `try`.

        Executors do not call this: their `Announcer` delivers to each receiver
        from its own queue.
        """
        sig = self._signals.get(name) or namespace.get(name)
        if sig is None:
            return
        for receiver in sig.receivers_for(self.sender):
            try:
                receiver(self.sender, event=event)
            except BaseException as e:  # SystemExit from a receiver included
                log.error(  # neither may raise: the receiver's repr and error are user code
                    "receiver %s of %s raised; other receivers and execution go on:\n%s",
                    describe(receiver),
                    name,
                    format_error(e),
                )


class NullPublisher:
    """Publishes nothing (turns the bus off for one executor)."""

    def wants(self, name: str) -> bool:
        return False

    def publish(self, name: str, event: Event) -> None:
        return None


class Emitter:
    """What the supervisor, the workers and your own code hold to announce events.

    Announcing never blocks on a receiver. `wants(name)` first, so that no event
    is built when nobody listens; then `emit` (toolbus's own signals) or
    `announce` (any defined signal, checked).
    """

    __slots__ = ("_announcer", "_custom", "_publisher", "listening")

    def __init__(self, publisher: Publisher, announcer: Announcer) -> None:
        self._publisher = publisher
        self._announcer = announcer
        # `wants` without a call: `listening[name]` is truthy when an event on
        # `name` would reach anyone (the call path reads it several times per
        # call, nearly always with no receiver). For the built-in publisher it
        # holds blinker's receiver dicts (mutated in place on connect and
        # disconnect); a publisher of your own always listens.
        self._custom = type(publisher) not in (BusPublisher, NullPublisher)
        self.listening: dict[str, Any]
        if type(publisher) is BusPublisher:
            self.listening = {name: sig.receivers for name, sig in publisher._signals.items()}
        elif type(publisher) is NullPublisher:
            self.listening = {name: {} for name in ALL_SIGNALS}  # never wants anything
        else:
            self.listening = dict.fromkeys(ALL_SIGNALS, True)

    def wants(self, name: str) -> bool:
        """Whether an event for signal `name` would reach anyone (build it only if so)."""
        try:
            return bool(self.listening[name])
        except KeyError:
            if self._custom:
                return True  # a custom publisher's `wants` is asked on a delivery thread
            return self._wants_defined(name)

    def _wants_defined(self, name: str) -> bool:
        sig = namespace.get(name)
        if sig is None:
            return False
        # Remembered for next time: blinker's dict is stable, a dict write atomic.
        receivers = self.listening[name] = (
            sig.receivers if type(self._publisher) is BusPublisher else {}
        )
        return bool(receivers)

    def emit(self, name: str, event: Event) -> None:
        """Announce `event` on toolbus signal `name` (the engine's hot path: no checks)."""
        self._announcer.announce(name, event)

    def emit_later(
        self,
        name: str,
        make: type[CallEvent],
        args: tuple[Any, ...],
        parent_call_id: str | None = None,
        run: int = 0,
    ) -> None:
        """Announce `make(*args, parent_call_id=..., _run=run)` on toolbus signal
        `name`, its time and `seq` those of now, built on a delivery thread: what
        the engine does on a call's path, where building the event would cost the
        caller (the arguments must not change afterwards)."""
        # Announcer.announce_later's body, one call less (this runs three times a call).
        self._announcer.announce(name, [make, args, parent_call_id, run, time.time()])

    def announce(self, name: str, event: Event) -> bool:
        """Announce `event` on signal `name`, toolbus's own or one made with `define_signal`.

        Returns False, and delivers nothing, when nobody wants `name`. Sets
        `event.seq` (its place in this executor's announcements); `timestamp`
        is when the event was built. An event announced before (again, or on
        another executor) is announced as a copy, with a `seq` of its own: its
        receivers may not have read the first one yet. Raises KeyError for a
        signal that was never defined and TypeError for an event that is not a
        `bus.Event`.
        """
        if not isinstance(event, Event):
            raise TypeError(f"events must be bus.Event instances, not {type(event).__name__}")
        signal(name)  # KeyError for a name never defined
        if not self.wants(name):
            return False
        if event.seq:
            event = copy.copy(event)
        self._announcer.announce(name, event)
        return True

    def flush(self, timeout: float | None = None, owner: object = None) -> bool:
        """Wait until every event announced so far was delivered (or dropped and
        counted); with `owner` (a `Subscription`), every event announced to it.

        False if `timeout` passed first, and at once on a delivery thread.
        """
        return self._announcer.drain(timeout, owner)
