"""Approvals in the agent loop: what happens to a turn whose calls ended `deferred`.

A call guarded by `toolbus.policies.requires_approval` ends `deferred`, and so
do (as `cancelled`, `ABORTED`) the later calls of its batch that had to wait
for it. Such a turn cannot be answered yet: the model would read "needs
approval" and carry on as if the call had failed. So the loop either asks the
caller's `approve=` and re-runs exactly those calls with the decisions, or
stops and hands the requests back (`stop_reason="approval"`), keeping in
`Turn` what `resume=` needs to finish the turn later.

Like the turn logic, nothing here does I/O: `settle` yields the steps
(`Decide`, `RunCalls`) that the sync and async drivers carry out.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._executor._batch_result import summary as _summary
from ..approvals import ApprovalDecision, ApprovalRequest, InputRequest
from ..models import BatchResult, ErrorCode, ToolCall, ToolResult
from ..tools._offer import Offer

log = logging.getLogger("toolbus.providers")

_SYNC_ONLY = "run_agent needs a sync approve; use arun_agent for an async one"

DECLINED = "declined"
"""The reason a call is denied with when `approve` returns False."""


@dataclass(frozen=True)
class RunCalls:
    """Step: run these calls as one batch (with these decisions, on a re-run)."""

    calls: list[ToolCall]
    approvals: Mapping[str, ApprovalDecision] | None = None
    # The tools the model was offered at this turn: the calls are held to them.
    offer: Offer | None = None


@dataclass(frozen=True)
class Decide:
    """Step: ask `approve` about each request, in order; send back its answers."""

    requests: tuple[ApprovalRequest, ...]

    def ask(self, approve: Approve | None) -> list[Any]:
        assert approve is not None  # asked for only when there is one
        answers = []
        for request in self.requests:
            answer = approve(request)
            if inspect.isawaitable(answer):  # a sync callable that returned a coroutine
                close = getattr(answer, "close", None)
                if callable(close):
                    close()
                raise TypeError(_SYNC_ONLY)
            answers.append(answer)
        return answers

    async def aask(self, approve: Approve | None) -> list[Any]:
        assert approve is not None
        answers = []
        for request in self.requests:  # one at a time, as a person would answer
            answer = approve(request)
            answers.append(await answer if inspect.isawaitable(answer) else answer)
        return answers


@dataclass(frozen=True)
class Turn:
    """A model turn and its batch. As `AgentResult.pending_turn`, a turn whose
    calls wait for approvals: what `resume=` needs to finish it. Opaque to
    callers; it holds the SDK's response, which the answers are written from
    (the Responses API reads each call's kind there)."""

    api: str
    response: Any
    items: tuple[Any, ...]  # the model's turn as appended to the conversation
    calls: tuple[ToolCall, ...]
    batch: BatchResult  # the turn's results so far: some `deferred` or waiting for one

    @property
    def requests(self) -> tuple[ApprovalRequest, ...]:
        return tuple(
            r.approval_request
            for r in self.batch
            if r.status == "deferred" and r.approval_request is not None
        )


Approve = Callable[[ApprovalRequest], Any]
"""`approve=`: the request in; True, False or an `ApprovalDecision` out (or an
awaitable of one, for `arun_agent`)."""


def check_approve(approve: Approve | None, *, sync: bool) -> None:
    if approve is None:
        return
    if not callable(approve):
        raise TypeError(f"approve must be callable, got {approve!r}")
    if sync and _is_async(approve):
        raise TypeError(_SYNC_ONLY)


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(inspect.unwrap(fn)):
        return True
    # An object whose __call__ is async (a sync callable that returns an
    # awaitable is only caught when it does).
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def check_resume(
    resume: Any,
    approvals: Mapping[str, ApprovalDecision] | None,
    history: Sequence[Any],
    api: str,
) -> Turn | None:
    """The pending turn to finish, once `resume` and `approvals` are known to fit
    `history` (the `messages` given); None when there is nothing to resume."""
    if resume is None:
        if approvals is not None:
            raise ValueError(
                "approvals= answers the pending calls of a stopped run: pass it with resume="
            )
        return None
    pending: Turn | None = getattr(resume, "pending_turn", None)
    if getattr(resume, "stop_reason", None) != "approval" or pending is None:
        raise ValueError("resume= takes an AgentResult that stopped for approval")
    if pending.api != api:
        raise ValueError(f"resume= stopped in the {pending.api!r} API, not {api!r}")
    n = len(pending.items)
    if len(history) < n or list(history[len(history) - n :]) != list(pending.items):
        raise ValueError(
            "messages must end with the turn whose calls wait: pass messages=result.messages"
        )
    ids = {c.id for c in pending.calls}
    for call_id, value in (approvals or {}).items():
        if call_id not in ids:
            raise ValueError(f"approvals names call {call_id!r}, which the pending turn lacks")
        if not isinstance(value, ApprovalDecision):
            raise TypeError(
                f"approvals[{call_id!r}] must be an ApprovalDecision (request.approve() or"
                f" .deny(reason)), got {type(value).__name__}"
            )
    return pending


def settle(
    calls: Sequence[ToolCall],
    batch: BatchResult,
    given: Mapping[str, ApprovalDecision],
    *,
    ask: bool,
    offer: Offer | None = None,
) -> Generator[Decide | RunCalls, Any, BatchResult]:
    """Decide the turn's deferred calls and re-run what did not run; return the
    turn's batch, merged. It may still hold `deferred` calls: those no decision
    could run (none given and none asked for, or one for other arguments).

    Each round asks (`ask`: there is an `approve`) about the requests not
    decided yet, then re-runs every unfinished call with all decisions so far:
    a call that waited for a deferred one may itself need approval once it gets
    its turn, and a call whose question was answered may ask the next (an
    `InputRequest` of its own digest), which the next round asks about. Rounds
    stop when nothing new was decided (each request is asked about once), or
    after `_MOST_ROUNDS`. A re-run is held to `offer`, as the batch was.
    """
    # Keyed by the call's place in the turn: two calls may share an id (some
    # servers reuse them), and each needs its own decision.
    decided = {i: given[c.id] for i, c in enumerate(calls) if c.id in given}
    fresh = bool(decided)  # decisions the batch has not been run with yet
    rounds = 0
    while True:
        rounds += 1
        if ask and rounds <= _MOST_ROUNDS:
            # Each request once: a call's approval, then each question it asks
            # (an answered call may ask the next: a request of its own digest).
            undecided = [
                (i, r.approval_request)
                for i, r in enumerate(batch)
                if r.approval_request is not None
                and not _decided(decided.get(i), r.approval_request)
            ]
            if undecided:
                answers = yield Decide(tuple(request for _, request in undecided))
                for (i, request), answer in zip(undecided, answers, strict=True):
                    decided[i] = decision(request, answer)
                fresh = True
        redo = [i for i, r in enumerate(batch) if unfinished(r)]
        if not fresh or not redo:
            return batch
        for part in _distinct_ids(redo, calls):
            approvals = {calls[i].id: decided[i] for i in part if i in decided}
            rerun: BatchResult = yield RunCalls([calls[i] for i in part], approvals, offer)
            batch = merge(batch, part, rerun)
            if any(unfinished(batch.results[i]) for i in part):
                break  # what comes after waits for it, as in one batch
        fresh = False


def _distinct_ids(at: Sequence[int], calls: Sequence[ToolCall]) -> list[list[int]]:
    """The positions `at`, in order, cut into runs in which no call id repeats:
    the executor takes one decision per id in a batch (one run when, as usual,
    the ids are distinct)."""
    parts: list[list[int]] = [[]]
    ids: set[str] = set()
    for i in at:
        if calls[i].id in ids:
            parts.append([])
            ids.clear()
        parts[-1].append(i)
        ids.add(calls[i].id)
    return parts


def _decided(given: ApprovalDecision | None, request: ApprovalRequest) -> bool:
    """Whether `request` has its decision `given`: one for its call (for a
    question, of its digest: a call answered once may ask the next)."""
    if given is None:
        return False
    return not isinstance(request, InputRequest) or given.digest == request.digest


# A call that asks question after question is asked about this many times at
# most in one turn; then the turn stops, its request pending.
_MOST_ROUNDS = 16


def unfinished(result: ToolResult) -> bool:
    """Did this call not run because of a deferral? `deferred` itself, or
    `ABORTED` because it had to wait for a deferred call: the loop runs its
    batches without `stop_on_error`, which is the only other source of ABORTED."""
    return result.status == "deferred" or (
        result.status == "cancelled" and result.error_code == ErrorCode.ABORTED
    )


def decision(request: ApprovalRequest, answer: Any) -> ApprovalDecision:
    """`approve`'s answer as a decision: True approves, False declines, a
    decision stands as given; anything else is a mistake, which denies (a call
    never runs on an unclear answer) and says so to the model and the log."""
    if isinstance(answer, ApprovalDecision):
        return answer
    if answer is True:
        return request.approve()
    if answer is False:
        return request.deny(DECLINED)
    why = f"approve returned {type(answer).__name__}, not a bool or an ApprovalDecision"
    log.warning("call %s (%r) denied: %s", request.call_id, request.tool, why)
    return request.deny(why)


def halt_pending(batch: BatchResult, error: str) -> BatchResult:
    """`batch` with its calls still waiting for a decision ended as a halted
    run's calls end (`cancelled`, `HALTED`, `error` the model reads): the run
    was halted while they waited, and nobody is asked about them any more."""
    at = [i for i, r in enumerate(batch.results) if r.status == "deferred"]
    if not at:
        return batch
    ended = [
        batch.results[i].model_copy(
            update={
                "status": "cancelled",
                "error": error,
                "error_code": ErrorCode.HALTED,
                "approval_request": None,
            }
        )
        for i in at
    ]
    unrun = batch.summary.model_copy(update={"duration": 0.0})  # (merge adds its duration)
    return merge(batch, at, BatchResult(results=tuple(ended), summary=unrun))


def merge(batch: BatchResult, at: Sequence[int], rerun: BatchResult) -> BatchResult:
    """`batch` with the results at positions `at` replaced by `rerun`'s, in order.
    Which calls are read-only or mutating does not change; the duration is the
    time spent running both (not the time the approvals took)."""
    results = list(batch.results)
    for i, result in zip(at, rerun.results, strict=True):
        results[i] = result
    s = batch.summary
    return BatchResult(
        results=tuple(results),
        summary=_summary(
            results,
            total=s.total,
            read_only=s.read_only,
            mutating=s.mutating,
            duration=s.duration + rerun.summary.duration,
        ),
    )
