"""Delivering events to receivers: robustly, off the tools' and supervisor's threads.

blinker's `send()` stops at the first receiver that raises and propagates the
exception to the sender. toolbus instead calls each receiver on its own and logs
a failure, so one faulty observer never affects execution or other observers.

Events are handed to an `Announcer` actor, which delivers them in the order they
were announced. Nothing is built or sent for a signal without receivers.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Protocol, runtime_checkable

import pykka

from .._sync import simple_inbox
from ._events import Event
from ._signals import namespace

__all__ = ["Announcer", "BusPublisher", "Emitter", "NullPublisher", "Publisher"]

log = logging.getLogger("toolbus.bus")


@runtime_checkable
class Publisher(Protocol):
    """Where an executor's events go. Implement both methods to route them elsewhere."""

    def wants(self, name: str) -> bool:
        """True if an event for signal `name` would reach anyone (checked before building it)."""
        ...

    def publish(self, name: str, event: Event) -> None:
        """Deliver one event. Called on the announcer's thread, in announcement order."""
        ...


class BusPublisher:
    """Delivers events to the receivers of toolbus's blinker signals, with `sender`."""

    def __init__(self, sender: Any) -> None:
        self.sender = sender
        self._signals = {name: namespace.signal(name) for name in namespace}

    def wants(self, name: str) -> bool:
        return bool(self._signals[name].receivers)

    def publish(self, name: str, event: Event) -> None:
        sig = self._signals[name]
        for receiver in sig.receivers_for(self.sender):
            try:
                receiver(self.sender, event=event)
            except BaseException as e:  # SystemExit from a receiver included
                log.error(
                    "receiver %r of %s raised; other receivers and execution go on:\n%s",
                    receiver,
                    name,
                    "".join(traceback.format_exception(e)),
                )


class NullPublisher:
    """Publishes nothing (turns the bus off for one executor)."""

    def wants(self, name: str) -> bool:
        return False

    def publish(self, name: str, event: Event) -> None:
        return None


class _Flush:
    __slots__ = ()


FLUSH = _Flush()


class Announcer(pykka.ThreadingActor):
    """The thread on which an executor's events are delivered, in announcement order."""

    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue

    def __init__(self, publisher: Publisher) -> None:
        super().__init__()
        self.publisher = publisher
        self._custom = type(publisher) is not BusPublisher

    def on_receive(self, message: Any) -> Any:
        if message is FLUSH:
            return True
        name, event = message
        try:
            # A custom publisher's `wants` is user code: asked here, never on
            # the supervisor's or the tools' threads.
            if self._custom and not self.publisher.wants(name):
                return None
            self.publisher.publish(name, event)
        except BaseException as e:  # pykka would stop every actor on a BaseException
            log.error("publisher failed on %s:\n%s", name, "".join(traceback.format_exception(e)))
        return None


class Emitter:
    """What the supervisor and workers hold to announce events without blocking."""

    __slots__ = ("_announcer", "_publisher", "_receivers")

    def __init__(self, publisher: Publisher, announcer: pykka.ActorRef[Announcer]) -> None:
        self._publisher = publisher
        self._announcer = announcer
        # Asked several times per call, nearly always with no receiver: for the
        # built-in publisher, read blinker's receiver dicts (mutated in place on
        # connect/disconnect) instead of going through two method calls.
        self._receivers: dict[str, dict[Any, Any]] | None = None
        if type(publisher) is BusPublisher:
            self._receivers = {name: sig.receivers for name, sig in publisher._signals.items()}
        elif type(publisher) is NullPublisher:
            self._receivers = {name: {} for name in namespace}  # never wants anything

    def wants(self, name: str) -> bool:
        receivers = self._receivers
        if receivers is not None:
            return bool(receivers[name])
        return True  # a custom publisher decides on the announcer's thread

    def emit(self, name: str, event: Event) -> None:
        try:
            self._announcer.tell((name, event))
        except pykka.ActorDeadError:
            # The executor is closed and its bus thread gone: deliver here, so
            # calls made after close (and late results) are still announced.
            try:
                self._publisher.publish(name, event)
            except Exception:
                log.exception("publisher failed on %s", name)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event announced so far has been delivered."""
        try:
            return bool(self._announcer.ask(FLUSH, timeout=timeout))
        except (pykka.ActorDeadError, pykka.Timeout):
            return False
