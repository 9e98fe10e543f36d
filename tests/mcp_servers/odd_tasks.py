"""A server whose tools are answered as tasks it scripts (2026-07-28's
`resultType: "task"`; 2025-11-25's `{"task": ...}` from a middleware, as
the SDK's checks leave no handler room for it): what each `tasks/get`
answers, and the `tasks/cancel`s it received, for the client's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext

NOW = "2026-12-05T10:00:00Z"


class OddTasks:
    """`answer(n)` gives the n-th `tasks/get`'s answer (from 0); `created`
    the task answer of a `tools/call`."""

    def __init__(
        self, answer: Callable[[int], dict[str, Any]], created: dict[str, Any] | None = None
    ):
        self.answer = answer
        self.created = created or {"taskId": "t1", "status": "working", "createdAt": NOW,
                                   "lastUpdatedAt": NOW, "ttlMs": 60_000, "pollIntervalMs": 10}  # fmt: skip
        self.gets = 0
        self.updates: list[dict[str, Any]] = []
        self.cancels: list[str] = []
        self.server = self._build()

    def _build(self) -> Server[Any]:
        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            tool = types.Tool(
                name="slow", input_schema={"type": "object"},
                execution=types.ToolExecution(task_support="required"),
            )  # fmt: skip
            return types.ListToolsResult(tools=[tool])

        async def call_tool(ctx: ServerRequestContext[Any], params: Any) -> Any:
            return {"resultType": "task", **self.created}

        server: Server[Any] = Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)

        async def get(ctx: Any, params: types.GetTaskRequestParams) -> dict[str, Any]:
            n, self.gets = self.gets, self.gets + 1
            return {"resultType": "complete", **self.answer(n)}

        async def cancel(ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
            self.cancels.append(params.task_id)
            return {"resultType": "complete"}

        class Update(types.RequestParams):
            task_id: str
            input_responses: dict[str, Any] | None = None

        async def update(ctx: Any, params: Update) -> dict[str, Any]:
            self.updates.append(params.input_responses or {})
            return {"resultType": "complete"}

        server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)
        server.add_request_handler("tasks/update", Update, update)
        server.extensions["io.modelcontextprotocol/tasks"] = {}
        return server
