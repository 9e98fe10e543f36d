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

One piece: the turn logic (`_turns`), the three provider formats it speaks
through and its sync and async drivers are one loop read top to bottom; the
formats' own readers and writers live in `openai.py` and `anthropic.py`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._options import timeout_seconds
from ..approvals import ApprovalDecision, ApprovalRequest
from ..executor import Executor
from ..models import BatchResult, ToolCall, ToolResult
from ..tools import ToolRegistry
from . import anthropic as _anthropic
from . import openai as _openai
from ._approvals import Approve, Decide, RunCalls, Turn, check_approve, check_resume, settle
from ._common import DEFAULT_MAX_LENGTH
from ._steps import DIRECT, Steps

__all__ = ["AgentResult", "Api", "arun_agent", "run_agent"]

Api = Literal["chat", "responses", "messages"]
"""OpenAI Chat Completions, the OpenAI Responses API, or Anthropic Messages."""

StopReason = Literal["done", "max_turns", "approval"]

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` sent to Anthropic (which requires it) when the caller gives none."""


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
    """

    messages: list[Any]
    response: Any
    batches: tuple[BatchResult, ...]
    turns: int
    stop_reason: StopReason
    text: str
    pending: tuple[ApprovalRequest, ...] = ()
    pending_turn: Turn | None = field(default=None, repr=False)


# -- one class per API: how to ask, what to read, what to append ---------------------


class _Format(Protocol):
    api: str

    def method(self, client: Any) -> Callable[..., Any]: ...

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]: ...

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]: ...

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]: ...

    def turn(self, response: Any) -> list[Any]: ...

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]: ...

    def text(self, response: Any) -> str: ...


class _Chat:
    api = "chat"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]:
        return _openai.chat_tool_definitions(registry, strict=strict)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "model": model,
            "messages": history,
            **({"tools": tools} if tools else {}),
            **options,
        }

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _openai.chat_tool_calls(response)

    def turn(self, response: Any) -> list[Any]:
        return [_openai.chat_assistant_message(response)]

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return _openai.chat_tool_messages(results, max_length=limit)

    def text(self, response: Any) -> str:
        return _openai.chat_text(response)


class _Responses:
    api = "responses"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]:
        return _openai.responses_tool_definitions(registry, strict=strict)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        return {"model": model, "input": history, **({"tools": tools} if tools else {}), **options}

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _openai.responses_tool_calls(response)

    def turn(self, response: Any) -> list[Any]:
        return _openai.responses_output_items(response)

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return _openai.responses_tool_outputs(results, response, max_length=limit)

    def text(self, response: Any) -> str:
        return _openai.responses_text(response)


class _Messages:
    api = "messages"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.messages.create  # type: ignore[no-any-return]

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]:
        return _anthropic.tool_definitions(registry)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        options = {"max_tokens": DEFAULT_MAX_TOKENS, **options}
        return {
            "model": model,
            "messages": history,
            **({"tools": tools} if tools else {}),
            **options,
        }

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _anthropic.tool_calls(response, registry=registry)

    def turn(self, response: Any) -> list[Any]:
        return [_anthropic.assistant_message(response)]

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return [_anthropic.tool_results_message(results, max_length=limit)]

    def text(self, response: Any) -> str:
        return _anthropic.message_text(response)


_FORMATS: dict[str, _Format] = {"chat": _Chat(), "responses": _Responses(), "messages": _Messages()}


def _format_for(client: Any, api: Api | None) -> _Format:
    if api is None:
        packages = {cls.__module__.partition(".")[0] for cls in type(client).__mro__}
        if "anthropic" in packages:
            api = "messages"
        elif "openai" in packages:
            api = "chat"
        else:
            raise TypeError(
                f"cannot tell which API a {type(client).__name__} speaks;"
                " pass api='chat', 'responses' or 'messages'"
            )
    if api not in _FORMATS:
        raise ValueError(f"unknown api {api!r}; expected 'chat', 'responses' or 'messages'")
    return _FORMATS[api]


# -- the turn logic, shared by both drivers ------------------------------------------


@dataclass(frozen=True)
class _Ask:
    request: dict[str, Any]


@dataclass(frozen=True)
class _Settings:
    model: str
    tools: list[Any]
    options: dict[str, Any]
    registry: ToolRegistry
    strict: bool
    max_turns: int
    max_length: int
    ask: bool  # there is an `approve=` to ask about deferred calls


_Step = _Ask | RunCalls | Decide


@dataclass
class _Progress:
    """The run so far: what every `AgentResult` is made of."""

    history: list[Any]
    batches: list[BatchResult]
    turns: int = 0
    response: Any = None

    def result(self, fmt: _Format, stop: StopReason, pending: Turn | None = None) -> AgentResult:
        return AgentResult(
            messages=self.history,
            response=self.response,
            batches=tuple(self.batches),
            turns=self.turns,
            stop_reason=stop,
            text=fmt.text(self.response),
            pending=pending.requests if pending is not None else (),
            pending_turn=pending,
        )


def _turns(
    fmt: _Format,
    run: _Progress,
    s: _Settings,
    resume: Turn | None,
    approvals: Mapping[str, ApprovalDecision],
) -> Generator[_Step, Any, AgentResult]:
    """Up to `max_turns` model calls, each followed by one batch of its tool calls;
    first, with `resume` (its batch not in `run.batches`), the pending turn's
    calls are finished and answered."""
    if resume is not None:
        pending = yield from _answer(fmt, run, s, resume, approvals)
        if pending is not None:
            return run.result(fmt, "approval", pending)
    while run.turns < s.max_turns:
        run.turns += 1
        response = yield _Ask(fmt.request(s.model, list(run.history), s.tools, s.options))
        run.response = response
        items = fmt.turn(response)
        run.history.extend(items)
        calls = fmt.calls(response, s.registry)
        if s.strict:
            calls = _openai.drop_strict_nulls(calls, s.registry)
        if not calls:
            return run.result(fmt, "done")
        batch: BatchResult = yield RunCalls(calls)
        this = Turn(fmt.api, response, tuple(items), tuple(calls), batch)
        pending = yield from _answer(fmt, run, s, this, {})
        if pending is not None:
            return run.result(fmt, "approval", pending)
    return run.result(fmt, "max_turns")


def _answer(
    fmt: _Format,
    run: _Progress,
    s: _Settings,
    turn: Turn,
    approvals: Mapping[str, ApprovalDecision],
) -> Generator[_Step, Any, Turn | None]:
    """Settle the turn's approvals and append its batch; append its answers, or,
    while calls still wait, return the turn as pending: the model is never
    sent a `deferred` result, which it would take for a failure."""
    batch = yield from settle(turn.calls, turn.batch, approvals, ask=s.ask)
    run.batches.append(batch)
    if batch.summary.deferred:
        return dataclasses.replace(turn, batch=batch)
    run.history.extend(fmt.answers(turn.response, batch.results, s.max_length))
    return None


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
) -> tuple[_Format, Generator[_Step, Any, AgentResult]]:
    """Check the arguments, pick the format, and make the turn generator."""
    if max_turns < 1:
        raise ValueError("max_turns must be >= 1")
    if options.get("stream"):
        raise ValueError("the agent loop does not stream; leave `stream` out")
    fmt = _format_for(client, api)
    if tools is None:
        exported = fmt.definitions(executor.registry, strict)
    else:
        exported = [dict(t) for t in tools]
    history = [{"role": "user", "content": messages}] if isinstance(messages, str) else [*messages]
    pending = check_resume(resume, approvals, history, fmt.api)
    run = _Progress(history, [])
    if resume is not None and pending is not None:  # a resumed run goes on counting
        run = _Progress(history, list(resume.batches[:-1]), resume.turns, pending.response)
    settings = _Settings(
        model=model,
        tools=exported,
        options=options,
        registry=executor.registry,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
        ask=approve is not None,
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
    )


# -- the drivers, their steps carried out by a `Steps` (`_steps.py`) ------------------


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
    **settings: Any,
) -> AgentResult:
    """`run_agent`, its steps carried out by `how`."""
    check_approve(approve, sync=True)
    timeout_seconds(call_timeout, "call_timeout", "run_agent")
    fmt, steps = _start(
        client, api, messages, executor, approve=approve, options=options, **settings
    )
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
                reply = how.run(executor, step, call_timeout)
    except StopIteration as stop:
        result: AgentResult = stop.value
        return result
    finally:
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
    **settings: Any,
) -> AgentResult:
    """`arun_agent`, its steps carried out by `how`."""
    check_approve(approve, sync=False)
    timeout_seconds(call_timeout, "call_timeout", "arun_agent")
    fmt, steps = _start(
        client, api, messages, executor, approve=approve, options=options, **settings
    )
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
                reply = await how.arun(executor, step, call_timeout)
    except StopIteration as stop:
        result: AgentResult = stop.value
        return result
    finally:
        steps.close()
