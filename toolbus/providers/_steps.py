"""How the agent loop's drivers carry out a step: the model asked, the
approver asked, a batch run (`Steps`). `DIRECT` does each here, as it comes;
a durable engine records each as a step of its own
(`toolbus.integrations.dbos`), so a run that stopped picks up where it was.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from ..executor import Executor
from ..models import BatchResult
from ._approvals import Approve, Decide, RunCalls

__all__ = ["DIRECT", "Steps"]


class Steps(Protocol):
    """How `drive` carries out what the turn logic asks for: `DIRECT` does it
    here; a durable engine records each as a step of its own
    (`toolbus.integrations.dbos`), so a run that stopped picks up where it was."""

    def ask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        """The model's response to `request`, from `create` (the client's method)."""
        ...

    def decide(self, step: Decide, approve: Approve | None) -> list[Any]:
        """The approver's answers to `step`'s requests, in order."""
        ...

    def run(self, executor: Executor, step: RunCalls, call_timeout: float | None) -> BatchResult:
        """The batch of `step`'s calls, run by `executor`."""
        ...

    async def aask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any: ...

    async def adecide(self, step: Decide, approve: Approve | None) -> list[Any]: ...

    async def arun(
        self, executor: Executor, step: RunCalls, call_timeout: float | None
    ) -> BatchResult: ...


class _Direct:
    """Each step carried out here, as it comes."""

    def ask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        reply = create(**request)
        if inspect.isawaitable(reply):
            _discard(reply)
            raise TypeError("run_agent needs a sync client; use arun_agent")
        return reply

    def decide(self, step: Decide, approve: Approve | None) -> list[Any]:
        return step.ask(approve)

    def run(self, executor: Executor, step: RunCalls, call_timeout: float | None) -> BatchResult:
        return executor.execute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )

    async def aask(self, api: str, create: Callable[..., Any], request: dict[str, Any]) -> Any:
        pending = create(**request)
        if not inspect.isawaitable(pending):
            raise TypeError("arun_agent needs an async client; use run_agent")
        return await pending

    async def adecide(self, step: Decide, approve: Approve | None) -> list[Any]:
        return await step.aask(approve)

    async def arun(
        self, executor: Executor, step: RunCalls, call_timeout: float | None
    ) -> BatchResult:
        return await executor.aexecute_batch(
            step.calls, approvals=step.approvals, call_timeout=call_timeout
        )


DIRECT: Steps = _Direct()


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
