"""A small agent loop: call the model, run its tool calls as one batch, answer, repeat.

    from toolbus.providers import run_agent

    with Executor(registry) as executor:
        run = run_agent(OpenAI(), model="...", messages="Weather in Oslo?", executor=executor)
        print(run.text, run.stop_reason, [b.summary for b in run.batches])

`arun_agent` is the async twin (AsyncOpenAI, AsyncAnthropic). The provider
follows the client: an Anthropic client speaks Messages, an OpenAI client Chat
Completions unless `api="responses"`. Both drivers run the same turn logic
(`_turns`), which never does I/O itself: it yields "ask the model", "run these
calls" and "ask the approver" steps, so the sync and async loops cannot drift
apart. What a turn whose calls wait for an approval does is in `_approvals`.

One piece: the turn logic (`_turns`) and its sync and async drivers are one
loop read top to bottom; the three provider formats it speaks through are in
`_formats.py`, their readers and writers in `openai.py` and `anthropic.py`.
"""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._options import positive_int, timeout_seconds
from ..agent_runs import AGENT_RUN, check_agent_run, current_agent_run
from ..approvals import ApprovalDecision, ApprovalRequest
from ..executor import Executor
from ..formatting import check_max_length
from ..models import BatchResult, ErrorCode
from ..pipeline._halts import halted_text
from ..tools import StepContext, ToolRegistry
from ..tools._offer import Offer, offering
from . import openai as _openai
from ._approvals import (
    Approve,
    Decide,
    RunCalls,
    Turn,
    check_approve,
    check_resume,
    halt_pending,
    settle,
)
from ._common import DEFAULT_MAX_LENGTH
from ._formats import Format, check_offerable, format_for, offerable
from ._steps import DIRECT, Steps

__all__ = ["AgentResult", "Api", "arun_agent", "run_agent"]

Api = Literal["chat", "responses", "messages"]
"""OpenAI Chat Completions, the OpenAI Responses API, or Anthropic Messages."""

StopReason = Literal["done", "max_turns", "approval", "halted"]


@dataclass(frozen=True)
class AgentResult:
    """How an agent run ended.

    `messages` is the whole conversation in the provider's format (for the
    Responses API, the `input` items): the messages given, then every model
    turn and every batch of tool results, ready to be extended and sent again.
    `response` is the last model response, as the SDK returned it. `batches`
    holds one `BatchResult` per turn that made tool calls, in order. `turns`
    counts model calls. `stop_reason` is `"done"` when the model answered
    without calling a tool, `"max_turns"` when the turn limit ended the run
    (the last turn's calls were run and answered, so the conversation can be
    resumed), `"approval"` when calls of the last turn wait for a decision.
    `text` is the text of the last response.

    `pending` holds the `ApprovalRequest`s of a run stopped for approval
    (empty otherwise). Its `messages` end with the turn whose calls wait,
    unanswered, and its last batch has them `deferred`; pass it back as
    `resume=` with `messages=result.messages` to finish that turn and go on.
    `pending_turn` is what that needs (the turn's calls, results so far and
    response); leave it to the loop.

    `agent_run` is the run's identity (`toolbus.agent_runs`), kept by a
    resumed run. `stop_reason` is `"halted"` when the run was halted (a run
    limit, a guardrail, `Executor.halt`): `halted` says why, and the
    conversation ends with the answers of the calls that ran, halted ones
    included; a halted run cannot be resumed.
    """

    messages: list[Any]
    response: Any
    batches: tuple[BatchResult, ...]
    turns: int
    stop_reason: StopReason
    text: str
    pending: tuple[ApprovalRequest, ...] = ()
    pending_turn: Turn | None = field(default=None, repr=False)
    agent_run: str = ""
    halted: str | None = None


# -- the turn logic, shared by both drivers ------------------------------------------


@dataclass(frozen=True)
class _Ask:
    request: dict[str, Any]


@dataclass(frozen=True)
class _Settings:
    model: str
    # The tools to send at a turn, and what they offer (their calls held to it).
    offer: Callable[[int], tuple[list[Any], Offer | None]]
    options: dict[str, Any]
    registry: ToolRegistry
    strict: bool
    max_turns: int
    max_length: int
    ask: bool  # there is an `approve=` to ask about deferred calls
    agent_run: str
    halted: Callable[[], str | None]  # why the run was halted on the executor, or None


_Step = _Ask | RunCalls | Decide


@dataclass
class _Progress:
    """The run so far: what every `AgentResult` is made of."""

    history: list[Any]
    batches: list[BatchResult]
    turns: int = 0
    response: Any = None

    def result(
        self,
        fmt: Format,
        s: _Settings,
        stop: StopReason,
        pending: Turn | None = None,
        halted: str | None = None,
    ) -> AgentResult:
        return AgentResult(
            messages=self.history,
            response=self.response,
            batches=tuple(self.batches),
            turns=self.turns,
            stop_reason=stop,
            text=fmt.text(self.response) if self.response is not None else "",
            pending=pending.requests if pending is not None else (),
            pending_turn=pending,
            agent_run=s.agent_run,
            halted=halted,
        )


