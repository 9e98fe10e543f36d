"""Delivering an executor's events: a queue per subscription, a small pool of daemon threads.

Each subscription (a blinker receiver, a `subscribe`d function, an attached
observer actor, or a custom `Publisher` as a whole) has its own FIFO queue.
Announcing an event takes the executor's next `seq` and appends the event to
the queues of its receivers, on the announcing thread and under one lock, so
each receiver sees the events in `seq` order. A queue with events waits in line
for a pool of at most `MAX_THREADS` daemon threads; a thread delivers `TURN` of
its events and puts it back at the end of the line. A slow receiver therefore
delays only itself and holds at most one thread.

Not `concurrent.futures.ThreadPoolExecutor`: its workers are not daemon threads
and the interpreter joins them at exit, so one receiver stuck for good would
keep the process alive. The pool here is the same design (a C `SimpleQueue` of
ready work, an idle semaphore, threads started on demand) on daemon threads.

A subscription may *linger* (`subscribe(..., linger=seconds)`): its queue,
once it has an event, waits that long for more before a thread delivers them,
so a subscription that does not need its events at once costs one wake-up per
burst of calls instead of one per call. Someone waiting for delivery
(`drain`, `close`) cuts the wait short. A lingering queue's turn is the whole
burst (up to `BURST` events): it asked to be handed its events together, and
each turn ends in a trip through the line, a wake-up of another thread.
A subscription may also have a `flush()`: called after each turn's events
were handed over, before they count as delivered (a log writes the turn's
lines in one go there), so `drain` returns only once it ran.

The engine's own per-call events are announced *unbuilt* (`announce_later`):
their class, arguments and time, numbered at once, built by the first
delivery thread that hands them over (every receiver gets that one object).
Building a frozen dataclass costs about as much as announcing it, and the
engine's thread is the caller's critical path.

Who receives a signal is asked of blinker once and kept (a *plan*: each
receiver with its queue), until a receiver connects or disconnects anywhere
(`RECEIVERS_VERSION`) or idle queues are pruned: announcing is on the
engine's hot path, and blinker's `receivers_for` costs more than the rest of
it. A signal with a weakly connected receiver is asked about every time (the
receiver may die without telling anyone).

No event is lost silently: it is delivered, or counted in `dropped` and logged
as a WARNING naming its receiver (pending when `close(timeout)` ran out of
time, or at interpreter exit). Events announced after `close` (late results,
calls submitted later) are still delivered, by short-lived threads. A `close`
on a delivery thread (a receiver closing its executor) hands its wait to a
thread of its own: the receiver's queue cannot move until it returns.
Whatever a receiver (or a custom publisher's `wants`) raises is reported by
the `FailureLog` and delivery goes on: nothing may leave `_drain` with a
queue's `busy` held, or that queue is never delivered again.

One piece: the announcer's queues, the line of ready queues and the pool's
threads share one lock and one set of counts (pending, dropped); split, every
event would cross a module boundary on the path `benchmarks/observe_cost.py`
measures.
"""

from __future__ import annotations

import atexit
import dis
import logging
import queue
import threading
import time
import weakref
from typing import Any

from ._events import CallEvent, Event
from ._failures import FailureLog
from ._publisher import BusPublisher, Publisher
from ._queues import (
    BURST,
    TURN,
    EventQueue,
    NotBuilt,
    Plan,
    Route,
    Unbuilt,
    built,
    describe,
    queue_key,
)
from ._signals import RECEIVERS_VERSION, namespace

__all__ = [
    "BURST",
    "TURN",
    "Announcer",
    "Route",
    "describe",
    "on_delivery_thread",
    "release",
]

log = logging.getLogger("toolbus.bus")

MAX_THREADS = 4
EXIT_BUDGET = 1.0  # seconds all executors get, in all, to deliver at interpreter exit

_local = threading.local()


def on_delivery_thread() -> bool:
    """True on a thread that is delivering events (where waiting for delivery would stall it)."""
    return bool(getattr(_local, "delivering", False))


