"""`arun_agent` whose every step is journaled in the Restate handler it runs in.

The agent loop (`toolbus.providers.agent`) yields three kinds of step: ask
the model, ask the approver, run a batch of calls. Here each is a `ctx.run`:
the model's response as `toolbus-model:<api>` (its JSON, which the loop then
reads on the first attempt and on a retry alike), the approver's answers as
`toolbus-approve` (what each decided, applied to the questions on a retry),
and each call of a batch as `DurableExecutor` journals it. An invocation
retried mid-turn resumes at the step it had reached: the model is not asked
again for a turn it answered, nor a person for a decision they made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from restate import Context, RunOptions, TerminalError

from ...approvals import ApprovalDecision
from ...executor import Executor
from ...in_doubt import InDoubtHandler
from ...models import BatchResult
from ...providers import AgentResult
from ...providers import agent as _agent
from ...providers._approvals import Approve, Decide, RunCalls
from ...providers._common import DEFAULT_MAX_LENGTH
from ...providers._steps import DIRECT
from .._turns.records import run_name
from .._turns.replies import (
    ModelCallFailed,
    answers_record,
    read_answers,
    read_record,
    reply_record,
)
from .._turns.submission import wrapped
from ._durable import DurableExecutor
from ._handler import handler_context, one_at_a_time

__all__ = ["arun_agent"]

# A model request that failed is journaled as a terminal error with this code
# (the SDK error's type and message: its exception holds the request, the
# whole conversation), not retried by Restate: `ModelCallFailed` raises, on
# the first attempt and on a retry alike, and the loop's caller decides.
_MODEL_FAILED = 502
_ONCE: RunOptions[str] = RunOptions(max_attempts=1)


class _ModelCallFailed(ModelCallFailed, TerminalError):
    """`ModelCallFailed`, terminal for Restate: a handler that lets it out ends
    its invocation failed, where any other error is retried (and would meet
    the same journaled failure on every attempt)."""

    def __init__(self, message: str) -> None:
        TerminalError.__init__(self, message, _MODEL_FAILED)


class _Journaled:
    """The agent loop's steps as `ctx.run`s (a `providers._steps.Steps`)."""

    def __init__(self, tools: DurableExecutor, ctx: Context) -> None:
        self.tools = tools
        self.ctx = ctx

    def ask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> NoReturn:
        _sync()

    def decide(self, step: Decide, approve: Approve | None) -> NoReturn:
        _sync()

    def run(self, executor: Executor, step: RunCalls, call_timeout: float | None) -> NoReturn:
        _sync()

    async def aask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        raised: list[Exception] = []

        async def ask() -> str:
            try:
                reply = await DIRECT.aask(api, create, request)
            except Exception as e:
                raised.append(e)
                raise TerminalError(f"{type(e).__name__}: {e}", _MODEL_FAILED) from None
            return reply_record(reply)

        try:
            async with one_at_a_time(self.ctx):
                record = await self.ctx.run_typed(f"toolbus-model:{api}", ask, _ONCE)
        except TerminalError as e:
            if e.status_code != _MODEL_FAILED:
                raise  # (the invocation cancelled)
            raise _ModelCallFailed(e.message) from (raised[0] if raised else None)
        return read_record(record, "reply")

    async def adecide(self, step: Decide, approve: Approve | None) -> list[Any]:
        async def ask() -> str:
            try:
                answers = await DIRECT.adecide(step, approve)
            except Exception as e:
                # Journaled as Restate's terminal error without its message
                # (it may name what the approver reached, its credentials);
                # the approver's exception is its cause in this attempt.
                raise TerminalError(f"the approver raised {type(e).__name__}") from e
            return answers_record(step.requests, answers)

        async with one_at_a_time(self.ctx):
            record = await self.ctx.run_typed("toolbus-approve", ask, _ONCE)
        return read_answers(step.requests, record)

    async def arun(
        self, executor: Executor, step: RunCalls, call_timeout: float | None
    ) -> BatchResult:
        return await self.tools.aexecute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )


def _sync() -> NoReturn:
    raise RuntimeError("a Restate handler is a coroutine: use arun_agent")


def _run_id() -> str | None:
    """Inside a handler, its invocation's id: the same agent run when Restate retries it."""
    ctx = handler_context()
    return run_name("restate", ctx.request().id) if ctx is not None else None


async def arun_agent(
    client: Any,
    *,
    model: str,
    messages: str | Sequence[Any],
    executor: Executor | DurableExecutor,
    tools: Sequence[Mapping[str, Any]] | None = None,
    api: _agent.Api | None = None,
    strict: bool = False,
    max_turns: int = 10,
    max_length: int = DEFAULT_MAX_LENGTH,
    approve: Approve | None = None,
    resume: AgentResult | None = None,
    approvals: Mapping[str, ApprovalDecision] | None = None,
    call_timeout: float | None = None,
    on_in_doubt: InDoubtHandler | None = None,
    agent_run: str | None = None,
    context: Any = None,
    **options: Any,
) -> AgentResult:
    """`toolbus.providers.arun_agent`, each model request, approval and tool
    call journaled in the Restate handler it runs in (outside one: the plain
    loop).

    When Restate retries the invocation the loop picks up where it was:
    answered turns are read back, finished calls replayed, calls in doubt
    decided by `on_in_doubt` (see `toolbus.in_doubt`). The loop reads each
    model response as its JSON (`AgentResult.response` is a dict)."""
    tools_ = wrapped(DurableExecutor, executor, on_in_doubt, "arun_agent")
    ctx = handler_context()
    return await _agent.adrive(
        _Journaled(tools_, ctx) if ctx is not None else DIRECT,
        client,
        model=model,
        messages=messages,
        executor=tools_.executor,
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
        # (a resumed run keeps its own; a workflow's own run, its id)
        agent_run=agent_run if agent_run is not None or resume is not None else _run_id(),
        context=context,
    )
