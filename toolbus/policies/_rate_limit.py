"""`rate_limit`: at most N calls start in any window of the rate's length.

Built on the `limits` library: its moving-window strategy counts the
admissions of the last window (never a fixed window that resets, which lets
2N through across a boundary), kept in a storage named by URI: `memory://`
(this policy object alone) or `redis://host:port` (every process using that
Redis with the same rate and key shares one limit).

A call over the limit waits: `admit` returns a `Delay`, which the executor
turns into a timer (the call holds no thread and no slot while it waits), and
asks again when it is up. Waiting calls are given turns, first come, first
served: each admission and each waiting call has a place in its key's line,
and the call at place n is asked again a window after the use at place n - N
(N: the rate's count), when by this policy's count the window has room for
it. So they wake one by one as slots free, instead of all waking at the one
instant a slot frees and all but one waiting again (a thundering herd, which
can starve a call until it gives up). The storage decides: a call whose turn
came but finds the window full (another process took the slot) is asked
again at the storage's next opening, spaced at the rate's pace from the
other calls this happened to.

A waiting call that ends without its turn (cancelled while it waits: its
batch cancelled, the executor closed) gives its place back at once: the
executor tells the policy (`on_dropped`, or `on_result` for a call it only
delayed), and a call never heard of again is let go a window after its turn.
Its place is then as if it had been used at its turn (the calls behind it in
line keep theirs), and places given back at the end of the line are freed
for good: with nothing live behind them the next call takes the first of
them, so a cancelled crowd does not hold back the calls that come after it.

One piece: the policy, its waiting line and its storage share the line's
lock and places; a turn means something only with all three.
"""

from __future__ import annotations

import heapq
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._options import non_negative_number
from ..models import ErrorCode, ToolCall, ToolResult
from ._keyed import KeyFunction, check_key, key_of, seconds_text
from ._protocol import ADMIT, BasePolicy, Decision, Delay, Reject
from ._signals import THROTTLED, Throttled, announce, call_timeout, scrub, time_left

if TYPE_CHECKING:
    from limits import RateLimitItem
    from limits.strategies import MovingWindowRateLimiter

    from ..tools import Tool

# `limits` is imported when a rate limit is made, not with toolbus: it brings
# `deprecated` and `wrapt` along, a tenth of a second no other import needs.

__all__ = ["RateLimit", "rate_limit"]

# The limits' keys in a shared storage: LIMITER/toolbus/<key>/<rate>.
_NAMESPACE = "toolbus"
# The shortest wait handed out: a timer of 0 would only ask again at once.
_SHORTEST = 0.001
# A window has room strictly after its oldest admission's expiry (limits'
# rule): a turn falls this much after it, so a timer that fires on time finds
# the room there.
_MARGIN = 0.0001


@dataclass(slots=True)
class _Wait:
    """A call waiting for its turn.

    Known by the call object itself, not its id: a model may repeat ids, and
    two calls that share one each keep their place in line. (The executor
    asks again about a waiting call, and tells of its end, with the same
    object; keeping it here keeps its `id()` from being reused meanwhile.)"""

    call: ToolCall
    key: str
    seq: int  # its place in its key's line
    turn: float  # on the storage's clock: when it is asked again
    since: float  # on the executor's clock (`now`): when it was first delayed


@dataclass(slots=True)
class _Line:
    """One key's uses of the limit, as this policy object knows them.

    Every admission and every waiting call has a place (`seq`) in order of
    arrival, and a time: when it was admitted, or the turn it waits for. The
    call at place n may start a window after the use at place n - N (N: the
    rate's count): that is when, by this reckoning, the window has room for it.
    """

    next_seq: int = 0
    first: int = 0  # the oldest place still in `uses`
    uses: dict[int, float] = field(default_factory=dict)  # place -> admitted at, or turn
    refused: float = -math.inf  # the latest turn given after the storage said no
    waiting: int = 0
    # Places whose waiting call ended without its turn: still in `uses` (at
    # that turn, so those behind keep theirs) until the end of the line
    # reaches them, which then moves back over them.
    given_back: set[int] = field(default_factory=set)


