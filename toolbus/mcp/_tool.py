"""An MCP server's tool as a toolbus `Tool`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import mcp_types as types
from orjson import dumps, loads

from ..models import ErrorCode, ToolCall, ToolResult
from ..policies import Admit, Reject
from ..retry import RetryPolicy
from ..tools import ElicitationAnswer, Tool, ToolContext, ToolError
from ..tools._context import served_peer
from ._actor import SessionPort
from ._asking import Asking
from ._client_tasks import Tracked, task_known
from ._elicitation import publish_answer
from ._errors import MCPConnectionLost, MCPServerUnavailable
from ._output import OutputCheck, tool_output
from ._server_output import unwrapped_schema

if TYPE_CHECKING:
    from ..policies import Decision

__all__ = ["MCPTool", "server_group", "tool_output"]

log = logging.getLogger("toolbus.mcp")


def server_group(server: str) -> str:
    """The capacity group of a connection's `server_max_concurrency`: `mcp:<name>`."""
    return f"mcp:{server}"


class _Withdrawn:
    """The policy of every MCP tool: a call of a tool its server no longer lists
    (it waited in toolbus while the list changed) ends `rejected`, `TOOL_NOT_FOUND`,
    as it would had it come after the change."""

    name = "mcp-tool-list"
    at_submission = False

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        if getattr(tool, "removed", False):
            server = getattr(tool, "server", "?")
            return Reject(
                ErrorCode.TOOL_NOT_FOUND,
                f"Unknown tool '{call.name}': MCP server '{server}' no longer offers it",
            )
        return _ADMIT

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
        return None


_ADMIT = Admit()
_WITHDRAWN = _Withdrawn()


