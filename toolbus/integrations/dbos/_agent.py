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

import orjson
from dbos import DBOS

from ...approvals import ApprovalDecision, ApprovalRequest, InputAnswer, InputRequest
from ...executor import Executor
from ...in_doubt import InDoubtHandler
from ...models import BatchResult
from ...providers import AgentResult
from ...providers import agent as _agent
from ...providers._approvals import Approve, Decide, RunCalls, decision
from ...providers._common import DEFAULT_MAX_LENGTH, plain
from ...providers._steps import DIRECT
from ._durable import DurableExecutor, in_workflow
from ._records import VERSION

__all__ = ["ModelCallFailed", "arun_agent", "run_agent"]


class ModelCallFailed(Exception):
    """The model's API failed inside a durable run. DBOS records this (the SDK
    error's type and message), not the SDK's own exception, which holds the
    request: the whole conversation. The SDK's error is its `__cause__`, in
    the process it happened in."""


def _reply_record(reply: Any) -> str:
    """The model's response as recorded: what the SDK sends back of it (`plain`:
    its wire names, without SDK-only fields), as JSON."""
    try:
        return orjson.dumps({"toolbus": VERSION, "reply": plain(reply)}).decode()
    except TypeError as e:
        raise TypeError(
            f"the model's response ({type(reply).__name__}) cannot be recorded as JSON: {e}"
        ) from None


def _answers_record(requests: Sequence[ApprovalRequest], answers: Sequence[Any]) -> str:
    """The approver's answers as recorded: what each decided, not the decision
    itself (bound by its digest to the process that asked: after a recovery
    the question is asked again, and the answer applied to it)."""
    shown: list[dict[str, Any]] = []
    for request, answer in zip(requests, answers, strict=True):
        if isinstance(answer, InputAnswer):
            shown.append({"input": answer.action, "data": answer.data})
        elif isinstance(answer, ApprovalDecision):
            # A decision on other arguments (another request's digest) decides
            # nothing here: recorded as such, it is refused again on replay.
            shown.append(
                {
                    "approved": answer.approved,
                    "reason": answer.reason,
                    "matches": answer.digest == request.digest,
                }
            )
        elif isinstance(answer, bool):
            shown.append({"approved": answer, "reason": None})
        else:  # denied, as the loop denies it (and logs why)
            shown.append({"approved": False, "reason": decision(request, answer).reason})
    return orjson.dumps({"toolbus": VERSION, "answers": shown}).decode()


def _read(record: Any, key: str) -> Any:
    data = orjson.loads(record) if isinstance(record, str) else None
    if not isinstance(data, dict) or key not in data:
        raise ValueError(f"not a toolbus record of {key}")
    if data.get("toolbus", 0) > VERSION:
        raise ValueError(f"this step was recorded by a newer toolbus (version {data['toolbus']})")
    return data[key]


def _read_answers(requests: Sequence[ApprovalRequest], record: Any) -> list[Any]:
    """The recorded answers, applied to `requests` (asked again after a recovery)."""
    answers: list[Any] = []
    for request, a in zip(requests, _read(record, "answers"), strict=True):
        if "input" in a:
            if not isinstance(request, InputRequest):
                answers.append(request.deny("the recorded answer was to another question"))
            elif a["input"] == "accept":
                answers.append(request.accept(a.get("data")))
            elif a["input"] == "decline":
                answers.append(request.decline())
            else:
                answers.append(request.cancel())
        elif a.get("matches") is False:  # a decision on other arguments, as it was
            answers.append(
                ApprovalDecision(digest="", approved=bool(a["approved"]), reason=a.get("reason"))
            )
        elif a["approved"]:
            answers.append(True)
        else:
            answers.append(request.deny(a["reason"]) if a.get("reason") else False)
    return answers


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
            return _reply_record(reply)

        return _read(DBOS.run_step({"name": f"toolbus-model:{api}"}, step), "reply")

    def decide(self, step: Decide, approve: Approve | None) -> list[Any]:
        def ask() -> str:
            return _answers_record(step.requests, DIRECT.decide(step, approve))

        record = DBOS.run_step({"name": "toolbus-approve"}, ask)
        return _read_answers(step.requests, record)

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
            return _reply_record(reply)

        record = await DBOS.run_step_async({"name": f"toolbus-model:{api}"}, step)
        return _read(record, "reply")

    async def adecide(self, step: Decide, approve: Approve | None) -> list[Any]:
        async def ask() -> str:
            return _answers_record(step.requests, await DIRECT.adecide(step, approve))

        record = await DBOS.run_step_async({"name": "toolbus-approve"}, ask)
        return _read_answers(step.requests, record)

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