class RateLimit(BasePolicy):
    """At most `rate` calls start in any window of its length, per tool or per key.

    Promises: in any window as long as the rate's (a second for "10/second")
    at most N calls are admitted per key, counted in the storage; a call over
    the limit waits without holding a thread or a slot (with `wait=True`), or
    ends `rejected` with `RATE_LIMITED` and a message saying the limit and how
    long it would wait, when it would wait longer than `max_wait` in all
    (counted from its first delay) or when `wait=False`. A key function that
    raises rejects the call (`TOOL_UNAVAILABLE`, naming the policy).

    A storage that cannot be reached when a call is asked about fails the call
    closed (`rejected`, `TOOL_UNAVAILABLE`, the executor names the policy).
    """

    def __init__(
        self,
        rate: str,
        *,
        key: KeyFunction | None = None,
        wait: bool = True,
        max_wait: float | None = None,
        storage: str = "memory://",
        clock: Callable[[], float] | None = None,
        on_admit: Callable[[str, float], object] | None = None,
    ) -> None:
        self.item = _parse(rate)
        self.rate = rate
        self.limit = str(self.item)  # "10 per 1 second", for messages and events
        self.name = f"rate_limit({rate}{', per key' if key is not None else ''})"
        self._key = check_key(key, "rate_limit")
        if not isinstance(wait, bool):
            raise TypeError(f"rate_limit: wait must be True or False, got {wait!r}")
        self.wait = wait
        self.max_wait = _check_max_wait(max_wait)
        if on_admit is not None and not callable(on_admit):
            raise TypeError(f"rate_limit: on_admit must be callable, got {on_admit!r}")
        self._on_admit = on_admit
        if clock is not None and not callable(clock):
            raise TypeError(f"rate_limit: clock must be callable, got {clock!r}")
        # The storages stamp admissions with the wall clock (`time.time()`):
        # the only clock processes sharing a Redis agree on. Turns are reckoned
        # on it too; the executor's `now` only counts how long a call waited.
        self._clock: Callable[[], float] = clock if clock is not None else time.time
        self.storage = storage
        self._limiter = _limiter(storage)
        # Kept in memory, and with no function of the user's to call but its
        # clock, it answers at once (`BasePolicy.never_blocks`); a subclass
        # with an `admit` of its own says so itself.
        self.never_blocks = (
            storage.startswith("memory://")
            and key is None
            and on_admit is None
            and type(self).admit is RateLimit.admit
        )
        self._window = float(self.item.get_expiry())
        # How far apart calls refused by the storage are asked again: the rate's pace.
        self._spacing = self._window / self.item.amount
        # A waiting call that has not come back a window after its turn is
        # gone (ended while it waited, and the policy was not told): let it go.
        self._stale_after = max(self._window, 1.0)
        self._lock = threading.Lock()
        self._lines: dict[str, _Line] = {}
        self._waiting: dict[int, _Wait] = {}  # by id() of the waiting call
        self._expiries: list[tuple[float, int]] = []  # (when to forget, id() of a call), a heap
        self._next_sweep = -math.inf

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        """Admit `call` if its key's window has room now; else a `Delay` until
        its turn, or `Reject(RATE_LIMITED)`."""
        key = key_of(call, self._key, self.name)
        if isinstance(key, Reject):
            return key
        limit = self._limit_for_call()
        left = time_left()
        with self._lock:
            at = self._clock()
            decision = self._decide(call, key, at, now, limit, left)
        if type(decision) is Delay:
            # Masked like the call's arguments: a key may be taken from a secret one.
            shown = scrub(key) if self._key is not None else None
            wait, rate = decision.seconds, self.limit
            announce(
                THROTTLED,
                lambda batch_id: Throttled(call.id, call.name, batch_id, 0, wait, rate, shown),
            )
        elif decision is ADMIT and self._on_admit is not None:
            self._on_admit(key, at)
        return decision

    def _decide(
        self,
        call: ToolCall,
        key: str,
        at: float,
        now: float,
        max_wait: float | None,
        left: float | None = None,
    ) -> Decision:
        """The decision about `call` of `key` at `at` (the storage's
        clock) and `now` (the executor's), when it may wait `max_wait` seconds
        in all (None: for ever) and has `left` seconds before its whole-call
        deadline (None: none). Pure over the policy's state, its storage's
        and the times given; call it holding the lock."""
        self._forget_stale(at)
        ident = id(call)
        mine = self._waiting.get(ident)
        if mine is not None and mine.key != key:  # its key changed while it waited: start over
            self._drop(ident, give_back=True)
            mine = None
        line = self._lines.get(key)
        if line is None:
            line = _Line()
        else:
            self._trim(line, at)
        seq = mine.seq if mine is not None else line.next_seq
        before = line.uses.get(seq - self.item.amount)
        due = before + self._window + _MARGIN if before is not None else -math.inf
        opening: float | None = None
        if due > at:
            # By this policy's reckoning the window is full until then: no
            # need to ask the storage (a call behind others in line lands here).
            turn = due
        elif self._limiter.hit(self.item, _NAMESPACE, key):
            if mine is not None:
                self._drop(ident, give_back=False)
            else:
                line.next_seq += 1
            line.uses[seq] = at
            self._lines[key] = line
            return ADMIT
        else:
            # The storage says no where this policy reckoned room (another
            # process took it, or a turn came early): its next opening, spaced
            # from the other calls this happened to, not all at that instant.
            opening = self._opening(key, at)
            turn = max(opening, line.refused + self._spacing)
        turn = max(turn, at + _SHORTEST)
        waited = max(0.0, now - mine.since) if mine is not None else 0.0
        # (A wait within a millisecond of `max_wait` is within it: the margin
        # added to each turn must not refuse a call that waits just `max_wait`.)
        # A turn after the call's whole-call deadline is no turn: it ends now.
        late = left is not None and turn - at > left
        if (
            not self.wait
            or late
            or (max_wait is not None and waited + (turn - at) > max_wait + _SHORTEST)
        ):
            if mine is not None:
                self._drop(ident, give_back=True)  # it will not use its turn
            opens_in = (opening if opening is not None else turn) - at
            return Reject(
                ErrorCode.RATE_LIMITED,
                self._refusal(key, opens_in, waited + turn - at, max_wait, late=late),
            )
        if opening is not None:
            line.refused = turn
        if mine is None:
            line.next_seq += 1
            line.waiting += 1
            self._waiting[ident] = _Wait(call, key, seq, turn, now)
        else:
            mine.turn = turn
        line.uses[seq] = turn
        self._lines[key] = line
        heapq.heappush(self._expiries, (turn + self._stale_after, ident))
        return Delay(turn - at, f"rate limit {self.limit}")

    def _opening(self, key: str, at: float) -> float:
        """When `key`'s full window has room again: when its oldest admission leaves it."""
        stats = self._limiter.get_window_stats(self.item, _NAMESPACE, key)
        return max(float(stats.reset_time) + _MARGIN, at)

    def _drop(self, ident: int, *, give_back: bool) -> None:
        """The call `ident` (its `id()`) waits no more; `give_back`: nor will
        it use its turn.

        A place given back keeps its turn in `uses` while live places follow
        it (their turns were reckoned from it, and a place left empty would
        send the next newcomer straight to the storage, ahead of them). At
        the end of the line it is freed, with every given-back place before
        it: the line is then as if those calls had never come."""
        mine = self._waiting.pop(ident, None)
        if mine is None:
            return
        line = self._lines.get(mine.key)
        if line is None:
            return
        line.waiting -= 1
        if not give_back or mine.seq not in line.uses:
            return
        line.given_back.add(mine.seq)
        while line.next_seq > line.first and (line.next_seq - 1) in line.given_back:
            line.next_seq -= 1
            line.given_back.discard(line.next_seq)
            line.uses.pop(line.next_seq, None)
        if line.waiting <= 0:
            # Nobody waits: no turn given after a refusal is still to come.
            line.refused = -math.inf

    def on_dropped(self, call: ToolCall, result: ToolResult, now: float) -> None:
        """A call this policy delayed ended while it waited (cancelled, its
        executor closed, its batch stopped): its turn is given back at once."""
        with self._lock:
            self._drop(id(call), give_back=True)

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
        """A call this policy admitted ended: nothing to do (its admission
        stands, in the storage). A call it still made wait ended meanwhile
        (told here by executors without `on_dropped`): as `on_dropped`."""
        with self._lock:
            if id(call) in self._waiting:
                self._drop(id(call), give_back=True)

    def _trim(self, line: _Line, at: float) -> None:
        """Forget the uses too old to hold any call back."""
        cutoff = at - self._window - self._stale_after
        uses = line.uses
        while line.first < line.next_seq:
            used = uses.get(line.first)
            if used is not None and used >= cutoff:
                break
            uses.pop(line.first, None)
            line.given_back.discard(line.first)
            line.first += 1

    def _forget_stale(self, at: float) -> None:
        """Let go of the waiting calls that never came back (they ended while
        they waited, and the policy was not told), giving their turns back,
        and forget the keys nobody used lately."""
        expiries = self._expiries
        while expiries and expiries[0][0] < at:
            _, ident = heapq.heappop(expiries)
            mine = self._waiting.get(ident)
            if mine is not None and mine.turn + self._stale_after < at:
                self._drop(ident, give_back=True)
        if at >= self._next_sweep:
            self._next_sweep = at + self._stale_after
            for key, line in list(self._lines.items()):
                self._trim(line, at)
                if not line.uses and line.waiting <= 0:
                    del self._lines[key]

    def _limit_for_call(self) -> float | None:
        if self.max_wait is not None:
            return None if self.max_wait == math.inf else self.max_wait
        return call_timeout()  # the default: no longer than one attempt may run

    def _refusal(
        self,
        key: str,
        opens_in: float,
        wait: float,
        max_wait: float | None,
        *,
        late: bool = False,
    ) -> str:
        whose = f" for {scrub(key)!r}" if self._key is not None else ""
        head = f"Rate limit reached{whose}: at most {self.limit}"
        if late:
            opens = seconds_text(opens_in)
            return (
                f"{head}; this call's turn would come in {opens}, after its deadline "
                "(call_timeout). Try again later, or make fewer calls."
            )
        if not self.wait:
            opens = seconds_text(opens_in)
            return f"{head}; the next call can start in {opens}. Try again after that."
        return (
            f"{head}; this call would have waited {seconds_text(wait)} in all, more than the "
            f"{seconds_text(max_wait or 0.0)} it may wait. Try again later, or make fewer calls."
        )

    @property
    def waiting(self) -> int:
        """How many calls wait for a turn now (for tests and dashboards)."""
        with self._lock:
            return len(self._waiting)