def _turns(
    fmt: Format,
    run: _Progress,
    s: _Settings,
    resume: Turn | None,
    approvals: Mapping[str, ApprovalDecision],
) -> Generator[_Step, Any, AgentResult]:
    """Up to `max_turns` model calls, each followed by one batch of its tool calls;
    first, with `resume` (its batch not in `run.batches`), the pending turn's
    calls are finished and answered."""
    if resume is not None:
        # The stopped turn's calls are held to what that turn offers.
        pending = yield from _answer(fmt, run, s, resume, approvals, s.offer(run.turns)[1])
        if pending is not None:
            return run.result(fmt, s, "approval", pending)
        if (why := _halted(run, s)) is not None:
            return run.result(fmt, s, "halted", halted=why)
    while run.turns < s.max_turns:
        if (why := _halted(run, s)) is not None:  # (halted from elsewhere meanwhile)
            return run.result(fmt, s, "halted", halted=why)
        run.turns += 1
        tools, offer = s.offer(run.turns)
        response = yield _Ask(fmt.request(s.model, list(run.history), tools, s.options))
        run.response = response
        items = fmt.turn(response)
        run.history.extend(items)
        calls = fmt.calls(response, s.registry)
        if s.strict:
            calls = _openai.drop_strict_nulls(calls, s.registry)
        if not calls:
            return run.result(fmt, s, "done")
        batch: BatchResult = yield RunCalls(calls, offer=offer)
        this = Turn(fmt.api, response, tuple(items), tuple(calls), batch)
        pending = yield from _answer(fmt, run, s, this, {}, offer)
        if (why := _halted(run, s)) is not None:  # a halt wins over calls left pending
            return run.result(fmt, s, "halted", halted=why)
        if pending is not None:
            return run.result(fmt, s, "approval", pending)
    return run.result(fmt, s, "max_turns")


def _halted(run: _Progress, s: _Settings) -> str | None:
    """Why the run was halted: by a call of its last batch, or on the executor."""
    why = s.halted()
    if why is None and run.batches:  # (a batch of no run halts alone: not this one's case)
        for r in run.batches[-1].results:
            if r.error_code is ErrorCode.HALTED:
                return r.error or "halted"
    return why


def _answer(
    fmt: Format,
    run: _Progress,
    s: _Settings,
    turn: Turn,
    approvals: Mapping[str, ApprovalDecision],
    offer: Offer | None = None,
) -> Generator[_Step, Any, Turn | None]:
    """Settle the turn's approvals and append its batch; append its answers, or,
    while calls still wait, return the turn as pending: the model is never
    sent a `deferred` result, which it would take for a failure."""
    why = s.halted()
    if why is not None or _halted_batch(turn.batch):
        # Its run is halted: nobody is asked, nothing runs again, and the
        # conversation answers every call (it ends here), those still
        # waiting as halted.
        error = halted_text(why) if why is not None else _halt_error(turn.batch)
        batch = halt_pending(turn.batch, error)
    else:
        batch = yield from settle(turn.calls, turn.batch, approvals, ask=s.ask, offer=offer)
    run.batches.append(batch)
    if batch.summary.deferred and not _halted_batch(batch) and s.halted() is None:
        return dataclasses.replace(turn, batch=batch)
    run.history.extend(fmt.answers(turn.response, batch.results, s.max_length))
    return None


def _halted_batch(batch: BatchResult) -> bool:
    return any(r.error_code is ErrorCode.HALTED for r in batch.results)


def _halt_error(batch: BatchResult) -> str:
    """The words a halted call of `batch` ended with."""
    return next(r.error or "" for r in batch.results if r.error_code is ErrorCode.HALTED)


