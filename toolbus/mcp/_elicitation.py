"""A server that asks while a call is open: MCP elicitation, answered by a handler.

    def ask(request: Elicitation) -> ElicitationAnswer:
        if request.mode == "url":
            return request.decline()
        return request.accept({"seat": "12A"})

    with connect_stdio("python", ["airline.py"], elicitation=ask) as airline: ...

The handler (`connect*(..., elicitation=handler)`, sync or async) gets an
`Elicitation`: the server's message and, in form mode, the JSON Schema of the
answer, or in URL mode the address to send the person to; and, where toolbus
can tell, the call that waits for it. It answers accept (with the data, in
form mode), decline or cancel. Both protocol versions go through it: on
2025-11-25 the server sends `elicitation/create` while its `tools/call` is
open; on 2026-07-28 it ends the call with an `InputRequiredResult` and the
SDK's client sends the call again with the answer.

- A sync handler runs in a thread of its own (a person may take minutes);
  the connection's loop, and its other calls, go on.
- While the call is known, the handler has until the call's deadline: past
  it, the answer is cancel.
- An accept's data gets the schema's `default` for each field it leaves out
  (SEP-1034), and is checked against the schema before it is sent. An answer
  that does not match, or a handler that raises or returns something else, is
  never sent: the server gets an error reply, and the toolbus call ends with an
  error that names the field and the rule, never the value.
- The request and the answer are published as `tool:progress` events of the
  waiting call: data `input_requested` (mode, message, schema, the URL with its
  credentials redacted) and `input_answered` (the action; the data masked by
  the default secret keys, a value under one as `***`: the executor's own
  `secret_keys` are not known here). The executor's scrubber and content
  scanner apply to them as to any progress.

Without a handler, every request is declined (elicitation is offered all
the same: a server that found it missing would refuse the call outright),
and the call's result names what was asked (`_tool.py`).

Which call: on 2026-07-28 the request arrives inside the call's own request.
On 2025-11-25 it arrives beside it and names none: it is the call's when the
connection has that one call in flight; otherwise `call_id` is None, the
handler has no deadline to keep, and nothing is published (there is no call
to publish it for).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Literal

import mcp_types as types
from jsonschema.exceptions import SchemaError, best_match
from pydantic import BaseModel, ConfigDict, ValidationError

from ..masking import mask_arguments
from ..tools import ElicitationAnswer
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
from ._output import mismatch, schema_validator
from ._redact import redact_text, redact_url

__all__ = [
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "check_handler",
    "checked_answer",
    "elicitation_callback",
    "publish_answer",
    "publish_request",
]

log = logging.getLogger("toolbus.mcp")


class Elicitation(BaseModel):
    """What an MCP server asks while one of its tools runs (`elicitation/create`).

    `mode` "form": `requested_schema` is the JSON Schema of the answer's data
    (flat: strings, numbers, booleans, enums). `mode` "url": `url` is where to
    send the person (for what must not pass through the client: a password, a
    payment); the answer says whether they went. `call_id` and `tool` name the
    toolbus call that waits, when toolbus can tell (see the module's doc).
    """

    model_config = ConfigDict(frozen=True)

    server: str
    message: str
    mode: Literal["form", "url"] = "form"
    requested_schema: dict[str, Any] | None = None
    url: str | None = None
    call_id: str | None = None
    tool: str | None = None

    def accept(self, data: Mapping[str, Any] | None = None) -> ElicitationAnswer:
        """Answer with `data` (form mode: checked against `requested_schema`
        before it is sent), or, in URL mode, say the person went to the URL."""
        return ElicitationAnswer(action="accept", data=dict(data) if data is not None else None)

    def decline(self) -> ElicitationAnswer:
        """The person said no."""
        return ElicitationAnswer(action="decline")

    def cancel(self) -> ElicitationAnswer:
        """The person dismissed it without saying yes or no."""
        return ElicitationAnswer(action="cancel")


ElicitationHandler = Callable[[Elicitation], ElicitationAnswer | Awaitable[ElicitationAnswer]]
"""What answers a server's requests for input: sync or async."""


def check_handler(handler: object, owner: str) -> ElicitationHandler | None:
    """`handler` if it is None or callable, else a `TypeError` naming `owner`."""
    return checked_handler(handler, owner, "elicitation", "an Elicitation")  # type: ignore[no-any-return]


def elicitation_callback(
    handler: ElicitationHandler | None, server: Callable[[], str], in_flight: Collection[Asking]
) -> Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]:
    """The SDK's `elicitation_callback` for `handler`, on a connection whose
    name `server()` gives and whose calls in flight are `in_flight`. Without
    a handler, every request is declined, and the call says so."""

    async def callback(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        asking = about(in_flight)
        request = _request(params, server(), asking)
        publish_request(asking, request)
        if handler is None:
            if asking is not None:  # (a guess too: it fails nothing, it only says)
                asking.declined.append(request.message)
            publish_answer(asking, request.decline())
            return types.ElicitResult(action="decline")
        try:
            answer = await answered(handler, request, asking, "toolbus-mcp-elicitation")
        except PastDeadline:
            answer = request.cancel()
        except Exception as e:
            why = f"the elicitation handler {failed(e)}"
            log.warning("MCP server '%s': %s", request.server, why)
            return refused(asking, why)
        problem, result = await checked_answer(answer, request)
        if result is None:
            return refused(asking, problem)
        # What was sent: the defaults the answer left out filled in.
        publish_answer(asking, ElicitationAnswer(action=result.action, data=result.content))
        return result

    return callback


def _request(params: types.ElicitRequestParams, server: str, asking: Asking | None) -> Elicitation:
    url = getattr(params, "url", None)
    return Elicitation(
        server=server,
        message=params.message,
        mode="url" if url is not None else "form",
        requested_schema=getattr(params, "requested_schema", None),
        url=url,
        call_id=asking.ctx.call_id if asking is not None else None,
        tool=asking.tool if asking is not None else None,
    )


async def checked_answer(
    answer: object, request: Elicitation
) -> tuple[str, types.ElicitResult | None]:
    """The reply for `answer` (None, and why, when it must not be sent)."""
    if not isinstance(answer, ElicitationAnswer):
        return (
            f"the elicitation handler returned {type(answer).__name__}, not an "
            "ElicitationAnswer (use the request's accept, decline or cancel)"
        ), None
    if answer.action != "accept":
        return "", types.ElicitResult(action=answer.action)
    if request.mode == "url":
        if answer.data is not None:
            return "the answer to a URL request carries no data (the person gave it there)", None
        return "", types.ElicitResult(action="accept")
    data = answer.data or {}
    if request.requested_schema is not None:
        data = with_defaults(request.requested_schema, data)
        problem = await asyncio.to_thread(_against, request.requested_schema, data)
        if problem:
            return problem, None
    try:
        return "", types.ElicitResult(action="accept", content=data)
    except ValidationError:
        return (
            "the answer's data must be flat: each value a string, a number, a boolean, "
            "a list of strings or None"
        ), None


def with_defaults(schema: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with each field it leaves out that the schema gives a `default`
    for set to that default (SEP-1034: a person who accepts a form as
    offered accepts its defaults)."""
    properties = schema.get("properties")
    filled = dict(data)
    if isinstance(properties, Mapping):
        for name, field in properties.items():
            if name not in filled and isinstance(field, Mapping) and "default" in field:
                filled[name] = field["default"]
    return filled


def _against(schema: dict[str, Any], data: dict[str, Any]) -> str:
    """What is wrong with `data` under `schema` ("" if nothing)."""
    try:
        error = best_match(schema_validator(schema, formats=True).iter_errors(data))
    except SchemaError:
        return "the server's requested schema is not usable JSON Schema"
    if error is None:
        return ""
    return f"the answer does not match the requested schema: {mismatch(error)}"


def publish_request(asking: Asking | None, request: Elicitation) -> None:
    details: dict[str, Any] = {"server": request.server, "mode": request.mode}
    if request.mode == "url" and request.url is not None:
        details["url"] = redact_url(request.url)
    else:
        details["schema"] = request.requested_schema
    message = f"MCP server '{request.server}' asks for input: {redact_text(request.message)}"
    publish(asking, message, input_requested=details)


def publish_answer(asking: Asking | None, answer: ElicitationAnswer) -> None:
    details: dict[str, Any] = {"action": answer.action}
    if answer.data is not None:
        details["data"] = mask_arguments(answer.data)[0]
    publish(asking, f"input answered: {answer.action}", input_answered=details)