class MCPTool(Tool):
    """A tool of an MCP server, run on that server through its connection.

    Its name, description and JSON schema are the server's (under an optional
    prefix). From the annotations (the server's hints, kept in `annotations`
    as sent): `read_only` is `readOnlyHint`, unless `destructiveHint` is true,
    which always makes a tool mutating; `idempotent` is `idempotentHint` when
    the connection trusts it (`idempotent=None`); `open_world` is
    `openWorldHint` (true when absent, as the spec says); `destructive` is
    `destructiveHint` for a mutating tool; `output_schema` is `outputSchema`.
    toolbus validates the arguments against the schema, then `run` sends the
    call to the server and checks structured content against the tool's
    `outputSchema`. The
    executor's timeout, retry, concurrency and masking rules apply as to any
    tool; a timeout or cancellation cancels the request on the server.

    With `server_max_concurrency=N` the tool belongs to the capacity group
    `mcp:<server>` (limit N), shared by every tool of that server: calls beyond
    N wait in toolbus, off the clock of their timeout. `removed` is set when
    the server stops listing the tool.

    A call the server makes a task is recorded as the call's remote task
    (`ToolContext.record_remote_task`: `{"server": ..., "task": ...}`): a
    retry, or the call in a new process after a crash (with a journal),
    fetches that task instead of calling again, while the server has it
    (`knows_remote_task`).
    """

    # Its calls go through this process's live session to the server.
    process_local = True
    extension = True

    def __init__(
        self,
        spec: types.Tool,
        port: SessionPort,
        *,
        name: str | None = None,
        read_only: bool | None = None,
        idempotent: bool | None = False,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int | None = None,
        call_timeout: float | None = None,
        server_max_concurrency: int | None = None,
        unwrap: bool | None = None,
    ) -> None:
        self.spec = spec
        self.remote_name = spec.name
        self.server = port.name
        self._port = port
        self.name = name or spec.name
        self.description = spec.description or spec.title or ""
        self.parameters = spec.input_schema
        hints: dict[str, Any] = (
            spec.annotations.model_dump(by_alias=True, exclude_none=True)
            if spec.annotations is not None
            else {}
        )
        self.annotations = hints
        # Whether the server runs its calls as tasks (`execution.taskSupport`;
        # the connection's `tasks=` decides which are: `_client_tasks.py`).
        execution = spec.execution
        self.server_task_support: str | None = (
            execution.task_support if execution is not None else None
        )
        hinted_read_only = hints.get("readOnlyHint") is True and not hints.get("destructiveHint")
        self.read_only = hinted_read_only if read_only is None else read_only
        self.idempotent = hints.get("idempotentHint") is True if idempotent is None else idempotent
        self.open_world = hints.get("openWorldHint") is not False
        destructive = hints.get("destructiveHint")
        # Kept for serving the tool on (toolbus mcp serve); a read-only tool is never destructive.
        self.destructive = (
            destructive if isinstance(destructive, bool) and not self.read_only else None
        )
        # An unusable outputSchema makes the tool unusable, as an unusable inputSchema does.
        # A wrapped one (`{"result": <schema>}`) is unwrapped, its outputs with
        # it: always when toolbus's server marked it, any with `unwrap=True`.
        inner = None
        if spec.output_schema is not None and unwrap is not False:
            inner = unwrapped_schema(spec.output_schema, marked_only=unwrap is None)
        self._unwrap = inner is not None
        self.output_schema = inner if inner is not None else spec.output_schema
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.retry = retry
        self.max_concurrency = max_concurrency
        if server_max_concurrency is not None:
            group = server_group(port.name)
            self.groups = (group,)
            self.group_limits = {group: server_max_concurrency}
        self.policies = (_WITHDRAWN,)
        self.removed = False
        super().__init__()
        self._output_check = (
            OutputCheck(spec.output_schema, server=self.server)
            if spec.output_schema is not None
            else None
        )

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> Any:
        """Call the tool on the server; its error results raise `ToolError`.

        The server's progress notifications become `tool:progress` events.
        """

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if message is None:
                message = f"{progress:g}/{total:g}" if total else f"{progress:g}"
            fraction = progress / total if total else None
            ctx.progress(message, fraction, progress=progress, total=total)

        asking = Asking(ctx, self.name, peer=served_peer(ctx))
        answer = ctx.answer
        if answer is not None:  # to the question that ended the call before
            publish_answer(asking, ElicitationAnswer(action=answer.action, data=answer.data))
        followed = Tracked(
            resume=self._task_of(ctx.remote_task),
            told=lambda task_id: ctx.record_remote_task(self._handle(task_id)),
        )
        try:
            result = await self._port.call(
                self.remote_name,
                params,
                retry_safe=self.read_only or self.idempotent,
                progress=on_progress,
                asking=asking,
                answer=answer,
                task_support=self.server_task_support,
                task=followed,
            )
        except (MCPServerUnavailable, MCPConnectionLost) as e:
            if followed.resume is None:
                raise
            # The task a crashed process left could not be fetched: the call
            # is not made again in its place (the task may still run there).
            raise ToolError(
                f"MCP server '{self.server}' ran this call as a task before a restart, and "
                f"the task could not be fetched now ({e}); it may still run there",
                retryable=False,
            ) from None
        except Exception:
            if asking.failure is None:
                raise
            result = None  # the server's end of it: what our answer was, says more
        if asking.failure is not None:
            # Whatever the server made of the error reply (an error result, a
            # refusal), the call failed on this side: say why.
            raise ToolError(
                f"An answer to MCP server '{self.server}' was not sent: {asking.failure}",
                retryable=False,
            )
        assert result is not None
        if self._output_check is not None:
            await self._output_check.acheck(result)
        if not asking.declined:
            return tool_output(result, server=self.server, unwrap=self._unwrap)
        try:
            output = tool_output(result, server=self.server, unwrap=self._unwrap)
        except ToolError as e:  # an error result, after a request nobody answered
            raise ToolError(
                f"{e.message}{_declined(self.server, asking)}", retryable=e.retryable
            ) from None
        return output.model_copy(
            update={"metadata": {**output.metadata, "mcp_input_declined": asking.declined}}
        )

    def _handle(self, task_id: str) -> str:
        return dumps({"server": self.server, "task": task_id}).decode()

    def _task_of(self, handle: str | None) -> str | None:
        """The task id in `handle`, if it is one of this tool's server's."""
        if handle is None:
            return None
        try:
            held = loads(handle)
        except ValueError:
            return None
        if not isinstance(held, dict) or held.get("server") != self.server:
            return None
        task = held.get("task")
        return task if isinstance(task, str) and task else None

    async def knows_remote_task(self, handle: str) -> bool:
        """Whether the server still has the task in `handle` (its `tasks/get`
        answers); a server that cannot be reached raises."""
        task_id = self._task_of(handle)
        if task_id is None:
            return False
        return await self._port.run(lambda client: task_known(client, task_id))


def _declined(server: str, asking: Asking) -> str:
    """What an error result adds when its server asked for input nobody could give."""
    asked = "; ".join(repr(m) for m in asking.declined)
    return (
        f" (MCP server '{server}' asked for input: {asked}; the connection has no "
        "elicitation handler, so it was declined)"
    )
