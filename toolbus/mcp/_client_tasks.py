"""An MCP server's tool called as a task: the call outlives its request, and
toolbus fetches its result (MCP tasks, each protocol version in its terms).

Which calls (the connection's `tasks=`): `"auto"` (the default) those of
tools the server says must be (`execution.taskSupport: "required"`),
`"always"` those it allows too (`"optional"`), `"never"` none.

- **2025-11-25.** The `tools/call` carries a `task`; the server answers with
  the task, and `tasks/result` waits for its end (a question the server asks
  meanwhile comes inside it, answered by the connection's handlers as in an
  open call). A server that ignores the `task` answers as to any call.
- **2026-07-28.** The connection declares the `io.modelcontextprotocol/tasks`
  extension (not with `tasks="never"`), and the server decides which calls
  become tasks: `TasksClaim` takes a `resultType: "task"` answer and polls
  `tasks/get` (at the server's `pollIntervalMs`, growing to `MAX_POLL`)
  until the task ends, answering its questions through the connection's
  handlers (`tasks/update`).

The call's budget bounds the wait (toolbus's timeout cancels it); a call
cancelled (a timeout, its caller) cancels its task on the server
(`tasks/cancel`, sent without waiting for the answer).

A task outlives its connection: the call's `Tracked` is told its id
(`ToolContext.record_remote_task`: the journal keeps it), and `fetch_task`
picks it up by id, on a new session after a reconnect or in a new process
after a crash (`task_known` says whether the server still has it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from ._task_protocol import TASKS_EXTENSION

__all__ = [
    "MAX_POLL",
    "MAX_ROUNDS",
    "TaskMode",
    "TasksClaim",
    "Tracked",
    "as_task",
    "call_as_task",
    "check_tasks",
    "fetch_task",
    "made",
    "task_known",
]

TaskMode = Literal["auto", "always", "never"]
MAX_POLL = 5.0
"""Seconds between two looks at a task, at most (the server's interval grows to it)."""
MAX_ROUNDS = 10
"""Rounds of a task's questions answered in one call, as for a call's (`_input_later.py`)."""

_cancels: set[asyncio.Task[Any]] = set()  # (cancels under way: kept until sent)
_INPUTS: TypeAdapter[types.InputRequests] = TypeAdapter(types.InputRequests)


@dataclass(eq=False)
class Tracked:
    """One call's task, followed: `resume` the id of a task to fetch instead
    of calling; `told` is told the id of a task the server made of it;
    `seen` the id known (to fetch again after a reconnect)."""

    resume: str | None = None
    told: Callable[[str], None] | None = None
    seen: str | None = None
    # Told each new status message of a polled task, as the call's progress.
    progress: ProgressFnT | None = None

    def made(self, task_id: str) -> None:
        self.seen = task_id
        if self.told is not None:
            self.told(task_id)


# The call under way's `Tracked`, for the 2026-07-28 claim (which the SDK's
# `call_tool` resolves inside the caller's task).
tracking: contextvars.ContextVar[Tracked | None] = contextvars.ContextVar(
    "toolbus_mcp_task", default=None
)


def made(task_id: str) -> None:
    """The server made the call under way a task: its `Tracked` is told."""
    if (followed := tracking.get()) is not None:
        followed.made(task_id)


# What a server answers for a task it does not have (or no longer has).
_UNKNOWN = frozenset({types.INVALID_PARAMS, types.METHOD_NOT_FOUND, -32021})


def check_tasks(value: object, where: str) -> TaskMode:
    """`value` if it is a task mode, else a `ValueError` naming `where`."""
    if value not in ("auto", "always", "never"):
        raise ValueError(f"{where}: tasks must be 'auto', 'always' or 'never', got {value!r}")
    return value


def as_task(mode: TaskMode, support: str | None) -> bool:
    """Whether a tool the server lists with `support` is called as a task
    (2025-11-25: 2026-07-28's server decides)."""
    if mode == "never" or support not in ("optional", "required"):
        return False
    return support == "required" or mode == "always"


async def call_as_task(
    client: Client, tool: str, arguments: dict[str, Any]
) -> types.CallToolResult:
    """Call `tool` as a 2025-11-25 task and wait for its result."""
    session = client.session
    # Through the dispatcher: the SDK's `call_tool` takes no `task`, and its
    # `send_request` checks a `tools/call` answer as a `CallToolResult`.
    params = {"name": tool, "arguments": arguments, "task": {}}
    answer = await session._dispatcher.send_raw_request("tools/call", params, None)
    task = answer.get("task") if isinstance(answer, dict) else None
    if task is None:
        # A server that does not do tasks runs the call as any (the spec says so).
        return types.CallToolResult.model_validate(answer, by_name=False)
    task_id = task.get("taskId") if isinstance(task, dict) else None
    if not isinstance(task_id, str) or not task_id:
        raise MCPError(
            types.INVALID_PARAMS,
            f"the server answered the call with a task that has no id ({_shape(task)})",
        )
    made(task_id)
    return await _task_result(session, task_id)


async def _task_result(session: ClientSession, task_id: str) -> types.CallToolResult:
    """2025-11-25: `tasks/result`, which waits for the task's end."""
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    try:
        return await session.send_request(request, types.CallToolResult)
    except BaseException:  # cancelled, or an answer that cannot be used: not left running
        _cancel(session, task_id)
        raise


async def fetch_task(client: Client, task_id: str) -> types.CallToolResult:
    """The result of the task `task_id` made earlier (another session's, a
    crashed process's), waiting for its end, in the session's protocol's terms."""
    session = client.session
    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return await poll_task(session, CreatedTask(task_id=task_id, status="working"))
    return await _task_result(session, task_id)


async def task_known(client: Client, task_id: str) -> bool:
    """Whether the server still has the task `task_id` (for this client).
    Other errors (the server unreachable) are raised: nobody can tell."""
    try:
        await _send(client.session, "tasks/get", task_id=task_id)
    except MCPError as e:
        if e.code in _UNKNOWN:
            return False
        raise
    return True


class CreatedTask(types.Result):
    """A 2026-07-28 `tools/call` answered with a task."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class _Polled(types.Result):
    task_id: str | None = None
    status: str | None = None
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class _TaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


class TasksClaim(ClientExtension):
    """The 2026-07-28 tasks extension, declared by a connection: a task
    answer is polled to its end, transparently for the SDK's `call_tool`."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        made(created.task_id)
        return await poll_task(ctx.session, created)


async def poll_task(session: ClientSession, created: CreatedTask) -> types.CallToolResult:
    """Poll the task `created` until it ends; its result (an error result if
    it failed or was cancelled on the server's side)."""
    task_id = created.task_id
    every = _seconds(created.poll_interval_ms)
    answered: set[str] = set()
    rounds = 0
    followed = tracking.get()
    said: list[str] = []
    try:
        while True:
            polled = await _send(session, "tasks/get", task_id=task_id)
            message = polled.status_message
            told = followed.progress if followed is not None else None
            if told is not None and message and (not said or said[-1] != message):
                said.append(message)
                with contextlib.suppress(Exception):  # (a progress report never fails it)
                    await told(float(len(said)), None, message)
            if polled.status == "completed" and polled.result is not None:
                return types.CallToolResult.model_validate(polled.result, by_name=False)
            if polled.status in ("failed", "cancelled", "completed"):
                return _ended(polled)
            if polled.status not in ("working", "input_required"):
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"the server answered tasks/get with no status a task can have "
                    f"({polled.status!r})",
                )
            if polled.status == "input_required" and polled.input_requests:
                replies = await _answers(session, polled.input_requests, answered)
                if replies:
                    rounds += 1
                    if rounds > MAX_ROUNDS:
                        raise MCPError(
                            types.INVALID_PARAMS,
                            f"the server's task asked for input more than {MAX_ROUNDS} times",
                        )
                    await _send(session, "tasks/update", task_id=task_id, input_responses=replies)
            every = max(every, _seconds(polled.poll_interval_ms))
            await asyncio.sleep(every)
            every = min(every * 1.5, MAX_POLL)
    except BaseException:
        # Cancelled (a timeout, the caller), or the server's answers could not
        # be used: its task is not left running for nobody.
        _cancel(session, task_id, modern=True)
        raise


