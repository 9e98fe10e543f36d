"""Subscribing to signals, directly or through an actor's mailbox."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pykka
from blinker import ANY

from ._events import Event
from ._signals import ALL_SIGNALS, signal

__all__ = ["Recorder", "Subscription", "subscribe"]

log = logging.getLogger("toolbus.bus")

Receiver = Callable[..., Any]


class _Mailbox(pykka.ThreadingActor):
    """Runs one receiver on its own thread, so it can be slow without slowing anyone."""

    use_daemon_thread = True

    def __init__(self, receiver: Receiver) -> None:
        super().__init__()
        self.receiver = receiver

    def on_receive(self, message: Any) -> Any:
        sender, name, event = message
        try:
            self.receiver(sender, event=event, signal=name)
        except Exception as e:
            log.error(
                "isolated receiver %r raised on %s:\n%s",
                self.receiver,
                name,
                "".join(traceback.format_exception(e)),
            )
        return None


class Subscription:
    """A receiver connected to some signals; `close()` (or `with`) disconnects it."""

    def __init__(
        self, names: tuple[str, ...], receiver: Receiver, sender: Any, isolated: bool
    ) -> None:
        self.names = names
        self._sender = sender
        self._mailbox: pykka.ActorRef[_Mailbox] | None = None
        self._connected: list[tuple[str, Receiver]] = []
        if isolated:
            self._mailbox = _Mailbox.start(receiver)
            mailbox = self._mailbox
            for name in names:

                def forward(s: Any, *, event: Event, _name: str = name) -> None:
                    try:
                        mailbox.tell((s, _name, event))
                    except pykka.ActorDeadError:
                        pass

                self._connected.append((name, forward))
        else:
            for name in names:

                def direct(s: Any, *, event: Event, _name: str = name) -> None:
                    receiver(s, event=event, signal=_name)

                self._connected.append((name, direct))
        for name, fn in self._connected:
            signal(name).connect(fn, sender=sender, weak=False)

    def close(self) -> None:
        """Disconnect; an isolated receiver finishes what is in its mailbox first."""
        for name, fn in self._connected:
            signal(name).disconnect(fn, sender=self._sender)
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
