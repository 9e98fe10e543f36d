"""What an executor holds of its approvals: the requests waiting for a
decision, and the single-use decisions it has let through.

A call that ends `deferred` with a request (an approval, a question, an
external tool's result) is held as pending until a decision on it is judged
genuine (`_decisions.judge`), whatever it decides; `Executor.pending()` lists
them. Single-use decisions are remembered until they expire (one past its
`expires_at` is refused as expired anyway). With a journal, both are kept
there too, so another process on the same journal, or this one after a
restart, lists the same requests and cannot use a decision again.

Without a journal the executor holds at most `KEPT` requests, and never lets
one go undecided: a call that would wait beyond them is not deferred at all
(`reserve` says there is no room; `_results.finish` ends it `rejected`,
`OVERLOADED`, saying why). With one, the journal holds them all, and the
executor's own copies are only the newest `KEPT` of those it stored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["PendingRequests", "PendingStore", "UsedDecisions", "held_limit"]

log = logging.getLogger("toolbus")


class UsedDecisions:
    """The single-use decisions used on one executor (thread-safe)."""

    __slots__ = ("_lock", "_used", "record")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, float] = {}  # decision id -> when it may be forgotten
        # With a journal: record a use there; False if it was recorded before.
        self.record: Callable[[str, float | None], bool] | None = None

    def use(self, decision_id: str, expires_at: float | None) -> bool | None:
        """Use `decision_id` once: True the first time, False after; None if
        the journal could not say (it is not used then: try again later)."""
        now = time.time()
        with self._lock:
            if decision_id in self._used:
                return False
            if self.record is not None:
                try:
                    fresh = self.record(decision_id, expires_at)
                except Exception as e:  # never used twice: not used at all (fails closed)
                    log.warning("recording a single-use decision failed (%s)", type(e).__name__)
                    return None
                if not fresh:
                    return False
            # Kept until it expires (then it is refused as expired anyway); one
            # that never expires is kept for the executor's life.
            self._used[decision_id] = expires_at if expires_at is not None else float("inf")
            if len(self._used) > 4096:
                self._used = {k: t for k, t in self._used.items() if t > now}
            return True


# The most requests held in memory: all of them without a journal (a call
# that would wait beyond them is refused), the newest stored with one.
KEPT = 10_000


def held_limit() -> int:
    """The most requests an executor without a journal holds (`KEPT`)."""
    return KEPT


class PendingStore(Protocol):
    """Where pending requests outlive the process (the journal)."""

    def hold_request(self, request: Any, agent_run: str | None = None) -> None: ...

    def release_request(self, digest: str, call_id: str) -> bool: ...

    def claim_unheld(self, request: Any, since: float) -> bool: ...

    def release_requests(self, keys: list[tuple[str, str]]) -> None: ...

    def pending(self) -> list[Any]: ...


class PendingRequests:
    """The requests an executor waits on a decision for (thread-safe), by
    digest and call id (two calls with the same arguments wait apart)."""

    __slots__ = ("_lock", "_requests", "_reserved", "_runs", "_unstored", "halted", "store")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], Any] = {}
        self._reserved = 0  # room taken for requests about to be held (`reserve`)
        # Held here only, since when: the journal failed to take them (they
        # are claimed here, and listed beside the journal's).
        self._unstored: dict[tuple[str, str], float] = {}
        self._runs: dict[tuple[str, str], str] = {}  # the agent run each was asked in
        self.store: PendingStore | None = None
        # Whether an agent run is halted here: its calls' requests are not held.
        self.halted: Callable[[str], bool] = lambda agent_run: False

    def reserve(self, key: tuple[str, str], freed: tuple[str, str] | None = None) -> bool:
        """Take room to hold a request of `key` (digest, call id), which the
        caller then holds (`hold(..., reserved=True)`) or gives back
        (`unreserve`). Always there with a journal (it holds them all);
        without, False when `KEPT` requests wait (or are about to) already:
        the call cannot be held, and must not be deferred. A request of `key`
        itself, or of `freed` (the one a decision on this call settles), is
        room: held again, or let go, it takes no more."""
        with self._lock:
            if (
                self.store is None
                and key not in self._requests
                and (freed is None or freed not in self._requests)
                and len(self._requests) + self._reserved >= KEPT
            ):
                return False
            self._reserved += 1
            return True

    def unreserve(self) -> None:
        """Give back the room `reserve` took, for a request not held after all."""
        with self._lock:
            self._reserved -= 1

    def hold(self, request: Any, agent_run: str | None = None, *, reserved: bool = False) -> None:
        """`request`, asked in `agent_run` (if any), waits for a decision
        (again), unless that run is halted (now, or while it is written).
        `reserved`: in the room `reserve` took for it."""
        key = (request.digest, request.call_id)
        with self._lock:
            if reserved:
                self._reserved -= 1
            # Under the lock: a halt's `drop_run` comes before (it is not
            # held) or after (it drops it).
            if agent_run is not None and self.halted(agent_run):
                return
            self._requests.pop(key, None)
            self._requests[key] = request  # (the newest last)
            self._unstored.pop(key, None)
            self._runs.pop(key, None)
            if agent_run is not None:
                self._runs[key] = agent_run
            if self.store is not None and len(self._requests) > KEPT:
                self._forget_oldest_stored(key)
        if self.store is None:
            return
        since = time.time()
        try:
            self.store.hold_request(request, agent_run)
        except Exception as e:  # waits here alone, and is decided here
            log.warning("holding a pending request in the journal failed: %s", e)
            with self._lock:
                if self._requests.get(key) is request:
                    self._unstored[key] = since
            return
        if agent_run is not None and self.halted(agent_run):
            # Halted while it was written: the halt's release may have gone first.
            self.drop_run(agent_run, [key])

    def _forget_oldest_stored(self, new: tuple[str, str]) -> None:
        """Let go of the oldest copy the journal holds (under the lock): it is
        still listed, and decided, there. One only held here (its write to
        the journal failed) is never let go, nor `new`, whose write is still
        to come (it may fail): with nothing else to let go, all are kept."""
        for oldest in self._requests:
            if oldest not in self._unstored and oldest != new:
                del self._requests[oldest]
                self._runs.pop(oldest, None)
                return

    def run_of(self, digest: str, call_id: str) -> str | None:
        """The agent run the request of `digest` for `call_id` was asked in."""
        with self._lock:
            return self._runs.get((digest, call_id))

    def release(self, digest: str, call_id: str) -> None:
        """A decision on the request of `digest` for `call_id` was made."""
        self.claim(digest, call_id)

    def claim(self, digest: str, call_id: str) -> bool | None:
        """Take the request of `digest` for `call_id` off the list: True for
        the one caller that did (of every thread, and every process on the
        journal), False if it was not waiting (decided, completed, unknown),
        None if the journal could not say (it stays waiting)."""
        key = (digest, call_id)
        with self._lock:
            request = self._requests.pop(key, None)
            run = self._runs.pop(key, None)
            if self.store is None:
                return request is not None
            try:
                since = self._unstored.get(key)
                if since is not None and request is not None:
                    # Its last write to the journal failed: the journal may
                    # not have it, or have it from an earlier asking (decided
                    # then, or taken by another process since).
                    claimed = self.store.claim_unheld(request, since)
                    del self._unstored[key]
                    return claimed
                return self.store.release_request(digest, call_id)
            except Exception as e:
                log.warning("releasing a pending request in the journal failed: %s", e)
                if request is not None:
                    self._requests[key] = request
                    if run is not None:
                        self._runs[key] = run
                return None

    def drop_run(self, agent_run: str, keys: list[tuple[str, str]] | None = None) -> None:
        """`agent_run` was halted (on this executor): the requests asked in
        it here (of `keys`, if given) wait no more (a decision on one would
        find its call halted)."""
        with self._lock:
            if keys is None:
                keys = [k for k, run in self._runs.items() if run == agent_run]
            for key in keys:
                self._runs.pop(key, None)
                self._requests.pop(key, None)
                self._unstored.pop(key, None)
        if self.store is not None and keys:
            try:
                self.store.release_requests(keys)
            except Exception as e:  # listed until decided: a decision finds the run halted
                log.warning("releasing a halted run's requests in the journal failed: %s", e)

    def list(self) -> list[Any]:
        """The requests waiting, oldest first: the journal's (every process's,
        and those held before a restart) when there is one, else this executor's."""
        if self.store is not None:
            try:
                stored = self.store.pending()
            except Exception as e:  # a closed or failing journal: what this process holds
                log.warning("listing the pending requests of the journal failed: %s", e)
            else:
                with self._lock:
                    listed = {(r.digest, r.call_id) for r in stored}
                    return stored + [self._requests[k] for k in self._unstored if k not in listed]
        with self._lock:
            return list(self._requests.values())
