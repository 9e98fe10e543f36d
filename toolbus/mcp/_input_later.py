"""A server's question with nobody to answer it now: asked again later.

On 2026-07-28 a server that needs input ends its `tools/call` with an
`InputRequiredResult` (the questions, and an opaque `request_state`), and the
client sends the call again with the answers. With an elicitation handler the
SDK's client does that at once. Without one, the toolbus call ends `deferred`
(`INPUT_REQUIRED`) with an `InputRequest` instead, and the agent answers when
it can (`run_agent`'s approvals, or `execute(call, approval=answer)`); the
answer goes to the server with its state, so the tool goes on where it
stopped and never starts over.

- `send` sends the call and takes the server's answer: a result, or, when the
  server asks exactly one form question and nothing else, `InputRequired`
  (the call's end). Other requests (sampling, roots, a URL, several
  questions) are answered through the connection's handlers, a question
  without one declined, for up to `MAX_ROUNDS` rounds, as the SDK would.
- `seed` turns an `InputAnswer` into what the resent call carries: the
  schema's defaults filled in and the data checked against it, as a
  handler's answer is (`_elicitation.py`).

The state toolbus keeps in the request (`InputRequest.state`) holds the
server's `request_state`, the question's key and its schema; the request's
digest binds it to the call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
import orjson
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import HEADER_MISMATCH

from ..approvals import InputAnswer
from ..tools import ElicitationAnswer, InputRequired, ToolError
from ._client_tasks import CreatedTask, made, poll_task
from ._elicitation import Elicitation, checked_answer

__all__ = ["MAX_ROUNDS", "Seed", "seed", "send"]

MAX_ROUNDS = 10
"""Rounds of a server's requests for one call, as the SDK's client allows."""

Seed = tuple[dict[str, Any] | None, str | None]
"""What a resent call carries: the answers by the server's keys, and its state."""


async def seed(answer: InputAnswer, server: str) -> Seed:
    """The answer to send, or a `ToolError` saying why it is not sent."""
    try:
        state = orjson.loads(answer.state)
        key, request_state, schema = state["key"], state["request_state"], state["schema"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise ToolError(
            f"An answer to MCP server '{server}' was not sent: its state is not toolbus's",
            retryable=False,
        ) from None
    question = Elicitation(server=server, message="", requested_schema=schema)
    given = ElicitationAnswer(action=answer.action, data=answer.data)
    problem, reply = await checked_answer(given, question)
    if reply is None:
        raise ToolError(
            f"An answer to MCP server '{server}' was not sent: {problem}", retryable=False
        )
    return {key: reply}, request_state


async def send(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    progress: ProgressFnT | None,
    server: str,
    given: Seed = (None, None),
) -> types.CallToolResult:
    """Call `tool` (with `given` answers and state, on a resent call); raise
    `InputRequired` for a question to be answered later."""
    responses, state = given
    delay = 0.05
    for _ in range(MAX_ROUNDS + 1):
        try:
            result = await client.session.call_tool(
                tool,
                arguments,
                progress_callback=progress,
                input_responses=responses,
                request_state=state,
                allow_input_required=True,
                allow_claimed=True,
            )
        except MCPError as e:
            if e.code != HEADER_MISMATCH:
                raise
            # The tool's listed schema is stale: the SDK's client lists the
            # tools again and resends (a question then finds no handler: declined).
            return await client.call_tool(
                tool,
                arguments,
                progress_callback=progress,
                input_responses=responses,
                request_state=state,
            )
        if isinstance(result, CreatedTask):  # (the server made it a task: fetched)
            made(result.task_id)
            return await poll_task(client.session, result)
        if not isinstance(result, types.InputRequiredResult):
            if not isinstance(result, types.CallToolResult):
                raise MCPError(code=-32603, message=f"unexpected reply {type(result).__name__}")
            return result
        requests = result.input_requests or {}
        question = _the_question(requests)
        if question is not None:
            key, params = question
            kept = {"key": key, "request_state": result.request_state}
            state_text = orjson.dumps({**kept, "schema": params.requested_schema}).decode()
            raise InputRequired(
                params.message,
                source=f"MCP server '{server}'",
                schema=params.requested_schema,
                state=state_text,
            )
        if requests:
            responses = await _answered(client, requests)
        else:  # the server is busy: only its state, to send back after a while
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
            responses = None
        state = result.request_state
    raise ToolError(
        f"MCP server '{server}' asked for input more than {MAX_ROUNDS} times in one call",
        retryable=False,
    )


def _the_question(
    requests: dict[str, Any],
) -> tuple[str, types.ElicitRequestFormParams] | None:
    """The one form question of a round that asks nothing else."""
    if len(requests) != 1:
        return None
    ((key, request),) = requests.items()
    if isinstance(request, types.ElicitRequest) and isinstance(
        request.params, types.ElicitRequestFormParams
    ):
        return key, request.params
    return None


async def _answered(client: Client, requests: dict[str, Any]) -> dict[str, Any]:
    """Each request answered through the connection's handlers, as the SDK's
    client does; a refusal ends the call as the SDK's would."""
    session = client.session

    async def one(key: str, request: Any) -> tuple[str, Any]:
        meta = request.params.meta if request.params is not None else None
        ctx = ClientRequestContext(session=session, request_id=key, meta=meta)
        return key, await session.dispatch_input_request(ctx, request)

    answers = await asyncio.gather(*(one(k, r) for k, r in requests.items()))
    for _, answer in answers:
        if isinstance(answer, types.ErrorData):
            raise MCPError.from_error_data(answer)
    return dict(answers)
