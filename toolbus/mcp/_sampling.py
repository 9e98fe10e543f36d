"""A server that asks the client's model: MCP sampling, answered by a handler.

    def sample(request: SamplingRequest) -> SamplingAnswer:
        reply = my_model.complete(request.system_prompt, request.messages, request.max_tokens)
        return request.reply(reply.text, model=reply.model)

    with connect_stdio("python", ["summarizer.py"], sampling=sample) as server: ...

The handler (`connect*(..., sampling=handler)`, sync or async) gets a
`SamplingRequest`: the conversation as MCP sends it, the system prompt, the
token budget, the server's model hints; and, where toolbus can tell, the call
that waits (`_asking.py`). It answers with the request's `reply(text, model=)`.
Both protocol versions go through it (2025-11-25's `sampling/createMessage`
mid-call; a 2026-07-28 `InputRequiredResult` that carries one). Sampling is
deprecated from 2026-07-28 on, but servers of 2025-11-25 still ask for it.

- Within the call's deadline, off the connection's loop (a sync handler in a
  thread of its own), as an elicitation's handler.
- Text answers: a request that offers the model tools (2025-11-25's tool use)
  is refused, and so is a handler that raises or returns anything but a
  `SamplingAnswer`: the server gets an error reply, the call ends `error`
  saying why (never with the error's message, which may quote the prompt).
- Published as two `tool:progress` events of the waiting call:
  `sampling_requested` (the messages, system prompt and budget) and
  `sampling_answered` (model, stop reason, text), with the executor's
  scrubber and content scanner applied as to any progress.
- Without a handler, sampling is not offered, and a server that asks gets
  the SDK's answer: not supported.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict

from ._asking import (
    Asking,
    PastDeadline,
    about,
    answered,
    checked_handler,
    failed,
    publish,
    refused,
)

__all__ = [
    "SamplingAnswer",
    "SamplingHandler",
    "SamplingRequest",
    "check_sampling",
    "sampling_callback",
]

log = logging.getLogger("toolbus.mcp")


class SamplingAnswer(BaseModel):
    """The client model's reply to a `SamplingRequest`: made by its `reply`."""

    model_config = ConfigDict(frozen=True)

    text: str
    model: str
    stop_reason: str | None = "endTurn"


class SamplingRequest(BaseModel):
    """What an MCP server asks the client's model while one of its tools runs.

    `messages`: the conversation, as MCP sends it (`{"role": "user",
    "content": [{"type": "text", "text": ...}, ...]}`; images and audio as
    their blocks); `model_hints`: the names the server would like, best first
    (a client may ignore them). `call_id` and `tool` name the toolbus call
    that waits, when toolbus can tell.
    """

    model_config = ConfigDict(frozen=True)

    server: str
    messages: list[dict[str, Any]]
    max_tokens: int
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    model_hints: list[str] = []
    call_id: str | None = None
    tool: str | None = None

    def reply(
        self, text: str, *, model: str, stop_reason: str | None = "endTurn"
    ) -> SamplingAnswer:
        """The model's `text`, and which `model` wrote it."""
        return SamplingAnswer(text=text, model=model, stop_reason=stop_reason)


SamplingHandler = Callable[[SamplingRequest], SamplingAnswer | Awaitable[SamplingAnswer]]
"""What answers a server's requests for a sample: sync or async."""


def check_sampling(handler: object, owner: str) -> SamplingHandler | None:
    """`handler` if it is None or callable, else a `TypeError` naming `owner`."""
    return checked_handler(handler, owner, "sampling", "a SamplingRequest")  # type: ignore[no-any-return]


def sampling_callback(
    handler: SamplingHandler, server: Callable[[], str], in_flight: Collection[Asking]
) -> Callable[
    [Any, types.CreateMessageRequestParams],
    Awaitable[types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData],
]:
    """The SDK's `sampling_callback` for `handler` (see `elicitation_callback`)."""

    async def callback(
        context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        asking = about(in_flight)
        if params.tools:
            return refused(
                asking, "the server offered the model tools, which toolbus's sampling does not"
            )
        request = _request(params, server(), asking)
        publish(
            asking,
            f"MCP server '{request.server}' asks for a sample",
            sampling_requested={
                "server": request.server,
                "system_prompt": request.system_prompt,
                "messages": request.messages,
                "max_tokens": request.max_tokens,
            },
        )
        try:
            answer = await answered(handler, request, asking, "toolbus-mcp-sampling")
        except PastDeadline:
            return refused(asking, "the sampling handler did not answer before the call's deadline")
        except Exception as e:
            why = f"the sampling handler {failed(e)}"
            log.warning("MCP server '%s': %s", request.server, why)
            return refused(asking, why)
        if not isinstance(answer, SamplingAnswer):
            return refused(
                asking,
                f"the sampling handler returned {type(answer).__name__}, not a SamplingAnswer "
                "(use the request's reply)",
            )
        answered_by = {"model": answer.model, "stop_reason": answer.stop_reason}
        publish(
            asking,
            f"sample answered by {answer.model}",
            sampling_answered={**answered_by, "text": answer.text},
        )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=answer.text),
            model=answer.model,
            stop_reason=answer.stop_reason,
        )

    return callback


def _request(
    params: types.CreateMessageRequestParams, server: str, asking: Asking | None
) -> SamplingRequest:
    hints = params.model_preferences.hints if params.model_preferences is not None else None
    return SamplingRequest(
        server=server,
        messages=[
            {
                "role": m.role,
                "content": [
                    block.model_dump(by_alias=True, exclude_none=True)
                    for block in m.content_as_list
                ],
            }
            for m in params.messages
        ],
        max_tokens=params.max_tokens,
        system_prompt=params.system_prompt,
        temperature=params.temperature,
        stop_sequences=params.stop_sequences,
        model_hints=[h.name for h in hints or () if h.name],
        call_id=asking.ctx.call_id if asking is not None else None,
        tool=asking.tool if asking is not None else None,
    )
