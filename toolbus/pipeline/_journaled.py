"""What the journal says before a mutating call runs.

`before_journaled` runs once per mutating call with a journal (or a gate),
after the call's policies let it through and before its tool first runs:

- a gate (`Run.gate`): the call waits until a durable engine has recorded
  its intent (`toolbus.integrations.dbos`), off its deadline's clock;
- a call in doubt: a call of the same tool and key that a dead process left
  started and unfinished. If its work still runs elsewhere (a remote task
  its tool recorded, and still knows), it runs again to pick that work up
  (`ToolContext.remote_task`); otherwise, with `Executor(on_in_doubt=...)`,
  the in-doubt rule (`toolbus.in_doubt`) decides: run again, skipped with a
  result, or failed `IN_DOUBT`. Its old record is acknowledged;
- the intent is recorded (synced) before the tool runs; what it finds may end
  the call instead: an earlier `ok` call of the key (replayed), the key used
  for other arguments (`IDEMPOTENCY_KEY_REUSED`), a call of the key still
  running, or ended while its tool, let go, still runs (`IDEMPOTENCY_KEY_IN_USE`),
  or, with `journal_required`, an intent not on disk (`JOURNAL_UNAVAILABLE`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..in_doubt import InDoubtCall, Rerun, as_decision, failed_decision, in_doubt_result
from ..journal._encode import arguments_digest
from ..journal._ops import KeyInUse, KeyReused, Unjournaled
from ..journal._records import JournalRecord
from ..models import ErrorCode, ToolResult, generated_id
from ._make import awaitable, log_contained, make_result
from ._run import ADMISSION, JOURNALING, Run
from ._services import Services, Steps, log

__all__ = ["before_journaled"]


def before_journaled(run: Run, svc: Services) -> Steps:
    """The result the call ends with instead of running (None: it runs)."""
    gate = run.gate
    if gate is not None:
        run.gate = None  # once
        refused = yield from _through_gate(run, gate)
        if refused is not None or svc.journal is None or run.read_only or run.journaled:
            return refused
    calls = svc.in_doubt
    if calls is not None and calls.pending:
        try:
            return (yield from _decided(run, svc))
        finally:
            calls.done(run)  # its intent written (or none): the key is free
    return (yield from _intent(run, svc))


def _decided(run: Run, svc: Services) -> Steps:
    """`before_journaled` for a call that may be one in doubt."""
    calls = svc.in_doubt
    assert calls is not None
    decided = yield from _in_doubt(run, svc)
    if isinstance(decided, JournalRecord):
        # Its remote task picked up: kept with this call's own intent
        # first, and only then is the old record let go (a crash between
        # the two must not lose the handle).
        # The old record is let go when the tool's attempt starts with the
        # handle (`_steps.py`), and put back if the call ends before
        # (`_results.py`): a call cancelled meanwhile never picked the work
        # up, and the next call of the key must.
        run.remote_record = (calls, decided)
        recorded = yield from _intent(run, svc)
        if recorded is not None and (taken := run.take_remote_record()) is not None:
            taken[0].restore(taken[1])  # (it will not run: nothing picked up)
        return recorded
    if decided is not None:
        if decided.status == "ok":
            # Skipped: it did happen. Recorded as this call's outcome, so
            # the key replays it from now on, as for any call that ran.
            yield from _intent(run, svc)
        return decided
    if not run.is_live(1):
        return None
    return (yield from _intent(run, svc))


def _through_gate(run: Run, gate: Callable[[], Awaitable[Any]]) -> Steps:
    """Wait until the engine has recorded the call's intent; a refusal if it
    could not (the call does not run: after a crash it would be unknown)."""
    run.phase = JOURNALING
    began = time.monotonic()
    try:
        yield gate()
    except (Exception, asyncio.CancelledError) as e:
        if not run.is_live(1):
            return None  # cancelled or timed out while it waited: it ends that way
        log_contained(f"recording the intent of call {run.call.id} failed", e, run.scrubber)
        return make_result(
            run,
            "rejected",
            error=(
                f"Tool '{run.call.name}' was not run: its durable engine could not record "
                "the call before it ran"
            ),
            code=ErrorCode.TOOL_UNAVAILABLE,
            attempts=0,
        )
    finally:
        run.move_deadline(time.monotonic() - began)
        run.phase = ADMISSION
    return None


def _in_doubt(run: Run, svc: Services) -> Steps:
    """The in-doubt rule for a call whose tool and key a dead process left in
    doubt: None (it runs: an idempotent tool, a handler's `Rerun`), its
    result, or the record whose remote task it picks up (it runs)."""
    calls = svc.in_doubt
    assert calls is not None
    origin = run.origin
    # As for replays: a call whose id toolbus made up, with no key of the
    # caller's, is not taken for another (two such calls may be meant to run twice).
    if origin.idempotency_key is None and generated_id(origin.id):
        return None
    key = run.idempotency_key(svc.key_secret)
    record = calls.take(key, run.call.name, run)
    if record is None:
        deciding = calls.busy(key, run.call.name)
        if deciding is None:
            return None
        # Another call of the key decides its call in doubt (or runs it
        # again, its intent not yet written): this one must not run meanwhile.
        if not _same_arguments(run, svc, deciding):
            return _reused(run, key) if calls.handler is not None else None
        return make_result(
            run,
            "rejected",
            error=_in_use(run.call.name, key, None),
            code=ErrorCode.IDEMPOTENCY_KEY_IN_USE,
            attempts=0,
        )
    if not _same_arguments(run, svc, record):
        # Another operation under the key of the one in doubt: not the call
        # the rule decides (nor a reason to let go of that one's record).
        calls.restore(record)
        if calls.handler is None:
            return None  # (taken for its remote task alone: runs, as without a handler)
        return _reused(run, key)
    tool = run.tool
    handle = record.remote_task
    if handle is not None and tool is not None:
        known = yield from _still_known(run, tool, handle)
        if not run.is_live(1):
            calls.restore(record)  # undecided: in doubt for the next call
            return None
        if known is None:
            calls.restore(record)
            return make_result(
                run,
                "rejected",
                error=(
                    f"Tool '{run.call.name}' was not run: this call ran before a crash, "
                    "and whether its work still runs elsewhere could not be told now; "
                    "try again later"
                ),
                code=ErrorCode.TOOL_UNAVAILABLE,
                attempts=0,
            )
        if known:
            run.remote_task = handle  # its tool picks the work up: nothing runs twice
            return record  # (let go when its attempt starts with the handle)
    if calls.handler is None:
        # Nobody to ask (the record was taken for its remote task alone):
        # it runs again, as a call in doubt does without a handler.
        return None
    if tool is not None and tool.idempotent:
        calls.settled(record)
        return None  # runs again, under the same key
    asked = InDoubtCall(run.call.id, run.call.name, run.masked, key)
    try:
        value: Any = calls.handler(asked)
        if awaitable(value):
            value = yield value
        decision = as_decision(value, asked)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        calls.restore(record)
        raise
    except BaseException as e:  # a handler's own, whatever its class
        decision = failed_decision(asked, e)
    if not run.is_live(1):
        # The call ended while its handler decided (a timeout, a cancel): the
        # decision decided nothing, and the record stays in doubt for the next.
        calls.restore(record)
        return None
    calls.settled(record)
    if isinstance(decision, Rerun):
        return None
    made = in_doubt_result(asked, decision)
    return make_result(
        run,
        made.status,
        output=made.output,
        error=made.error,
        code=made.error_code,
        metadata=made.metadata,
        attempts=0,
    )


def _still_known(run: Run, tool: Any, handle: str) -> Steps:
    """Whether `tool` can still pick up the work left under `handle`; None
    when it could not tell (its check failed: the work may still run)."""
    try:
        known: Any = tool.knows_remote_task(handle)
        if awaitable(known):
            known = yield known
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:
        if run.is_live(1):
            # One line: a server that cannot be reached is no program error.
            log.warning(
                "call %s: whether its remote task still runs could not be told (%s: %s)",
                run.call.id,
                type(e).__name__,
                run.scrubber.text(str(e))[:300],
            )
        return None
    if not isinstance(known, bool):
        log.warning(
            "%s.knows_remote_task returned %s, not a bool, for call %s: taken as no",
            type(tool).__name__,
            type(known).__name__,
            run.call.id,
        )
        return False
    return known


def _same_arguments(run: Run, svc: Services, record: Any) -> bool:
    """Whether the call in doubt had this call's arguments (a record without
    a digest, from before schema version 2, is taken to)."""
    recorded = record.arguments_digest
    if recorded is None:
        return True
    origin = run.origin
    mine = arguments_digest(origin.arguments if run.keyed is None else run.keyed, svc.key_secret)
    return bool(mine == recorded)


def _intent(run: Run, svc: Services) -> Steps:
    """Record a mutating call's intent before its tool runs; return the result
    the call ends with instead of running: an earlier call's with the same
    idempotency key that ended ok (replayed), or a refusal (its key was used
    for other arguments; a call of its key still runs; the journal required
    and the intent not on disk).

    The wait is off the deadline's clock: the deadline moves on by as long as
    the write took (the supervisor re-arms a deadline that fires meanwhile).
    It is bounded by the journal (`journal_timeout`): an intent not on disk by
    then, or whose commit failed, comes back `Unjournaled`, logged by the
    journal, and the call runs unrecorded (unless `journal_required`)."""
    journal = svc.journal
    assert journal is not None
    run.phase = JOURNALING
    began = time.monotonic()
    recorded: Any = None
    try:
        recorded = yield journal.begin(run, run.idempotency_key(svc.key_secret))
        run.journaled = True
    except (Exception, asyncio.CancelledError) as e:
        if run.is_live(1):
            # A journal that cannot be written must not lose the call (its own
            # failures are logged by the journal; this is anything else).
            log_contained(f"journal write failed for call {run.call.id}", e, run.scrubber)
            recorded = Unjournaled(f"{type(e).__name__}")
        else:  # cancelled or timed out while it waited: not the journal's failure
            log.debug("call %s ended while its intent was being written", run.call.id)
    run.move_deadline(time.monotonic() - began)
    run.phase = ADMISSION
    if recorded is None:
        return None
    kind = type(recorded)
    if kind is Unjournaled:
        if not svc.journal_required:
            return None
        within = f" within {recorded.timeout:g}s" if recorded.timeout is not None else ""
        return make_result(
            run,
            "rejected",
            error=(
                f"Tool '{run.call.name}' was not run: the journal could not record the "
                f"call{within}, and this executor runs no mutating call unrecorded; "
                "try again later"
            ),
            code=ErrorCode.JOURNAL_UNAVAILABLE,
            attempts=0,
        )
    if kind is KeyReused:
        return _reused(run, recorded.key)
    if kind is KeyInUse:
        return make_result(
            run,
            "rejected",
            error=_in_use(run.call.name, recorded.key, recorded.let_go),
            code=ErrorCode.IDEMPOTENCY_KEY_IN_USE,
            attempts=0,
        )
    return make_result(
        run,
        "ok",
        output=recorded.output,
        attachments=recorded.attachments,
        metadata={**recorded.metadata, "replayed": True},
        attempts=0,
    )


def _reused(run: Run, key: str) -> ToolResult:
    """The refusal of a call whose key was used for other arguments."""
    return make_result(
        run,
        "rejected",
        error=(
            f"Tool '{run.call.name}' was not run: idempotency key {key!r} was "
            "already used for a call with other arguments; use a new key"
        ),
        code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
        attempts=0,
    )


def _in_use(tool: str, key: str, let_go: str | None) -> str:
    """Why a call of a key whose call still runs is not run (`KeyInUse`)."""
    if let_go is None:
        return (
            f"Tool '{tool}' was not run: a call with idempotency key {key!r} and these "
            "arguments is still running; send it again once that call has ended (if it "
            "succeeded, its result is returned)"
        )
    status, _, killed = let_go.partition(" ")
    if killed:  # (`_session.ended`: its worker killed, not yet seen dead)
        how = {
            "timeout": "timed out, and the worker process it ran in, killed then, has not "
            "exited yet",
            "cancelled": "was cancelled, and the worker process it ran in, killed then, has "
            "not exited yet",
        }.get(status, f"ended ({status}), and the worker process it ran in has not exited yet")
        return (
            f"Tool '{tool}' was not run: a call with idempotency key {key!r} and these "
            f"arguments {how}; send it again in a moment"
        )
    how = {
        "timeout": "timed out, but its attempt was let go at its timeout and still runs",
        "cancelled": "was cancelled, but its attempt was let go then and still runs",
    }.get(status, f"ended ({status}), but an attempt of it, let go at its timeout, still runs")
    return (
        f"Tool '{tool}' was not run: a call with idempotency key {key!r} and these "
        f"arguments {how}; send it again once that attempt has returned"
    )
