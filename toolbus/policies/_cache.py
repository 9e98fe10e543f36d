"""`cache`: answer a read-only call from an earlier identical call's result.

A call's key is its tool's name and its arguments as the policy is asked about
them: after the pre-call hooks and the injected values (a per-user value keeps
users apart), before masking, each value with its type, hashed (the key holds
no secret in memory). Only data is keyed (`_cache_key.py`): a call whose
arguments hold what is not (an injected object, a model holding a SecretStr)
is not cached, unless the
cache's `key` function makes data of it. An `ok` result is kept `ttl` seconds (at most `maxsize`
results, least recently used out first); errors are never kept.

Identical calls at once run once. The first is the leader; each later one
(a follower) is delayed until the leader ends (`Delay(until=...)`: a timer
holding no thread or slot). When it ends ok, the followers are asked again
and hit the cache; when it fails, they are asked again and one of them leads
the next try, the others following it: never two at once. So while the tool
keeps failing (timing out, say), the calls run one after another, each after
the one before failed, and each ends with its own failure: n identical calls
of a tool that always times out take n deadlines in all. Errors are not kept,
so no call is answered with another's failure. A follower that ends while it
waits (cancelled) leaves the flight (`on_dropped`).

A leader is only known to end through `on_result`. The executor tells every
policy that admitted a call its terminal result, but a call settled by the
supervisor (a deadline, a cancellation) while a policy is being asked may not
be told (see the notes in docs/policies.md). So a flight has a budget (`wait`):
once it has run that long, the next follower asked presumes the leader lost
and leads a new flight itself; the others follow it. Nobody waits forever.
A call's key is made once, when it is asked (`admit`), and kept for its
`on_result`/`on_dropped`: a `key` function is never asked again where it
might raise, or read another thread's context, and leave a flight unresolved.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._json import detached, loads
from ..models import ToolCall, ToolResult
from ._cache_key import cache_key
from ._protocol import ADMIT, BasePolicy, Decision, Delay, Respond
from ._signals import CACHE_HIT, CacheHit, announce, call_timeout

if TYPE_CHECKING:
    from cachetools import TTLCache

    from ..tools import Tool

__all__ = ["Cache", "cache"]

log = logging.getLogger("toolbus")

# A follower's wait when nothing bounds it better: the longest a flight may go
# on before it is presumed lost, when its calls have no deadline.
LONG_WAIT = 600.0
# With a deadline, a flight may take this many of its attempts' deadlines
# (room for retries and their backoff) before it is presumed lost.
WAIT_DEADLINES = 4.0


def cache(
    ttl: float = 300.0,
    maxsize: int = 1024,
    *,
    wait: float | None = None,
    key: Callable[[ToolCall], Any] | None = None,
) -> Cache:
    """A cache of read-only tools' `ok` results; identical calls at once run once.

    - `ttl`: seconds a result is kept (from when it was stored).
    - `maxsize`: results kept at most; the least recently used go first.
    - `wait`: seconds identical calls wait for one in flight before one of
      them presumes it lost and runs itself. None: 4 deadlines of the call's
      attempts, at least 600 s (600 s when it has no deadline).
    - `key`: `key(call)` -> data (str, numbers, lists, dicts, dataclasses and
      pydantic models holding only data) that identifies the call's answer, keyed
      in place of its arguments. Without it the arguments are the key, and a
      call whose arguments hold what is not data (an injected session or
      client object) is not cached: an object's repr (a memory address, reused)
      cannot keep users apart.

    Given to a tool, a mutating tool is refused (ValueError when it is made);
    given to an executor, it guards only the read-only tools."""
    return Cache(ttl=ttl, maxsize=maxsize, wait=wait, key=key)


@dataclass(slots=True)
class _Flight:
    """An identical call in flight: the leader, and who waits for it."""

    # Calls are known by the object, not their id, which a model may repeat
    # (the executor asks `admit` and tells `on_result`/`on_dropped` with the
    # same object; holding it keeps its id() from being reused meanwhile).
    leader: ToolCall
    expires: float  # when it is presumed lost
    future: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)
    followers: dict[int, ToolCall] = field(default_factory=dict)  # by id()


@dataclass(slots=True)
class _Entry:
    """A stored result, and the followers of its flight not yet answered (their
    hit says `shared`)."""

    result: ToolResult
    shared_with: dict[int, ToolCall]  # by id()


class Cache(BasePolicy):
    """See `cache()`. `waiting`: calls now delayed for an identical call in flight."""

    name = "cache"

    def __init__(
        self,
        *,
        ttl: float,
        maxsize: int,
        wait: float | None,
        key: Callable[[ToolCall], Any] | None = None,
    ) -> None:
        self.ttl = _positive(ttl, "ttl")
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"cache: maxsize must be an integer >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self.wait = None if wait is None else _positive(wait, "wait")
        if key is not None and not callable(key):
            raise TypeError(f"cache: key must be a function of the call, got {key!r}")
        self.key = key
        self._unkeyed: set[str] = set()  # tools whose uncached calls were logged
        self._lock = threading.Lock()
        # The cache's clock is the `now` it is handed (monotonic, or a test's
        # fake): TTLCache reads it through the timer below.
        self._now = -math.inf
        from cachetools import TTLCache  # only when a cache is made: `import toolbus` stays light

        self._results: TTLCache[bytes, _Entry] = TTLCache(maxsize, self.ttl, timer=self._clock)
        self._flights: dict[bytes, _Flight] = {}
        # The key each call in flight (a leader, a follower) was given when
        # it was asked: `on_result` and `on_dropped` use it, never asking the
        # `key` function again (it may raise then, or read another thread's
        # context and key the result elsewhere: a flight never resolved).
        self._keys: dict[int, tuple[ToolCall, bytes]] = {}  # by id()

    def _clock(self) -> float:
        return self._now

    def _tick(self, now: float) -> None:
        # Asked from several threads, `now`s may arrive a hair out of order:
        # the clock never goes back.
        self._now = max(self._now, now)

    @property
    def waiting(self) -> int:
        """Calls now delayed for an identical call in flight (the leaders not counted)."""
        with self._lock:
            return sum(len(f.followers) for f in self._flights.values())

    def __len__(self) -> int:
        """Results stored and not expired."""
        with self._lock:
            return sum(1 for _ in self._results)

    def clear(self) -> None:
        """Forget every stored result (calls in flight go on)."""
        with self._lock:
            self._results.clear()

    # -- the protocol ----------------------------------------------------------------

    def applies_to(self, tool: Tool) -> bool:
        return bool(tool.read_only)

    def check(self, tool: Tool) -> None:
        if not tool.read_only:
            raise ValueError(
                f"tool {tool.name!r}: a cache guards read-only tools only; a mutating "
                "tool's calls must each run (declare it read_only=True if it is)"
            )

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        key = self._key(call)
        if key is None:
            self._not_keyed(call.name)
            return ADMIT
        budget = self._budget()
        woken: list[_Flight] = []
        with self._lock:
            self._tick(now)
            entry = self._results.get(key)
            self._keys.pop(id(call), None)  # asked again: keyed anew below
            if entry is not None:
                shared = entry.shared_with.pop(id(call), None) is not None
                decision: Decision = Respond(_marked(entry.result, "hit"))
            else:
                flight = self._flights.get(key)
                if flight is None or now >= flight.expires:
                    # A flight past its budget is presumed lost (its end never
                    # told): this call leads a new one, and the old one's
                    # followers, woken, follow it. Others lost are let go here.
                    woken = self._lost(now)
                    self._flights[key] = flight = _Flight(call, now + budget)
                    self._keys[id(call)] = (call, key)
                    decision = ADMIT
                else:
                    flight.followers[id(call)] = call
                    self._keys[id(call)] = (call, key)
                    decision = Delay(
                        flight.expires - now,
                        f"an identical call ({flight.leader.id}) is in flight",
                        until=flight.future,
                    )
        for lost in woken:
            _wake(lost)
        if type(decision) is Respond:
            announce(CACHE_HIT, lambda bid: CacheHit(call.id, call.name, bid, 0, shared))
        return decision

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        key = self._asked_key(call)
        if key is None:
            return None  # not cached (see admit)
        ok = result.status == "ok"
        woken: _Flight | None = None
        with self._lock:
            self._tick(now)
            flight = self._flights.get(key)
            if ok:
                # Whoever brought it (the leader, or a call that presumed it
                # lost), the followers of this key are answered by it.
                followers = dict(flight.followers) if flight is not None else {}
                self._results[key] = _Entry(result, followers)
                if flight is not None:
                    woken = self._flights.pop(key)
            elif flight is not None and flight.leader is call:
                # Errors are not kept: the followers are asked again, and the
                # first of them leads the next try.
                woken = self._flights.pop(key)
            elif flight is not None:
                # A follower that ended while it waited (told here by an
                # executor without on_dropped): it waits no more.
                flight.followers.pop(id(call), None)
        if woken is not None:
            _wake(woken)
        return _marked(result, "miss") if ok else None

    def on_dropped(self, call: ToolCall, result: ToolResult, now: float) -> None:
        """A follower ended while it waited (cancelled, its executor closed):
        it no longer counts as waiting, nor is it answered when the flight ends."""
        key = self._asked_key(call)
        if key is None:
            return
        with self._lock:
            self._tick(now)
            flight = self._flights.get(key)
            if flight is not None and flight.leader is not call:
                flight.followers.pop(id(call), None)
            entry = self._results.get(key)
            if entry is not None:  # woken by its answer, it ended before it asked again
                entry.shared_with.pop(id(call), None)

    def _key(self, call: ToolCall) -> bytes | None:
        """`call`'s key; None when what it is keyed by is not data."""
        if self.key is not None:
            return cache_key(call.name, self.key(call))
        arguments: Any = call.arguments
        if isinstance(arguments, str):
            # The model's raw JSON text: keyed as what it says (spacing and key
            # order do not matter); text that is not JSON is not cached.
            try:
                arguments = loads(arguments)
            except ValueError:
                return None
        return cache_key(call.name, arguments)

    def _asked_key(self, call: ToolCall) -> bytes | None:
        """The key `call` was given when last asked, let go. One not kept (a
        leader presumed lost, told after all) is made again (outside the
        lock: user code); a `key` function that raises now gives none."""
        with self._lock:
            held = self._keys.pop(id(call), None)
        if held is not None and held[0] is call:
            return held[1]
        try:
            return self._key(call)
        except Exception:
            return None

    def _not_keyed(self, tool: str) -> None:
        with self._lock:
            if tool in self._unkeyed:
                return
            self._unkeyed.add(tool)
        how = "its arguments hold" if self.key is None else "cache(key=...) returned"
        hint = "; give cache(key=...) a function of the call returning data"
        log.warning(
            "cache: calls of %r are not cached: %s what is not data (an injected object?), "
            "which cannot key a result apart from other users'%s",
            tool,
            how,
            hint if self.key is None else "",
        )

    def _lost(self, now: float) -> list[_Flight]:
        """Let go of the flights past their budget at `now` (under the lock)."""
        gone = [k for k, f in self._flights.items() if now >= f.expires]
        lost = [self._flights.pop(k) for k in gone]
        for flight in lost:  # never told of: their calls' keys let go
            self._keys.pop(id(flight.leader), None)
            for follower in flight.followers:
                self._keys.pop(follower, None)
        return lost

    def _budget(self) -> float:
        if self.wait is not None:
            return self.wait
        deadline = call_timeout()
        if deadline is None or not math.isfinite(deadline):
            return LONG_WAIT
        return max(LONG_WAIT, WAIT_DEADLINES * deadline)


def _marked(result: ToolResult, how: str) -> ToolResult:
    """`result` marked, with an output of its own: a caller that edits what it
    was given never changes what is stored, nor what a later hit gets."""
    return result.model_copy(
        update={"output": detached(result.output), "metadata": {**result.metadata, "cache": how}}
    )


def _wake(flight: _Flight) -> None:
    # Outside the lock: the future's callbacks (the followers' wake-ups) run here.
    if not flight.future.done():
        flight.future.set_result(None)


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"cache: {what} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an int past a float's range: 10**400
        seconds = math.inf
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"cache: {what} must be a finite number of seconds > 0, got {value!r}")
    return seconds
