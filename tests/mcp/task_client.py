"""The client side the task tests drive a toolbus server with, on the SDK's
own client: 2025-11-25's task-augmented call through its dispatcher (its
`call_tool` takes no `task`, and its typed `send_request` checks a
`tools/call` answer against `CallToolResult`), 2026-07-28's tasks through a
`ClientExtension` claiming `resultType: "task"`, as the SDK means
extensions to be used."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim

from toolbus.mcp._task_protocol import RELATED_TASK, TASKS_EXTENSION

__all__ = ["Created", "Polled", "Tasks", "answer_name", "raw", "send", "task_call"]


async def answer_name(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    """A person answering the tool's question (2025-11-25: inside `tasks/result`)."""
    assert params.meta is not None and RELATED_TASK in params.meta
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def raw(client: Client, method: str, params: dict[str, Any]) -> Any:
    return await client.session._dispatcher.send_raw_request(method, params, None)


async def task_call(client: Client, name: str, arguments: dict[str, Any], **task: Any) -> str:
    """A 2025-11-25 task-augmented `tools/call`; the task's id."""
    created = await raw(client, "tools/call", {"name": name, "arguments": arguments, "task": task})
    assert created["task"]["status"] == "working"
    assert set(created["task"]) >= {"taskId", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
    return str(created["task"]["taskId"])


class Created(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


class Polled(types.Result):
    task_id: str | None = None  # (none in an acknowledgement)
    status: str | None = None
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


async def send(session: Any, method: str, **params: Any) -> Polled:
    """A 2026-07-28 task method (`tasks/get`, `tasks/update`, `tasks/cancel`)."""
    request = types.Request[TaskParams, Any].model_validate(
        {"method": method, "params": TaskParams(**params).model_dump(by_alias=True)}
    )
    return await session.send_request(request, Polled)  # type: ignore[no-any-return]


class Tasks(ClientExtension):
    """Polls each task result to its end, answering questions with a name;
    keeps the states it saw. `on_task` runs when a task is first seen."""

    identifier = TASKS_EXTENSION

    def __init__(self, on_task: Callable[[], None] = lambda: None) -> None:
        self.seen: list[str] = []
        self._on_task = on_task

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=Created, resolve=self.resolve)]

    async def resolve(self, created: Created, ctx: ClaimContext) -> types.CallToolResult:
        self.seen.append(created.status)
        assert created.ttl_ms == 3_600_000
        self._on_task()
        for _ in range(3000):
            got = await send(ctx.session, "tasks/get", task_id=created.task_id)
            self.seen.append(str(got.status))
            if got.status == "completed":
                assert got.result is not None
                return types.CallToolResult.model_validate(got.result)
            if got.status == "failed":  # the server's own failure: its error, no result
                assert got.result is None and got.error is not None
                text = types.TextContent(text=got.error["message"])
                return types.CallToolResult(content=[text], is_error=True)
            if got.status == "input_required":
                assert got.input_requests
                replies = {
                    k: {"action": "accept", "content": {"name": "Ada"}} for k in got.input_requests
                }
                await send(
                    ctx.session, "tasks/update", task_id=created.task_id, input_responses=replies
                )
            await asyncio.sleep(0.01)  # (its pollInterval, shortened)
        raise AssertionError("the task never completed")