def rate_limit(
    rate: str,
    key: KeyFunction | None = None,
    wait: bool = True,
    max_wait: float | None = None,
    storage: str = "memory://",
    *,
    clock: Callable[[], float] | None = None,
    on_admit: Callable[[str, float], object] | None = None,
) -> RateLimit:
    """At most `rate` calls ("10/second", "100 per minute") start in any window
    of its length: per tool, or per `key(call)`.

    - `wait`: a call over the limit waits its turn (holding no thread), else it
      ends `rejected` (`RATE_LIMITED`) at once.
    - `max_wait`: the longest a call may wait in all, counted from its first
      delay; None: the call's timeout (no limit if it has none); `math.inf`: for ever.
      A call that would wait longer ends `rejected` (`RATE_LIMITED`) at once.
    - `storage`: a `limits` storage URI; `redis://host:port` shares the limit
      across processes (`pip install 'toolbus[redis]'`).
    - `clock`: the storage's clock (default `time.time`, the one `limits`
      stamps admissions with): for tests that drive limits' clock too.
    - `on_admit(key, at)`: told each admission and its time on that clock (quick, never blocking).
    """
    return RateLimit(
        rate,
        key=key,
        wait=wait,
        max_wait=max_wait,
        storage=storage,
        clock=clock,
        on_admit=on_admit,
    )


