"""`run_agent` and `arun_agent` whose every step is a DBOS step.

The agent loop (`toolbus.providers.agent`) yields three kinds of step: ask
the model, ask the approver, run a batch of calls. Here each is recorded: the
model's response as a step `toolbus-model:<api>` (its JSON: the loop then
reads that JSON, on the first run and after a recovery alike, so both runs
build the same conversation), the approver's answers as `toolbus-approve`,
and each call of a batch as `DurableExecutor` records it. A workflow that
died mid-turn resumes at the step it had reached: the model is not asked
again for a turn it answered, nor a person for a decision they made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
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
from ._durable import DurableExecutor, in_workflow
from ._records import VERSION

__all__ = ["arun_agent", "run_agent"]


def _reply_record(reply: Any) -> str:
    """The model's response as recorded: its JSON (an SDK object's `model_dump`)."""
    data = reply.model_dump(mode="json") if hasattr(reply, "model_dump") else reply
    try:
        return orjson.dumps({"toolbus": VERSION, "reply": data}).decode()
    except TypeError as e:
        raise TypeError(
            f"the model's response ({type(reply).__name__}) cannot be recorded as JSON: {e}"
        ) from None


def _answers_record(answers: list[Any]) -> str:
    shown: list[Any] = []
    for answer in answers:
        if isinstance(answer, ApprovalDecision):
            shown.append({"decision": answer.model_dump(mode="json")})
        elif isinstance(answer, bool):
            shown.append(answer)
        else:
            raise TypeError(
                "approve must return True, False or an ApprovalDecision, got "
                f"{type(answer).__name__}"
            )
    return orjson.dumps({"toolbus": VERSION, "answers": shown}).decode()


def _read(record: Any, key: str) -> Any:
    data = orjson.loads(record) if isinstance(record, str) else None
    if not isinstance(data, dict) or key not in data:
        raise ValueError(f"not a toolbus record of {key}")
    if data.get("toolbus", 0) > VERSION:
        raise ValueError(f"this step was recorded by a newer toolbus (version {data['toolbus']})")
    return data[key]


def _read_answers(record: Any) -> list[Any]:
    return [
        ApprovalDecision.model_validate(a["decision"]) if isinstance(a, dict) else a
        for a in _read(record, "answers")
    ]


class _Recorded:
    """The agent loop's steps as DBOS steps (a `providers._steps.Steps`)."""

    def __init__(self, tools: DurableExecutor) -> None:
        self.tools = tools

    def ask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        def step() -> str:
            return _reply_record(DIRECT.ask(api, create, request))

        return _read(DBOS.run_step({"name": f"toolbus-model:{api}"}, step), "reply")

    def decide(self, step: Decide, approve: Approve | None) -> list[Any]:
        def ask() -> str:
            return _answers_record(DIRECT.decide(step, approve))

        return _read_answers(DBOS.run_step({"name": "toolbus-approve"}, ask))

    def run(self, executor: Executor, step: RunCalls, call_timeout: float | None) -> BatchResult:
        return self.tools.execute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )

    async def aask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        async def step() -> str:
            return _reply_record(await DIRECT.aask(api, create, request))

        record = await DBOS.run_step_async({"name": f"toolbus-model:{api}"}, step)
        return _read(record, "reply")

    async def adecide(self, step: Decide, approve: Approve | None) -> list[Any]:
        async def ask() -> str:
            return _answers_record(await DIRECT.adecide(step, approve))

        return _read_answers(await DBOS.run_step_async({"name": "toolbus-approve"}, ask))

    async def arun(
        self, executor: Executor, step: RunCalls, call_timeout: float | None
    ) -> BatchResult:
        return await self.tools.aexecute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )


def _durable(
    executor: Executor | DurableExecutor, on_in_doubt: InDoubtHandler | None
) -> DurableExecutor:
    if isinstance(executor, DurableExecutor):
        if on_in_doubt is not None:
            raise ValueError(
                "run_agent: on_in_doubt= is the DurableExecutor's own; give it there, "
                "or pass the Executor itself"
            )
        return executor
    return DurableExecutor(executor, on_in_doubt=on_in_doubt)


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
    **options: Any,
) -> AgentResult:
    """`toolbus.providers.run_agent`, each model request, approval and tool
    call a step of the DBOS workflow it runs in (outside one: the plain loop).

    After a crash DBOS runs the workflow again and the loop picks up where it
    was: answered turns are read back, finished calls replayed, calls in
    doubt decided by `on_in_doubt` (see `toolbus.in_doubt`). The loop reads
    each model response as its JSON (`AgentResult.response` is a dict)."""
    tools_ = _durable(executor, on_in_doubt)
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
    **options: Any,
) -> AgentResult:
    """Async twin of `run_agent` (async clients; `aexecute_batch`)."""
    tools_ = _durable(executor, on_in_doubt)
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
    )