class Announcer:
    """Delivers one executor's events to its subscriptions, each from its own queue."""

    def __init__(self, publisher: Publisher, *, max_threads: int = MAX_THREADS) -> None:
        self.publisher = publisher
        # A subclass may override publish: it is delivered to as a custom publisher.
        self._bus = publisher if type(publisher) is BusPublisher else None
        self._sender = self._bus.sender if self._bus is not None else None
        self._max_threads = max_threads
        # Taken by announcing threads, and by delivery threads only to put a busy
        # queue back in line: it never waits for a receiver.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._seq = 0
        self._queues: dict[object, EventQueue] = {}
        self._plans: dict[str, Plan] = {}  # under the lock
        self._ready: queue.SimpleQueue[EventQueue | None] = queue.SimpleQueue()
        # A token per idle thread: appended by it (atomic), popped under the lock.
        self._idle: list[None] = []
        self._threads = 0
        self._waiters = 0
        self._lingering = 0  # threads letting a lingering queue's events gather
        self._closed = False
        self.dropped = 0
        """Events never delivered: pending when `close` ran out of time, or at exit."""
        self.failures = FailureLog()
        _live.add(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def announce_later(
        self,
        name: str,
        make: type[CallEvent],
        args: tuple[Any, ...],
        parent_call_id: str | None = None,
        run: int = 0,
    ) -> None:
        """Announce the event `make(*args, parent_call_id=..., _run=run)`,
        timestamped and numbered now, built on the delivery thread (see the
        module's doc)."""
        self.announce(name, [make, args, parent_call_id, run, time.time()])

    def announce(self, name: str, event: Event | Unbuilt) -> None:
        """Number `event` and queue it for every receiver of `name`; never waits for one.

        After `close` the pool is gone: a queue that wakes up then is drained by
        a thread of its own, which ends when the queue is empty.
        """
        try:
            late: list[EventQueue] | None = None
            with self._lock:
                plan = self._plans.get(name)
                if plan is None or plan.version != RECEIVERS_VERSION[0]:
                    plan = self._plan(name)
                self._seq += 1
                if type(event) is list:
                    event.append(self._seq)
                else:
                    object.__setattr__(event, "seq", self._seq)  # frozen: set once, here
                for receiver, q, items, claim in plan.targets:
                    if not items and q.linger:
                        q.since = time.monotonic()
                    items.append((name, receiver, event))
                    q.enqueued += 1
                    if claim(0, event) is event:  # (taken for delivery: see `EventQueue`)
                        if self._closed:
                            late = [*(late or ()), q]
                        else:
                            self._schedule(q)
                if not self._seq & 255:
                    self._prune()
            for q in late or ():
                threading.Thread(target=self._drain_late, args=(q,), daemon=True).start()
        except Exception:  # a bug here must never reach the tool or the supervisor
            log.exception("could not announce %s", name)
        except BaseException as e:  # a signal's (Ctrl-C): raised, once no queue is left wedged
            self._unwedge(name, event, e)
            raise

    def _unwedge(self, name: str, event: Event | Unbuilt, error: BaseException) -> None:
        """`announce` was cut short by `error`, a signal's exception (raised
        where a function is called or entered), once it numbered `event`:
        what it left undone is done, as it would have done it. Had it taken
        a receiver's queue for delivery (as `busy.setdefault` returned) and
        not put it in line (as `_schedule` was entered), that queue would
        never be delivered again (every later announcement finds it taken):
        it is put in line; one put in line but left without a thread to take
        the line (`_schedule` cut short after its `put`) gets a thread; the
        receivers it had not reached get the event. Never raises."""
        try:
            tb = error.__traceback__
            if tb is None or tb.tb_frame.f_code is not _ANNOUNCE:
                return
            lasti = tb.tb_lasti
            if not _NUMBERED <= lasti < _LOOP_END:
                return  # (not numbered: never announced; or every receiver has it)
            loc = tb.tb_frame.f_locals
            plan = loc.get("plan")
            if type(plan) is not Plan:
                return
            targets = plan.targets
            q = loc.get("q") if lasti >= _LOOP else None
            at = next((k for k, x in enumerate(targets) if x[1] is q), None)
            late: list[EventQueue] = list(loc.get("late") or ())
            with self._lock:
                rest = targets
                if q is not None and at is not None:
                    rest = targets[at + 1 :]
                    if lasti < _APPEND:  # (as `since` was read: not queued for it yet)
                        self._queue_for(name, event, targets[at], late)
                    elif lasti < _CLAIM:  # (queued for it, not counted)
                        q.enqueued += 1
                        if targets[at][3](0, event) is event:
                            self._put(q, late)
                    elif lasti < _SCHEDULED and q.busy.get(0) is event:
                        below = tb.tb_next
                        if below is None or below.tb_frame.f_code is not _SCHEDULE:
                            self._put(q, late)
                        elif below.tb_lasti > 0 and not self._closed:  # (in line: a thread)
                            self._threads += 1
                            threading.Thread(
                                target=self._work, name=f"toolbus-bus-{self._threads}", daemon=True
                            ).start()
                        elif below.tb_lasti == 0:
                            self._put(q, late)
                for target in rest:
                    self._queue_for(name, event, target, late)
            for x in {id(x): x for x in late}.values():
                threading.Thread(target=self._drain_late, args=(x,), daemon=True).start()
        except BaseException:  # (another signal's, or a bug: the first is what is raised)
            log.exception("could not finish announcing %s", name)

    def _queue_for(
        self, name: str, event: Event | Unbuilt, target: Any, late: list[EventQueue]
    ) -> None:
        """`announce`'s loop, for one of its targets (under the lock)."""
        receiver, q, items, claim = target
        if not items and q.linger:
            q.since = time.monotonic()
        items.append((name, receiver, event))
        q.enqueued += 1
        if claim(0, event) is event:
            self._put(q, late)

    def _put(self, q: EventQueue, late: list[EventQueue]) -> None:
        """A queue taken for delivery goes in line (after close: to `late`,
        each drained by a thread of its own)."""
        if self._closed:
            late.append(q)
        else:
            self._schedule(q)

    def _plan(self, name: str) -> Plan:
        """Who receives `name`, and their queues (under the lock); kept unless a
        receiver is weakly connected."""
        version = RECEIVERS_VERSION[0]  # before asking: a change meanwhile makes it stale
        keep = True
        if self._bus is None:
            targets: list[Any] = [self.publisher]  # user code: asked on a delivery thread
        else:
            sig = namespace.get(name)
            targets = list(sig.receivers_for(self._sender)) if sig is not None else []
            keep = sig is None or not any(
                isinstance(r, weakref.ref) for r in sig.receivers.values()
            )
        queues = self._queues
        pairs: list[tuple[Any, EventQueue]] = []
        for receiver in targets:
            owner = receiver.owner if type(receiver) is Route else None
            # Two key spaces: a subscription's queue must never be a dead plain
            # receiver's idle one whose id its own happens to reuse (no flush).
            key = (_OWNED, id(owner)) if owner is not None else queue_key(receiver)
            q = queues.get(key)
            if q is None:
                q = queues[key] = EventQueue(owner, key)
            pairs.append((receiver, q))
        plan = Plan(version, pairs)
        if keep:
            self._plans[name] = plan
        return plan

    def _schedule(self, q: EventQueue) -> None:
        """Put `q` in line; start a thread if none is idle (under the lock)."""
        self._ready.put(q)
        if self._idle:
            self._idle.pop()
        elif self._threads < self._max_threads:
            self._threads += 1
            threading.Thread(
                target=self._work, name=f"toolbus-bus-{self._threads}", daemon=True
            ).start()

    def release(self, owner: object) -> None:
        """Forget `owner`'s queue (a closed subscription's), and the plans that hold
        it: at once when idle, else once its last events are delivered."""
        with self._lock:
            self._plans.clear()  # asked again at the next announcement
            q = self._queues.get((_OWNED, id(owner)))
            if q is None or q.owner is not owner:
                return
            # Marked before trying: a thread letting it go just now then sees the
            # mark (and forgets it), or has let go already (and it is forgotten here).
            q.released = True
            self._forget(q)

    def _forget(self, q: EventQueue) -> None:
        """Drop a released queue from the table if it is idle (under the lock)."""
        if not q.items and self._queues.get(q.key) is q and q.busy.setdefault(0, self) is self:
            del self._queues[q.key]
            q.busy.clear()

    def _prune(self) -> None:
        """Forget idle queues, of receivers that may be gone (under the lock)."""
        self._plans.clear()  # they hold queues: asked again, they make new ones as needed
        for key, q in list(self._queues.items()):
            if not q.items and q.busy.setdefault(0, self) is self:  # nobody drains it, nor can
                del self._queues[key]
                q.busy.clear()

    def _work(self) -> None:
        _local.delivering = True
        while True:
            q = self._ready.get()
            if q is None:
                return
            try:
                if self._drain(q, to_the_end=False):
                    self._idle.append(None)
            except BaseException:  # receivers' errors are contained in _deliver: a bug here
                log.exception("event delivery failed; this delivery thread goes on")
            # An idle thread must not keep its last queue (and so a closed
            # subscription's receiver) alive while it waits.
            q = None

    def _drain_late(self, q: EventQueue) -> None:
        _local.delivering = True
        try:
            self._drain(q, to_the_end=True)
        except BaseException:
            log.exception("event delivery failed after close")

    def _drain(self, q: EventQueue, *, to_the_end: bool) -> bool:
        """Deliver `q`'s events, a turn at a time (`TURN`, or `BURST` if it lingers);
        True when it ran empty and was let go.

        A pool thread puts a queue that has more back in line after each turn;
        `to_the_end` (after close) drains it until it is empty.
        """
        if q.linger and not to_the_end:
            self._linger(q)
        items = q.items
        receiver: Any = None
        while True:
            n = 0
            for _ in range(q.turn):
                try:
                    name, receiver, event = items.popleft()
                except IndexError:
                    break
                self._deliver(name, receiver, event)
                n += 1
            if n and q.flush is not None:
                self._flush(q, receiver)
            q.delivered += n  # after the flush: `drain` returns once the turn is done
            if self._waiters:  # read after `delivered` was counted: no wake-up is lost
                with self._lock:
                    self._cond.notify_all()
            if items:
                if to_the_end or self._closed:
                    continue  # after close no thread takes the line any more
                with self._lock:
                    if not self._closed:
                        self._ready.put(q)  # back of the line; this thread stays busy
                        return False
                continue
            q.busy.clear()
            if q.released:
                with self._lock:
                    self._forget(q)
            # An event may have come in between the last pop and the release; its
            # announcer then found `busy` held and left it to this thread. Taken
            # back with a token of this turn's own: `items` is every drainer's,
            # and two threads could each take it as theirs (review helper-163).
            mine = object()
            if not items or q.busy.setdefault(0, mine) is not mine:
                return True

    def _linger(self, q: EventQueue) -> None:
        """Let a lingering queue's events gather until `q.linger` after the oldest
        came; at once when someone waits for delivery or the announcer closes."""
        with self._lock:
            end = q.since + q.linger
            self._lingering += 1
            try:
                while not (self._waiters or self._closed):
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            finally:
                self._lingering -= 1

    def _deliver(self, name: str, receiver: Any, item: Event | Unbuilt) -> None:
        if self._bus is None:
            try:
                if not self.publisher.wants(name):
                    return  # before building: an event nobody wants is never made
            except BaseException as e:  # user code, as `publish`: it must not stop the queue
                self.failures.failed(receiver, f"{name} (in wants)", e)
                return
        try:
            event = built(item)
        except NotBuilt:
            return  # reported by the receiver that tried first
        except BaseException as e:  # toolbus's bug or a custom event's: not the receiver's
            self.failures.failed(f"(building the {name} event)", name, e)
            return
        try:
            if self._bus is None:
                self.publisher.publish(name, event)
            elif type(receiver) is Route:  # Route.__call__'s body: one call less per event
                receiver.target(self._sender, event=event, signal=receiver.signal)
            else:
                receiver(self._sender, event=event)
        except BaseException as e:  # SystemExit from a receiver included
            self.failures.failed(receiver, name, e)

    def _flush(self, q: EventQueue, receiver: Any) -> None:
        try:
            q.flush()  # type: ignore[misc]  # checked by the caller
        except BaseException as e:
            self.failures.failed(receiver, "flush", e)

    def drain(self, timeout: float | None = None, owner: object = None) -> bool:
        """Wait until every event announced so far was delivered or dropped; with
        `owner` (a `Subscription`), only those announced to it.

        False if `timeout` seconds passed first, and at once on a delivery
        thread (a receiver waiting for delivery would wait for itself).
        """
        if on_delivery_thread():
            return False
        with self._lock:
            targets = [
                (q, q.enqueued) for q in self._queues.values() if owner is None or q.owner is owner
            ]

            def done() -> bool:
                return all(q.delivered + q.dropped >= n for q, n in targets)

            self._waiters += 1
            if self._lingering:
                self._cond.notify_all()  # lingering queues: deliver now
            try:
                return self._cond.wait_for(done, timeout)
            finally:
                self._waiters -= 1

    def close(self, timeout: float | None, *, why: str = "close() ran out of time") -> int:
        """Deliver what is pending within `timeout` seconds; count and log the rest.

        Returns how many events were dropped. Events announced afterwards are
        still delivered, each woken queue by a thread of its own.

        On a delivery thread (a receiver closing its executor) it returns 0 at
        once, and the same is done by a thread of its own: the receiver cannot
        wait for delivery (its own queue waits for it to return, and it holds
        one of the pool's threads), nor drop what nobody had the time to deliver.
        """
        if self._closed:
            return 0
        if on_delivery_thread():
            threading.Thread(
                target=self._close, args=(timeout, why), name="toolbus-bus-close", daemon=True
            ).start()
            return 0
        return self._close(timeout, why)

    def _close(self, timeout: float | None, why: str) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.drain(timeout)
        with self._lock:
            if self._closed:
                return 0
            self._closed = True
            self._cond.notify_all()  # lingering queues: deliver now
            for _ in range(self._threads):
                self._ready.put(None)  # behind the queues in line, which are emptied next
        # Events announced while the first drain waited (producers racing the
        # close) are in line too: the pool empties the line before it stops,
        # so they get what is left of the time. Only if that runs out is what
        # remains dropped; an event announced from now on is delivered by a
        # thread of its own (see `announce`), never dropped here.
        if self.drain(None if deadline is None else max(0.0, deadline - time.monotonic())):
            self.failures.flush()
            return 0
        dropped = self.drop_pending(why)
        self.failures.flush()
        return dropped

    def drop_pending(self, why: str) -> int:
        """Count and log, per receiver, the events still waiting; return how many."""
        lost: list[tuple[str, int]] = []
        with self._lock:
            for q in self._queues.values():
                n = 0
                while True:
                    try:
                        _, receiver, _ = q.items.popleft()
                    except IndexError:
                        break
                    n += 1
                if n:
                    q.dropped += n
                    lost.append((describe(receiver), n))
            total = sum(n for _, n in lost)
            self.dropped += total
            self._cond.notify_all()
        for label, n in lost:
            log.warning("receiver %s lost %d event(s): not delivered when %s", label, n, why)
        return total


# At exit, what announcers still hold is delivered briefly (unclosed ones), then
# counted and logged: events left behind a receiver that never returned included.
_live: weakref.WeakSet[Announcer] = weakref.WeakSet()
_OWNED = "subscription"  # tags a subscription's queue key


def release(owner: object) -> None:
    """A subscription closed: every announcer forgets its queue (see `Announcer.release`)."""
    for announcer in list(_live):
        announcer.release(owner)


def _at_exit() -> None:
    deadline = time.monotonic() + EXIT_BUDGET
    why = "the interpreter exited"
    for announcer in list(_live):
        if not announcer.closed:
            announcer.close(max(0.0, deadline - time.monotonic()), why=why)
        # Closed before, or by another thread meanwhile (a receiver's close hands
        # its wait to a daemon thread, which may not outlive the interpreter).
        announcer.drain(max(0.0, deadline - time.monotonic()))
        announcer.drop_pending(why)


atexit.register(_at_exit)


def _offsets() -> tuple[int, int, int, int, int, int]:
    """Where in `announce`: the event is numbered (from the load of its
    `append`: nothing before has a call a signal's exception could land
    after), the loop over the plan's targets begins, a target's queue gets
    the event (its `append`), the queue is taken (its `claim` loaded), the
    first instruction after the call of `_schedule`, and where the loop ends."""
    ins = list(dis.get_instructions(_ANNOUNCE))
    appends = [i.offset for i in ins if i.argval == "append" and i.opname.startswith("LOAD_")]
    loop = next(i for i in ins if i.opname == "FOR_ITER")
    claim = next(i.offset for i in ins if i.opname == "LOAD_FAST" and i.argval == "claim")
    at = next(k for k, i in enumerate(ins) if i.argval == "_schedule")
    call = next(k for k in range(at, len(ins)) if ins[k].opname == "CALL")
    append = next(a for a in appends if a > loop.offset)
    return appends[0], loop.offset, append, claim, ins[call + 1].offset, loop.argval


_ANNOUNCE = Announcer.announce.__code__
_SCHEDULE = Announcer._schedule.__code__
_NUMBERED, _LOOP, _APPEND, _CLAIM, _SCHEDULED, _LOOP_END = _offsets()