def _start(
    client: Any,
    api: Api | None,
    messages: str | Sequence[Any],
    executor: Executor,
    *,
    model: str,
    tools: Sequence[Mapping[str, Any]] | None,
    strict: bool,
    max_turns: int,
    max_length: int,
    approve: Approve | None,
    resume: AgentResult | None,
    approvals: Mapping[str, ApprovalDecision] | None,
    options: dict[str, Any],
    agent_run: str,
    context: Any = None,
) -> tuple[Format, Generator[_Step, Any, AgentResult]]:
    """Check the arguments, pick the format, and make the turn generator."""
    positive_int(max_turns, "max_turns", "run_agent")
    check_max_length(max_length, "run_agent")
    if not isinstance(messages, str | Sequence) or isinstance(messages, bytes | bytearray):
        raise TypeError(
            "run_agent: messages must be the conversation (a list of messages) or the user's "
            f"first message (a string), got {type(messages).__name__}"
        )
    if options.get("stream"):
        raise ValueError("the agent loop does not stream; leave `stream` out")
    fmt = format_for(client, api)
    if tools is None:
        check_offerable(fmt, executor.registry, strict)

        def offer_at(turn: int) -> tuple[list[Any], Offer | None]:
            # What the executor offers at this turn; its calls are held to it.
            step = StepContext(agent_run, turn, context)
            definitions, kept = offerable(fmt, executor.offered(step), strict, turn)
            return definitions, Offer(step, frozenset(t.name for t in kept))

    else:
        exported = [dict(t) for t in tools]

        def offer_at(turn: int) -> tuple[list[Any], Offer | None]:
            # Sent as given: each call held to its tool's is_enabled at this turn.
            return exported, Offer(StepContext(agent_run, turn, context), None)

    history = [{"role": "user", "content": messages}] if isinstance(messages, str) else [*messages]
    pending = check_resume(resume, approvals, history, fmt.api)
    run = _Progress(history, [])
    if resume is not None and pending is not None:  # a resumed run goes on counting
        run = _Progress(history, list(resume.batches[:-1]), resume.turns, pending.response)
    settings = _Settings(
        model=model,
        offer=offer_at,
        options=options,
        registry=executor.registry,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
        ask=approve is not None,
        agent_run=agent_run,
        halted=lambda: executor.halted(agent_run),
    )
    return fmt, _turns(fmt, run, settings, pending, approvals or {})


# -- the drivers ----------------------------------------------------------------------


def run_agent(
    client: Any,
    *,
    model: str,
    messages: str | Sequence[Any],
    executor: Executor,
    tools: Sequence[Mapping[str, Any]] | None = None,
    api: Api | None = None,
    strict: bool = False,
    max_turns: int = 10,
    max_length: int = DEFAULT_MAX_LENGTH,
    approve: Approve | None = None,
    resume: AgentResult | None = None,
    approvals: Mapping[str, ApprovalDecision] | None = None,
    call_timeout: float | None = None,
    agent_run: str | None = None,
    context: Any = None,
    **options: Any,
) -> AgentResult:
    """Run the model and its tool calls until it answers without calling a tool,
    or for at most `max_turns` model calls.

    Each turn sends the conversation with `executor`'s tools (or `tools`, sent
    as given), appends the model's turn, runs every tool call of the turn as
    one `execute_batch` and appends the results in the provider's format (one
    tool message per call for Chat, output items for Responses, one user
    message of `tool_result` blocks for Messages). Every toolbus guarantee
    holds: each call gets exactly one result, failures reach the model as
    readable text, outputs and error texts stay scrubbed of secrets.

    `client` is a sync `openai.OpenAI`-like or `anthropic.Anthropic`-like
    client; `api` overrides what its type implies. `messages` is the
    conversation so far, or one user message as a string; it is not changed.
    `strict=True` exports the tools with OpenAI strict schemas and removes the
    nulls strict mode makes the model send for the optional fields it leaves out. `max_length` caps
    each result's text. `options` go into every request (`temperature`,
    `system` or `max_tokens` for Anthropic, `instructions`, ...).
    `call_timeout` bounds each tool call of the run as a whole, waits and
    retries included (see `Executor.execute`; the tightest budget applies).
    Errors of the model API (the SDK's exceptions) propagate.

    Calls that need an approval (`toolbus.policies.requires_approval`) are
    never answered `deferred`. With `approve`, a sync callable of the
    `ApprovalRequest` that returns True, False or an `ApprovalDecision`, the
    loop asks it about each such call, then runs the calls that were waiting
    (the deferred ones and those held back behind them) with its decisions,
    and the model reads their real results. Without it, or when a decision
    does not run the call, the run stops with `stop_reason="approval"` and the
    requests in `pending`; `resume=` that result, with
    `messages=result.messages` and `approvals={call_id: decision}` (or
    `approve`), finishes that turn and goes on with the run: its `batches`
    and `turns` continue the stopped run's, and `max_turns` bounds them all.

    `agent_run` names the run (default: the resumed run's, the context's, or
    a new one; `AgentResult.agent_run`): run limits count by it, and a halt
    of it stops the loop (`stop_reason="halted"`). Each turn offers the model
    `executor.offered(StepContext(agent_run, turn, context))` (`context`:
    your own, for `is_enabled` and the executor's `prepare`), and holds its
    calls to those tools (`TOOL_NOT_OFFERED`); `tools=` is sent as given.
    """
    return drive(
        DIRECT,
        client,
        model=model,
        messages=messages,
        executor=executor,
        tools=tools,
        api=api,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
        approve=approve,
        resume=resume,
        approvals=approvals,
        call_timeout=call_timeout,
        options=options,
        agent_run=agent_run,
        context=context,
    )