async def _answers(
    session: ClientSession, requests: dict[str, Any], answered: set[str]
) -> dict[str, Any]:
    """The task's questions not answered yet, through the connection's handlers."""
    try:
        parsed = _INPUTS.validate_python(
            {k: v for k, v in requests.items() if k not in answered}, by_name=False
        )
    except ValidationError as e:
        raise MCPError(types.INVALID_PARAMS, f"the server's questions are malformed: {e}") from None
    replies: dict[str, Any] = {}
    for key, request in parsed.items():
        meta = request.params.meta if request.params is not None else None
        ctx = ClientRequestContext(session=session, request_id=key, meta=meta)
        reply = await session.dispatch_input_request(ctx, request)
        answered.add(key)
        if isinstance(reply, types.ErrorData):
            if not isinstance(request, types.ElicitRequest):  # (sampling, roots: not offered)
                raise MCPError.from_error_data(reply)
            reply = types.ElicitResult(action="decline")
        replies[key] = reply.model_dump(by_alias=True, mode="json", exclude_none=True)
    return replies


def _ended(polled: _Polled) -> types.CallToolResult:
    error = polled.error or {}
    why = error.get("message") or polled.status_message or f"the task ended {polled.status}"
    return types.CallToolResult(
        content=[types.TextContent(text=f"The server's task ended {polled.status}: {why}")],
        is_error=True,
    )


async def _send(session: ClientSession, method: str, **params: Any) -> _Polled:
    request = types.Request[_TaskParams, Any].model_validate(
        {"method": method, "params": _TaskParams(**params).model_dump(by_alias=True)}
    )
    return await session.send_request(request, _Polled)


def _cancel(session: ClientSession, task_id: str, *, modern: bool = False) -> None:
    """Ask the server to cancel task `task_id`, not waiting for its answer
    (the call that made it is being cancelled: its awaits would be too)."""

    async def cancel() -> None:
        with contextlib.suppress(Exception):
            if modern:
                await asyncio.wait_for(_send(session, "tasks/cancel", task_id=task_id), 5.0)
            else:
                request = types.CancelTaskRequest(
                    params=types.CancelTaskRequestParams(task_id=task_id)
                )
                await asyncio.wait_for(session.send_request(request, types.CancelTaskResult), 5.0)

    sent = asyncio.get_running_loop().create_task(cancel(), name="toolbus-mcp-task-cancel")
    _cancels.add(sent)
    sent.add_done_callback(_cancels.discard)


def _shape(value: object) -> str:
    return f"a {type(value).__name__}" if not isinstance(value, dict) else f"keys {sorted(value)}"


def _seconds(ms: object) -> float:
    """A poll interval in seconds: the server's, kept within 50 ms and `MAX_POLL`."""
    if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0:
        return min(max(ms / 1000, 0.05), MAX_POLL)
    return 0.05