# "5 per 0 seconds", "5/0 second": a window of no length.
_ZERO_WINDOW = re.compile(r"(?:/|\bper\b)\s*0+(?:\.0*)?\s*[a-z]", re.IGNORECASE)


def _parse(rate: object) -> RateLimitItem:
    import limits

    if not isinstance(rate, str):
        raise TypeError(f"rate_limit: rate must be a string like '10/second', got {rate!r}")
    try:
        items = limits.parse_many(rate)
    except ValueError:
        items = []
    if _ZERO_WINDOW.search(rate):
        # (the `limits` library reads a window of 0 as 1: "5 per 0 seconds"
        # would be 5 per second)
        raise ValueError(f"rate_limit: a rate's window must be longer than 0, got {rate!r}")
    if len(items) != 1 or items[0].amount < 1:
        raise ValueError(
            f"rate_limit: rate must be one rate like '10/second' or '100 per minute' "
            f"(at least 1 call), got {rate!r}"
        )
    return items[0]


def _check_max_wait(value: object) -> float | None:
    if value is None:
        return None
    if value == math.inf:
        return math.inf
    return non_negative_number(value, "max_wait", "rate_limit")


def _limiter(uri: object) -> MovingWindowRateLimiter:
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    if not isinstance(uri, str):
        raise TypeError(f"rate_limit: storage must be a URI string, got {uri!r}")
    try:
        return MovingWindowRateLimiter(storage_from_string(uri))
    except Exception as e:  # unknown scheme, missing client library, no moving window
        hint = " (install toolbus[redis])" if uri.startswith("redis") else ""
        raise ValueError(
            f"rate_limit: storage {uri!r} cannot hold a moving-window limit: {e}{hint}"
        ) from e