async def arun_agent(
    client: Any,
    *,
    model: str,
    messages: str | Sequence[Any],
    executor: Executor,
    tools: Sequence[Mapping[str, Any]] | None = None,
    api: Api | None = None,
    strict: bool = False,
    max_turns: int = 10,
    max_length: int = DEFAULT_MAX_LENGTH,
    approve: Approve | None = None,
    resume: AgentResult | None = None,
    approvals: Mapping[str, ApprovalDecision] | None = None,
    call_timeout: float | None = None,
    agent_run: str | None = None,
    context: Any = None,
    **options: Any,
) -> AgentResult:
    """Async twin of `run_agent`, for `openai.AsyncOpenAI`-like and
    `anthropic.AsyncAnthropic`-like clients; tool calls run through
    `aexecute_batch`, so the event loop is never blocked. Cancelling the
    awaiting task cancels the batch in flight (its calls end `cancelled`).
    `approve` may be sync or async.
    """
    return await adrive(
        DIRECT,
        client,
        model=model,
        messages=messages,
        executor=executor,
        tools=tools,
        api=api,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
        approve=approve,
        resume=resume,
        approvals=approvals,
        call_timeout=call_timeout,
        options=options,
        agent_run=agent_run,
        context=context,
    )


# -- the drivers, their steps carried out by a `Steps` (`_steps.py`) ------------------


def _run_id(given: str | None, resume: Any) -> str:
    """The run's identity: the one given, the resumed run's, the context's, or a new one."""
    if given is not None:
        return check_agent_run(given, "run_agent")
    kept = getattr(resume, "agent_run", "")
    return kept or current_agent_run() or f"run_{uuid.uuid4().hex}"


def drive(
    how: Steps,
    client: Any,
    *,
    executor: Executor,
    approve: Approve | None,
    call_timeout: float | None,
    api: Api | None,
    messages: str | Sequence[Any],
    options: dict[str, Any],
    agent_run: str | None = None,
    **settings: Any,
) -> AgentResult:
    """`run_agent`, its steps carried out by `how`."""
    check_approve(approve, sync=True)
    timeout_seconds(call_timeout, "call_timeout", "run_agent")
    run_id = _run_id(agent_run, settings.get("resume"))
    fmt, steps = _start(
        client,
        api,
        messages,
        executor,
        approve=approve,
        options=options,
        agent_run=run_id,
        **settings,
    )
    # Every call of the run belongs to it, however its steps are carried out.
    token = AGENT_RUN.set(run_id)
    create = fmt.method(client)
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            if isinstance(step, _Ask):
                reply = how.ask(fmt.api, create, step.request)
            elif isinstance(step, Decide):
                reply = how.decide(step, approve)
            else:
                shown = offering.set(step.offer)  # (None: each call held to is_enabled)
                try:
                    reply = how.run(executor, step, call_timeout)
                finally:
                    offering.reset(shown)
    except StopIteration as stop:
        result: AgentResult = stop.value
        return result
    finally:
        AGENT_RUN.reset(token)
        steps.close()


async def adrive(
    how: Steps,
    client: Any,
    *,
    executor: Executor,
    approve: Approve | None,
    call_timeout: float | None,
    api: Api | None,
    messages: str | Sequence[Any],
    options: dict[str, Any],
    agent_run: str | None = None,
    **settings: Any,
) -> AgentResult:
    """`arun_agent`, its steps carried out by `how`."""
    check_approve(approve, sync=False)
    timeout_seconds(call_timeout, "call_timeout", "arun_agent")
    run_id = _run_id(agent_run, settings.get("resume"))
    fmt, steps = _start(
        client,
        api,
        messages,
        executor,
        approve=approve,
        options=options,
        agent_run=run_id,
        **settings,
    )
    # Every call of the run belongs to it, however its steps are carried out.
    token = AGENT_RUN.set(run_id)
    create = fmt.method(client)
    # Checked before anything is sent: calling a sync client's create() would
    # send a (billed) request and block the event loop. The SDKs wrap create()
    # in a sync decorator, so look through it.
    if not inspect.iscoroutinefunction(inspect.unwrap(create)):
        steps.close()
        raise TypeError("arun_agent needs an async client; use run_agent")
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            if isinstance(step, _Ask):
                reply = await how.aask(fmt.api, create, step.request)
            elif isinstance(step, Decide):
                reply = await how.adecide(step, approve)
            else:
                shown = offering.set(step.offer)  # (None: each call held to is_enabled)
                try:
                    reply = await how.arun(executor, step, call_timeout)
                finally:
                    offering.reset(shown)
    except StopIteration as stop:
        result: AgentResult = stop.value
        return result
    finally:
        AGENT_RUN.reset(token)
        steps.close()
