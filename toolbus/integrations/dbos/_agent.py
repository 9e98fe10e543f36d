"""`run_agent` and `arun_agent` whose every step is a DBOS step.

The agent loop (`toolbus.providers.agent`) yields three kinds of step: ask
the model, ask the approver, run a batch of calls. Here each is recorded: the
model's response as a step `toolbus-model:<api>` (its JSON: the loop then
reads that JSON, on the first run and after a recovery alike, so both runs
build the same conversation), the approver's answers as `toolbus-approve`
(what each decided: after a recovery a call that waited is asked again, its
new request answered as recorded),
and each call of a batch as `DurableExecutor` records it. A workflow that
died mid-turn resumes at the step it had reached: the model is not asked
again for a turn it answered, nor a person for a decision they made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbos import DBOS

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
from ._durable import DurableExecutor, in_workflow

__all__ = ["ModelCallFailed", "arun_agent", "run_agent"]


class _Recorded:
    """The agent loop's steps as DBOS steps (a `providers._steps.Steps`)."""

    def __init__(self, tools: DurableExecutor) -> None:
        self.tools = tools

    def ask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        def step() -> str:
            try:
                reply = DIRECT.ask(api, create, request)
            except Exception as e:
                raise ModelCallFailed(f"{type(e).__name__}: {e}") from e
            return reply_record(reply)

        return read_record(DBOS.run_step({"name": f"toolbus-model:{api}"}, step), "reply")

    def decide(self, step: Decide, approve: Approve | None) -> list[Any]:
        def ask() -> str:
            return answers_record(step.requests, DIRECT.decide(step, approve))

        record = DBOS.run_step({"name": "toolbus-approve"}, ask)
        return read_answers(step.requests, record)

    def run(self, executor: Executor, step: RunCalls, call_timeout: float | None) -> BatchResult:
        return self.tools.execute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )

    async def aask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        async def step() -> str:
            try:
                reply = await DIRECT.aask(api, create, request)
            except Exception as e:
                raise ModelCallFailed(f"{type(e).__name__}: {e}") from e
            return reply_record(reply)

        record = await DBOS.run_step_async({"name": f"toolbus-model:{api}"}, step)
        return read_record(record, "reply")

    async def adecide(self, step: Decide, approve: Approve | None) -> list[Any]:
        async def ask() -> str:
            return answers_record(step.requests, await DIRECT.adecide(step, approve))

        record = await DBOS.run_step_async({"name": "toolbus-approve"}, ask)
        return read_answers(step.requests, record)

    async def arun(
        self, executor: Executor, step: RunCalls, call_timeout: float | None
    ) -> BatchResult:
        return await self.tools.aexecute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )


def _run_id() -> str | None:
    """Inside a workflow, its id: the agent run is the same when DBOS runs it again."""
    workflow_id = DBOS.workflow_id
    return run_name("dbos", workflow_id) if in_workflow() and workflow_id else None


def run_agent(
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
    """`toolbus.providers.run_agent`, each model request, approval and tool
    call a step of the DBOS workflow it runs in (outside one: the plain loop).

    After a crash DBOS runs the workflow again and the loop picks up where it
    was: answered turns are read back, finished calls replayed, calls in
    doubt decided by `on_in_doubt` (see `toolbus.in_doubt`). The loop reads
    each model response as its JSON (`AgentResult.response` is a dict)."""
    tools_ = wrapped(DurableExecutor, executor, on_in_doubt, "run_agent")
    return _agent.drive(
        _Recorded(tools_) if in_workflow() else DIRECT,
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
    """Async twin of `run_agent` (async clients; `aexecute_batch`)."""
    tools_ = wrapped(DurableExecutor, executor, on_in_doubt, "run_agent")
    return await _agent.adrive(
        _Recorded(tools_) if in_workflow() else DIRECT,
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
