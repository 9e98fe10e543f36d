"""Calls served as MCP tasks: answered at once with a task, run on, their
state and result fetched later (`_tasks.py` keeps them).

Each protocol version in its own terms (the SDK has the 2025-11-25 types and
no implementation of either):

- **2025-11-25** (the tasks utility): a tool's `task_support` is published as
  `execution.taskSupport`, and the `tasks` capability is declared. A
  `tools/call` with a `task` parameter is answered with `{"task": ...}`
  (from a middleware: the SDK checks a `tools/call` result against
  `CallToolResult`); `tasks/get`, `tasks/result` (waits for the end; a
  question the tool asks meanwhile is sent inside it as an
  `elicitation/create` tied to the task), `tasks/list` and `tasks/cancel`
  are served. A result with `isError` ends the task `failed`. A `"required"`
  tool called without a task, or a `"forbidden"` one with one: -32601.
- **2026-07-28** (the `io.modelcontextprotocol/tasks` extension, declared by
  the client on each request): the server decides. A `"required"` tool is
  always answered with a task (`resultType: "task"`; a client that did not
  declare the extension gets -32021 naming it); an `"optional"` one when it
  has not finished within `TASK_AFTER` seconds (or asked a question by
  then). `tasks/get` carries the result (`completed`, `isError` or not) or
  the questions (`input_required`, `inputRequests`); `tasks/update` answers
  them; `tasks/cancel`. `tasks/result` and `tasks/list` are not of this version.
  A tool's error is `completed` with `isError`; `failed` (with an `error`)
  is kept for the server's own failure (a worker process that died, a
  result no reply can carry). A request whose `Mcp-Name` header names
  another task is refused (-32020).

Only the task's owner reads or cancels it (`task_owner`); to anyone else it
is unknown (-32602), as an expired one is.

One piece, a little over 400 lines: each method of both versions reads and
settles the same tasks, calls and questions; the wire's small parts are
`_task_protocol.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import HEADER_MISMATCH

from ..models import ErrorCode, ToolCall, ToolResult
from ._server_calls import ServedCalls
from ._server_peer import Question, ServedPeer, reply_problem
from ._task_protocol import (
    INPUT_RESPONSE,
    MISSING_CAPABILITY,
    NOT_FOUND,
    RELATED_TASK,
    TASKS_EXTENSION,
    TaskUpdateParams,
    declared,
    error_code_of,
    first_text,
    modern,
    named_task,
    task_owner,
)
from ._tasks import ServedTask, TaskTable

__all__ = ["ServedTasks", "TasksFull"]

Reply = Callable[[ToolResult], types.CallToolResult]


class ServedTasks:
    """A server's tasks: started, watched, read, answered, cancelled."""

    def __init__(self, calls: ServedCalls, table: TaskTable | None = None) -> None:
        self._calls = calls
        self.table = table if table is not None else TaskTable()
        self._serving = 0  # the server's lifespans open (one per in-memory connection)
        self.table.evicted = self._evicted

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        """One lifespan of the server: when the last ends, the server stops,
        and the calls still running as tasks are cancelled."""
        self._serving += 1
        try:
            yield
        finally:
            self._serving -= 1
            if not self._serving:
                self._close()

    # -- making one ------------------------------------------------------------------

    def start(
        self, ctx: ServerRequestContext[Any], call: ToolCall, reply: Reply, ttl: object
    ) -> ServedTask:
        """Run `call` as a task of request `ctx`'s owner, its result made by `reply`."""
        task = self._new(ctx, call.name, ttl)
        # Questions wait for a request to carry them, on both versions.
        task.peer = ServedPeer(ctx, suspends=True)
        task.call_id = call.id
        task.run = asyncio.ensure_future(self._run(task, call, task.peer, reply))
        task.run.add_done_callback(lambda run: self._unstarted(task, call, reply))
        return task

    async def settled_within(
        self,
        task: ServedTask,
        seconds: float,
        ctx: ServerRequestContext[Any],
        wants_progress: bool,
    ) -> dict[str, Any] | None:
        """`task`'s result if its call ends within `seconds` without asking
        anything (the task is then forgotten: the call is answered as it is,
        with its progress and log messages, as any call); else None (the
        client gets the task). A request cancelled meanwhile cancels the call."""
        ended = asyncio.ensure_future(task.ended.wait())
        asked = asyncio.ensure_future(task.changed.wait())
        try:
            async with self._calls.watched(task.call_id, task.peer, ctx, wants_progress) as flow:
                try:
                    await asyncio.wait(
                        {ended, asked}, timeout=seconds, return_when="FIRST_COMPLETED"
                    )
                except asyncio.CancelledError:
                    self._drop(task)
                    raise
                if not task.ended.is_set():
                    flow.flush = False  # still running: no tool:finished to wait for
        finally:
            ended.cancel()
            asked.cancel()
        if not task.ended.is_set() or task.result is None:
            return None
        self._forget(task)
        return task.result

    def ended(self, ctx: ServerRequestContext[Any], name: str, result: types.CallToolResult,
              ttl: object) -> ServedTask:  # fmt: skip
        """A task for a call refused before it ran (its result is `result`)."""
        task = self._new(ctx, name, ttl)
        self._settle(task, result, modern(ctx))
        return task

    def _new(self, ctx: ServerRequestContext[Any], name: str, ttl: object) -> ServedTask:
        task = self.table.create(task_owner(ctx), name, ttl)
        if task is None:
            raise TasksFull(
                types.INVALID_REQUEST,
                f"Tool '{name}' was not started as a task: too many tasks are running "
                "(yours, or in all); wait for some to end, or cancel some",
            )
        task.ended = asyncio.Event()
        task.changed = asyncio.Event()
        task.modern = modern(ctx)
        # Dropped when its lifetime ends, its call cancelled if it still runs.
        task.timer = asyncio.get_running_loop().call_later(task.ttl_ms / 1000, self._drop, task)
        return task

    def _drop(self, task: ServedTask) -> None:
        self._forget(task)
        if task.run is not None and not task.run.done():
            task.run.cancel()

    def _forget(self, task: ServedTask) -> None:
        self.table.forget(task)
        if task.timer is not None:
            task.timer.cancel()

    def _unstarted(self, task: ServedTask, call: ToolCall, reply: Reply) -> None:
        """A run cancelled before its first step never settles its task: it does here."""
        if task.result is None:
            self._settle(task, reply(_cancelled(call)), task.modern)

    async def _run(self, task: ServedTask, call: ToolCall, peer: ServedPeer, reply: Reply) -> None:
        watch = asyncio.ensure_future(self._watch(task, peer))
        try:
            # Its progress is the task's status message (neither version sends
            # a task's progress as notifications).
            with self._calls.relay.follow(call.id, lambda text: self._progressed(task, text)):
                result = await self._calls.run(call, peer)
        except asyncio.CancelledError:
            result = _cancelled(call)
        finally:
            watch.cancel()
        failed = False
        try:
            answer = reply(result)
        except Exception as e:  # (a result no reply can carry: said so, as an error)
            failed = True
            answer = reply(
                ToolResult(
                    call_id=call.id, name=call.name, status="error",
                    error=f"Tool '{call.name}' ran, but its result cannot be sent: "
                    f"{type(e).__name__}",
                    error_code=ErrorCode.TOOL_ERROR,
                )
            )  # fmt: skip
        self._settle(task, answer, task.modern, failed)

    def _progressed(self, task: ServedTask, text: str) -> None:
        if task.status == "working":
            self.table.settle(task, "working", text[:1000])

    async def _watch(self, task: ServedTask, peer: ServedPeer) -> None:
        """The tool's questions: the task waits for input until they are answered."""
        while True:
            for question in await peer.questions():
                task.questions[question.key] = (question, peer)
            self.table.settle(task, "input_required", "The tool asks for input")
            task.changed.set()

    def _settle(
        self, task: ServedTask, result: types.CallToolResult, modern: bool, failed: bool = False
    ) -> None:
        if task.result is not None:
            return
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        message = first_text(result) if result.is_error else None
        # 2026-07-28 keeps `failed` for what is not the tool's own error: the
        # server's failure (a worker that died, a result no reply can carry).
        crashed = failed or error_code_of(result) == ErrorCode.TOOL_CRASHED.value
        failed = bool(result.is_error) and (crashed or not modern)
        if not modern:
            wire.pop("resultType", None)  # (2026-07-28's)
            wire.setdefault("_meta", {})[RELATED_TASK] = {"taskId": task.id}
        elif crashed:
            task.error = {"code": types.INTERNAL_ERROR, "message": message or "the server failed"}
        task.result = wire
        task.questions.clear()
        task.peer = None  # (its request's context: not kept for the task's life)
        self.table.settle(task, "failed" if failed else "completed", message)
        task.ended.set()
        task.changed.set()

    def _close(self) -> None:
        for task in self.table.all():
            if task.run is not None and not task.run.done():
                self.table.settle(task, "cancelled", "The server stopped.")
                task.run.cancel()
            if task.timer is not None:
                task.timer.cancel()

    def _evicted(self, task: ServedTask) -> None:
        """The table let `task` go (an ended one, for room): its timer too."""
        if task.timer is not None:
            task.timer.cancel()

    # -- what a client reads ---------------------------------------------------------

    def created(self, task: ServedTask) -> dict[str, Any]:
        """The answer to the `tools/call` that made `task`."""
        if task.modern:
            return {"resultType": "task", **self._modern_fields(task)}
        return {"task": self._legacy_fields(task)}

    def _legacy_fields(self, task: ServedTask) -> dict[str, Any]:
        return {**task.fields(), "ttl": task.ttl_ms, "pollInterval": self.table.poll_interval_ms}

    def _modern_fields(self, task: ServedTask) -> dict[str, Any]:
        return {
            **task.fields(),
            "ttlMs": task.ttl_ms,
            "pollIntervalMs": self.table.poll_interval_ms,
        }

    def _find(self, ctx: ServerRequestContext[Any], task_id: str) -> ServedTask:
        if modern(ctx) and not declared(ctx):
            raise MCPError(
                MISSING_CAPABILITY,
                f"tasks/* need the {TASKS_EXTENSION} extension, declared on the request",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        named = named_task(ctx)
        if named is not None and named != task_id:
            # SEP-2663 mirrors the task id in `Mcp-Name` (absent: not checked,
            # as the SDK's own client sends none for tasks/*).
            raise MCPError(HEADER_MISMATCH, "Mcp-Name header does not match the request's taskId")
        task = self.table.find(task_id, task_owner(ctx))
        if task is None or task.modern != modern(ctx):
            raise MCPError(types.INVALID_PARAMS, NOT_FOUND)
        return task

    async def get(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if not task.modern:
            return self._legacy_fields(task)
        out = {"resultType": "complete", **self._modern_fields(task)}
        if task.status == "completed" and task.result is not None:
            out["result"] = task.result
        elif task.status == "failed" and task.error is not None:
            out["error"] = task.error
        elif task.status == "input_required":
            out["inputRequests"] = {
                key: q.request.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, (q, _) in task.questions.items()
            }
        return out

    async def result(
        self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """2025-11-25's `tasks/result`: waits for the end, asking the tool's
        questions inside this request meanwhile."""
        if modern(ctx):
            raise MCPError(types.METHOD_NOT_FOUND, "tasks/result is not a 2026-07-28 method")
        task = self._find(ctx, params.task_id)
        asking: set[asyncio.Task[None]] = set()
        try:
            while not task.ended.is_set():
                task.changed.clear()
                for key, (question, peer) in list(task.questions.items()):
                    if key not in task.asked:  # (each asked once, whoever waits)
                        task.asked.add(key)
                        asking.add(asyncio.ensure_future(self._ask(ctx, task, key, question, peer)))
                changed = asyncio.ensure_future(task.changed.wait())
                try:
                    await asyncio.wait({changed, *asking}, return_when="FIRST_COMPLETED")
                finally:
                    changed.cancel()
                for done in [a for a in asking if a.done()]:
                    asking.discard(done)
                    if not done.cancelled():
                        done.exception()  # (read: each ask answers the tool itself)
        finally:
            for ask in asking:  # the task ended (or this request went): not asked now
                ask.cancel()
        assert task.result is not None
        return task.result

    async def _ask(
        self,
        ctx: ServerRequestContext[Any],
        task: ServedTask,
        key: str,
        question: Question,
        peer: ServedPeer,
    ) -> None:
        """Ask `question` inside request `ctx`, tied to `task`, and answer the tool."""
        params = question.request.params.model_copy(
            update={"meta": {RELATED_TASK: {"taskId": task.id}}}
        )
        request = question.request.model_copy(update={"params": params})
        try:
            reply = await ctx.session.send_request(
                request, types.ElicitResult, metadata=ServerMessageMetadata(ctx.request_id)
            )
        except asyncio.CancelledError:
            # This request went (or the task ended): another waiting, or the
            # next, `tasks/result` asks it.
            task.asked.discard(key)
            task.changed.set()
            raise
        except Exception:  # refused, or no answer a client can give: answered cancel
            reply = None
        if task.questions.pop(key, None) is not None:
            await peer.answer([question], {key: reply})
        if not task.questions:
            self.table.settle(task, "working")

    async def list(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> dict[str, Any]:
        if modern(ctx):
            raise MCPError(types.METHOD_NOT_FOUND, "tasks/list is not a 2026-07-28 method")
        cursor = params.cursor if params is not None else None
        try:
            tasks, after = self.table.page(task_owner(ctx), cursor)
        except ValueError as e:
            raise MCPError(types.INVALID_PARAMS, str(e)) from None
        out: dict[str, Any] = {"tasks": [self._legacy_fields(t) for t in tasks if not t.modern]}
        if after is not None:
            out["nextCursor"] = after
        return out

    async def cancel(
        self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if task.terminal:
            if task.modern:
                return {"resultType": "complete"}  # (cooperative: nothing left to stop)
            raise MCPError(types.INVALID_PARAMS, f"Task {task.id} has ended ({task.status})")
        self.table.settle(task, "cancelled", "The task was cancelled by request.")
        if task.run is not None:
            task.run.cancel()
        task.changed.set()
        return {"resultType": "complete"} if task.modern else self._legacy_fields(task)

    async def update(
        self, ctx: ServerRequestContext[Any], params: TaskUpdateParams
    ) -> dict[str, Any]:
        """2026-07-28's `tasks/update`: answers to the task's questions (others ignored)."""
        if not modern(ctx):
            raise MCPError(types.METHOD_NOT_FOUND, "tasks/update is a 2026-07-28 method")
        task = self._find(ctx, params.task_id)
        replies = params.input_responses or {}
        asked = [k for k in replies if k in task.questions]
        for key in asked:  # all checked before any is taken: a refusal takes none
            problem = await asyncio.to_thread(
                reply_problem, task.questions[key][0].schema, replies[key]
            )
            if problem is not None:
                raise MCPError(types.INVALID_PARAMS, f"inputResponses[{key!r}]: {problem}")
        for key in asked:
            taken = task.questions.pop(key, None)
            if taken is None:
                continue  # (answered meanwhile by another tasks/update)
            question, peer = taken
            reply = INPUT_RESPONSE.validate_python(replies[key], by_name=False)
            await peer.answer([question], {key: reply})
        if not task.questions and task.status == "input_required":
            self.table.settle(task, "working")
        return {"resultType": "complete"}

    def register(self, server: Server[Any]) -> None:
        """Serve the task methods on `server`."""
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self.result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.list)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.cancel)
        server.add_request_handler("tasks/update", TaskUpdateParams, self.update)
        server.extensions[TASKS_EXTENSION] = {}


class TasksFull(MCPError):
    """No task could be made: its owner's, or the server's, bound is reached."""


def _cancelled(call: ToolCall) -> ToolResult:
    return ToolResult(
        call_id=call.id, name=call.name, status="cancelled",
        error=f"Tool '{call.name}' was cancelled: its task was cancelled",
        error_code=ErrorCode.CANCELLED,
    )  # fmt: skip
