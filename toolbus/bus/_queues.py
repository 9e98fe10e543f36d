"""What the announcer (`_delivery.py`) keeps: a queue per subscription, a plan
per signal (who receives it, with their queues), and events announced unbuilt.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from types import MethodType
from typing import Any

import pykka

from ._events import Event

__all__ = [
    "BURST",
    "TURN",
    "EventQueue",
    "Plan",
    "Route",
    "Unbuilt",
    "built",
    "describe",
    "queue_key",
]

TURN = 16  # events a queue delivers before it goes to the back of the line, for fairness
BURST = 4096  # the same for a lingering queue: it wants its events in one go


def describe(obj: Any) -> str:
    """A receiver's qualified name, for logs; never raises (its attributes are
    user code, and this runs where a receiver's failure is reported)."""
    try:
        if isinstance(obj, Route):
            return obj.label
        if isinstance(obj, pykka.ActorRef):
            obj = obj.actor_class
        qualname = getattr(obj, "__qualname__", None)
        if isinstance(qualname, str):
            return f"{getattr(obj, '__module__', None) or '?'}.{qualname}"
        kind = type(obj)
        return f"{kind.__module__}.{kind.__qualname__}"
    except BaseException:
        return f"<receiver at {id(obj):#x}>"


class Route:
    """A receiver connected to one signal on behalf of `owner` (a `Subscription`).

    All routes of one owner share one queue, so the owner receives its events
    in announcement order across all its signals.
    """

    __slots__ = ("label", "owner", "signal", "target")

    def __init__(self, owner: object, label: str, signal: str, target: Callable[..., Any]) -> None:
        self.owner = owner
        self.label = label
        self.signal = signal
        self.target = target

    def __call__(self, sender: Any, *, event: Event) -> None:
        self.target(sender, event=event, signal=self.signal)


class EventQueue:
    """One subscription's pending events.

    `busy` is held while the queue is in line or being drained, so one thread at
    a time delivers its events. It is taken with an atomic test-and-set that
    never waits (`busy.setdefault(0, token) is token`; let go: `busy.clear()`):
    announcing threads never wait for a delivery thread. Unlike a lock's
    `acquire(False)`, it leaves who took it: an announcement cut short by a
    signal's exception as it took the queue (before it could put it in line)
    can tell it did, and put it in line (`Announcer._unwedge`).
    """

    __slots__ = (
        "busy",
        "delivered",
        "dropped",
        "enqueued",
        "flush",
        "items",
        "key",
        "linger",
        "owner",
        "released",
        "since",
        "turn",
    )

    def __init__(self, owner: object = None, key: object = None) -> None:
        # A subscription (the owner of `Route`s), kept while the queue is: its id,
        # in the queue's key, is not reused meanwhile. None for other receivers.
        self.owner = owner
        self.key = key  # in its announcer's table
        # Its subscription closed while events were pending: forgotten once they
        # are delivered (an idle announcer would otherwise keep it for good).
        self.released = False
        # Seconds its events may wait for more before delivery.
        self.linger: float = getattr(owner, "linger", 0.0)
        self.turn = BURST if self.linger else TURN
        self.flush: Callable[[], object] | None = getattr(owner, "flush", None)
        self.since = 0.0  # when its oldest pending event came (monotonic), if it lingers
        self.busy: dict[int, object] = {}
        self.items: deque[tuple[str, Any, Event | Unbuilt]] = deque()
        self.enqueued = 0  # under the announcer's lock
        self.delivered = 0  # by the one thread draining it
        self.dropped = 0  # under the announcer's lock


class Plan:
    """Who receives one signal: each receiver with its queue (see the module's doc),
    and the queue's `items` and `busy.setdefault` (announcing is on the call's path:
    looked up once here, not per event)."""

    __slots__ = ("targets", "version")

    def __init__(self, version: int, pairs: list[tuple[Any, EventQueue]]) -> None:
        self.version = version
        # Each queue once: an announcement claims a queue with its event, and a
        # queue listed twice would be claimed twice, drained by two threads
        # at once (review helper-163).
        self.targets: list[tuple[Any, EventQueue, Any, Callable[[int, object], object]]] = []
        seen: set[int] = set()
        for receiver, q in pairs:
            if id(q) not in seen:
                seen.add(id(q))
                self.targets.append((receiver, q, q.items, q.busy.setdefault))


# An event announced unbuilt: [class, arguments, parent_call_id, run token,
# timestamp], then its seq appended when announced, then the event appended
# when built.
Unbuilt = list[Any]


class NotBuilt(Exception):
    """An event announced unbuilt could not be built (reported once, as the event's)."""


_FAILED = object()


def built(item: Event | Unbuilt) -> Event:
    """The event of a queue item, built now if it was announced unbuilt.

    Raises the error of building it the first time, `NotBuilt` afterwards (for
    its other receivers: one failure, reported once)."""
    if type(item) is not list:
        return item  # type: ignore[return-value]  # an Event
    if len(item) == 6:
        make, args, parent, run, timestamp, seq = item
        try:
            event = make(*args, seq=seq, timestamp=timestamp, parent_call_id=parent, _run=run)
        except BaseException:
            item.append(_FAILED)
            raise
        # Two threads may both build it: list.append is atomic, so both then
        # hand over the first one appended.
        item.append(event)
    built: Any = item[6]
    if built is _FAILED:
        raise NotBuilt
    return built  # type: ignore[no-any-return]


def queue_key(receiver: Any) -> object:
    # By identity, as blinker does (receivers need not be hashable). Should an id
    # be reused after its receiver died, the new one merely shares an idle queue.
    if type(receiver) is MethodType:  # a new bound method each time; its parts are stable
        return (id(receiver.__self__), id(receiver.__func__))
    return id(receiver)
