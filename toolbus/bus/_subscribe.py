"""Subscribing to signals, directly or through an actor's mailbox.

Every subscription gets its executor's events from a queue of its own, on a
delivery thread (see `_delivery.py`): a slow subscription delays only itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka
from blinker import ANY

from .._sync import simple_inbox
from ._delivery import Route, describe, release
from ._events import Event
from ._failures import FailureLog
from ._signals import signal, unwatch, watch

__all__ = ["MAX_LINGER", "ObserverActor", "Recorder", "Subscription", "subscribe"]

MAX_LINGER = 1.0

Receiver = Callable[..., Any]


class ObserverActor(pykka.ThreadingActor):
    """Base class for an actor that observes the bus through its own mailbox.

    Subclass it and override `on_event`; start it and `attach` it to signals.
    Events are queued in its mailbox and handled on its own thread, so a slow
    observer never slows tools, the supervisor or other observers. Anything
    `on_event` raises is logged (rate-limited, under the actor's name) and the
    actor goes on.

        class Metrics(ObserverActor):
            def on_event(self, signal, sender, event): ...

        ref = Metrics.start()
        subscription = Metrics.attach(ref, "tool:finished")
    """

    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue
    _failures: FailureLog | None = None

    def on_event(self, signal: str, sender: Any, event: Event) -> None:
        """Handle one event (override)."""

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Delivery):
            try:
                self.on_event(message.signal, message.sender, message.event)
            except BaseException as e:  # pykka would stop every actor on a BaseException
                if self._failures is None:
                    self._failures = FailureLog()
                self._failures.failed(type(self), message.signal, e)  # never raises
            return None
        return self.on_message(message)

    def on_stop(self) -> None:
        if self._failures is not None:
            self._failures.flush()

    def on_message(self, message: Any) -> Any:
        """Handle a message that is not a bus event (override to add your own)."""
        return None

    @staticmethod
    def attach(ref: pykka.ActorRef[Any], *names: str, sender: Any = ANY) -> Subscription:
        """Forward the signals `names` (all by default, also those defined later) into the
        actor's mailbox."""
        return Subscription(tuple(names) or None, ref, sender, isolated=True)


class _Delivery:
    __slots__ = ("event", "sender", "signal")

    def __init__(self, signal: str, sender: Any, event: Event) -> None:
        self.signal = signal
        self.sender = sender
        self.event = event


class Subscription:
    """A receiver connected to some signals; `close()` (or `with`) disconnects it.

    `names=None` means every signal, including those defined later with
    `define_signal`. `receiver` is a function called
    `receiver(sender, event=..., signal=name)`, or an `ObserverActor`'s ref whose
    mailbox gets the events. Either way the subscription has its own delivery
    queue per executor, so `isolated` changes nothing any more (kept for
    compatibility). `linger`: see `subscribe`. `flush`: called on the delivery
    thread after each run of events handed over (all of a burst, for a
    lingering subscription), before they count as delivered: a receiver that
    gathers its work (lines to write) finishes it there.
    """

    def __init__(
        self,
        names: tuple[str, ...] | None,
        receiver: Receiver | pykka.ActorRef[Any],
        sender: Any,
        isolated: bool = False,
        *,
        owns_actor: bool = False,
        linger: float = 0.0,
        flush: Callable[[], object] | None = None,
    ) -> None:
        if (
            isinstance(linger, bool)
            or not isinstance(linger, int | float)
            or not 0.0 <= linger <= MAX_LINGER  # NaN included
        ):
            raise ValueError(
                f"linger must be a number of seconds in [0, {MAX_LINGER}], got {linger!r}"
            )
        if not isinstance(receiver, pykka.ActorRef) and not callable(receiver):
            raise TypeError(
                "a receiver must be callable, as receiver(sender, event=..., signal=...), "
                f"or an ObserverActor's ref; got {type(receiver).__name__} {receiver!r:.80}"
            )
        for name in names or ():
            if not isinstance(name, str):
                raise TypeError(
                    "signal names are strings, given one by one (e.g. 'tool:finished'); "
                    f"got {type(name).__name__} {name!r:.80}"
                )
        self.linger = float(linger)
        self.flush = flush
        self._sender = sender
        self._lock = threading.Lock()
        self._closed = False
        self._routes: list[Route] = []
        # Stopped on close only when this subscription started the actor.
        self._mailbox = receiver if owns_actor and isinstance(receiver, pykka.ActorRef) else None
        if isinstance(receiver, pykka.ActorRef):
            ref = receiver

            def target(s: Any, *, event: Event, signal: str) -> None:
                try:
                    ref.tell(_Delivery(signal, s, event))
                except pykka.ActorDeadError:
                    pass

            self._target: Receiver = target
        else:
            self._target = receiver
        self._label = describe(receiver)
        if names is not None:
            for name in names:
                signal(name)  # KeyError for an unknown name, before anything is connected
        for name in names if names is not None else watch(self):
            self._connect(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The signals this subscription is connected to."""
        with self._lock:
            return tuple(r.signal for r in self._routes)

    def _connect(self, name: str) -> None:
        sig = signal(name)
        with self._lock:
            # A name given twice is connected once: each route is a receiver
            # of its own, and would have every event delivered once more.
            if self._closed or any(r.signal == name for r in self._routes):
                return
            route = Route(self, self._label, name, self._target)
            self._routes.append(route)
            sig.connect(route, sender=self._sender, weak=False)

    def signal_defined(self, name: str) -> None:
        """Connect a signal defined after this subscription was made (all-signals ones)."""
        self._connect(name)

    def close(self) -> None:
        """Disconnect. Events already queued for it are still delivered."""
        unwatch(self)
        with self._lock:
            self._closed = True
            routes, self._routes = self._routes, []
        for route in routes:
            # Without `sender`: blinker's disconnect(fn, sender) drops only the
            # sender link and keeps fn as a receiver. Each route is this
            # subscription's own, so removing it whole is right.
            signal(route.signal).disconnect(route)
        release(self)  # its queue and the plans that hold it (and so its receiver)
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
    linger: float = 0.0,
) -> Subscription:
    """Connect `receiver(sender, event=..., signal=name)` to signals (all by default).

    With no names it receives every signal, including those defined later. The
    receiver gets each executor's events from a queue of its own, in
    announcement order, on a delivery thread: a slow receiver delays nobody but
    itself. `sender` limits it to one executor. `isolated` is accepted for
    compatibility and changes nothing (every subscription is isolated now).

    `linger` (seconds, at most 1): once an event is queued for this receiver,
    let more gather for up to that long before a delivery thread hands them
    over, all in one go. A receiver that need not see events at once (metrics,
    traces, logs) then costs one thread wake-up per burst of calls rather than
    one per call. `drain_events()` and `close()` do not wait for it.
    """
    return Subscription(tuple(names) or None, receiver, sender, isolated, linger=linger)


class Recorder:
    """Collects events, for tests and for tools that watch an executor.

    `wait_for(...)` blocks until the expected events have arrived, instead of
    sleeping and hoping.
    """

    def __init__(self, *names: str, sender: Any = ANY) -> None:
        # Entered through the bare lock (see `toolbus/_sync.py`); reentrant,
        # as `Condition()`'s own is (a test may hold it while it reads).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self.events: list[tuple[str, Event]] = []
        self._sub = subscribe(self._record, *names, sender=sender)

    def _record(self, sender: Any, *, event: Event, signal: str) -> None:
        with self._lock:
            self.events.append((signal, event))
            self._cond.notify_all()

    def of(self, name: str) -> list[Any]:
        """The events recorded so far for signal `name`."""
        with self._lock:
            return [e for n, e in self.events if n == name]

    def names(self) -> list[str]:
        with self._lock:
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

        with self._lock:
            if not self._cond.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(
                    f"expected {count} {name} events within {timeout}s, got {len(matching())}"
                )
            return matching()

    def clear(self) -> None:
        with self._lock:
            self.events.clear()

    def close(self) -> None:
        self._sub.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
