"""Subscribing to signals, directly or through an actor's mailbox."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pykka
from blinker import ANY

from .._sync import simple_inbox
from ._events import Event
from ._signals import ALL_SIGNALS, signal

__all__ = ["ObserverActor", "Recorder", "Subscription", "subscribe"]

log = logging.getLogger("toolbus.bus")

Receiver = Callable[..., Any]


class ObserverActor(pykka.ThreadingActor):
    """Base class for an actor that observes the bus through its own mailbox.

    Subclass it and override `on_event`; start it and `attach` it to signals.
    Events are queued in its mailbox and handled on its own thread, so a slow
    observer never slows tools, the supervisor or other observers. Anything
    `on_event` raises is logged and the actor goes on.

        class Metrics(ObserverActor):
            def on_event(self, signal, sender, event): ...

        ref = Metrics.start()
        subscription = Metrics.attach(ref, "tool:finished")
    """

    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue

    def on_event(self, signal: str, sender: Any, event: Event) -> None:
        """Handle one event (override)."""

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Delivery):
            try:
                self.on_event(message.signal, message.sender, message.event)
            except BaseException as e:  # pykka would stop every actor on a BaseException
                log.error(
                    "observer %r raised on %s:\n%s",
                    self,
                    message.signal,
                    "".join(traceback.format_exception(e)),
                )
            return None
        return self.on_message(message)

    def on_message(self, message: Any) -> Any:
        """Handle a message that is not a bus event (override to add your own)."""
        return None

    @staticmethod
    def attach(ref: pykka.ActorRef[Any], *names: str, sender: Any = ANY) -> Subscription:
        """Forward the signals `names` (all by default) into the actor's mailbox."""
        return Subscription(tuple(names) or ALL_SIGNALS, ref, sender, isolated=True)


class _Delivery:
    __slots__ = ("event", "sender", "signal")

    def __init__(self, signal: str, sender: Any, event: Event) -> None:
        self.signal = signal
        self.sender = sender
        self.event = event


class _CallbackObserver(ObserverActor):
    """Runs a plain receiver function on its own actor (`subscribe(isolated=True)`)."""

    def __init__(self, receiver: Receiver) -> None:
        super().__init__()
        self.receiver = receiver

    def on_event(self, signal: str, sender: Any, event: Event) -> None:
        self.receiver(sender, event=event, signal=signal)


class Subscription:
    """A receiver connected to some signals; `close()` (or `with`) disconnects it."""

    def __init__(
        self,
        names: tuple[str, ...],
        receiver: Receiver | pykka.ActorRef[Any],
        sender: Any,
        isolated: bool,
        *,
        owns_actor: bool = False,
    ) -> None:
        self.names = names
        self._sender = sender
        # Stopped on close only when this subscription started the actor.
        self._mailbox: pykka.ActorRef[Any] | None = None
        self._connected: list[tuple[str, Receiver]] = []
        if isolated:
            if isinstance(receiver, pykka.ActorRef):
                mailbox = receiver
            else:
                mailbox = _CallbackObserver.start(receiver)
                owns_actor = True
            if owns_actor:
                self._mailbox = mailbox
            for name in names:

                def forward(s: Any, *, event: Event, _name: str = name) -> None:
                    try:
                        mailbox.tell(_Delivery(_name, s, event))
                    except pykka.ActorDeadError:
                        pass

                self._connected.append((name, forward))
        else:
            assert not isinstance(receiver, pykka.ActorRef)
            for name in names:

                def direct(s: Any, *, event: Event, _name: str = name) -> None:
                    receiver(s, event=event, signal=_name)

                self._connected.append((name, direct))
        for name, fn in self._connected:
            signal(name).connect(fn, sender=sender, weak=False)

    def close(self) -> None:
        """Disconnect; an isolated receiver finishes what is in its mailbox first."""
        for name, fn in self._connected:
            # Without `sender`: blinker's disconnect(fn, sender) drops only the
            # sender link and keeps fn as a receiver. Each fn is this
            # subscription's own wrapper, so removing it whole is right.
            signal(name).disconnect(fn)
        self._connected.clear()
        if self._mailbox is not None:
            self._mailbox.stop(block=False)
            self._mailbox = None

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def subscribe(
    receiver: Receiver,
    *names: str,
    sender: Any = ANY,
    isolated: bool = False,
) -> Subscription:
    """Connect `receiver(sender, event=..., signal=name)` to signals (all of them by default).

    With `isolated=True` the receiver runs on its own actor: a slow or stuck
    receiver then delays nobody but itself. `sender` limits it to one executor.
    """
    return Subscription(tuple(names) or ALL_SIGNALS, receiver, sender, isolated)


class Recorder:
    """Collects events, for tests and for tools that watch an executor.

    `wait_for(...)` blocks until the expected events have arrived, instead of
    sleeping and hoping.
    """

    def __init__(self, *names: str, sender: Any = ANY) -> None:
        self._cond = threading.Condition()
        self.events: list[tuple[str, Event]] = []
        self._sub = subscribe(self._record, *names, sender=sender)

    def _record(self, sender: Any, *, event: Event, signal: str) -> None:
        with self._cond:
            self.events.append((signal, event))
            self._cond.notify_all()

    def of(self, name: str) -> list[Any]:
        """The events recorded so far for signal `name`."""
        with self._cond:
            return [e for n, e in self.events if n == name]

    def names(self) -> list[str]:
        with self._cond:
            return [n for n, _ in self.events]

    def wait_for(
        self,
        name: str,
        count: int = 1,
        *,
        timeout: float = 10.0,
        where: Callable[[Any], bool] | None = None,
    ) -> list[Any]:
        """Block until `count` events of `name` (matching `where`) arrived; return them."""

        def matching() -> list[Any]:
            return [e for n, e in self.events if n == name and (where is None or where(e))]

        with self._cond:
            if not self._cond.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(
                    f"expected {count} {name} events within {timeout}s, got {len(matching())}"
                )
            return matching()

    def clear(self) -> None:
        with self._cond:
            self.events.clear()

    def close(self) -> None:
        self._sub.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
