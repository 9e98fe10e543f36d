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
- An accept's data is checked against the schema before it is sent. An answer
  that does not match, or a handler that raises or returns something else, is
  never sent: the server gets an error reply, and the toolbus call ends with an
  error that names the field and the rule, never the value.
- The request and the answer are published as `tool:progress` events of the
  waiting call: data `input_requested` (mode, message, schema, the URL with its
  credentials redacted) and `input_answered` (the action; the data masked like
  arguments, values under secret-looking keys as `***`). The executor's
  scrubber and content scanner apply to them as to any progress.

Which call: on 2026-07-28 the request arrives inside the call's own request.
On 2025-11-25 it arrives beside it and names none: it is the call's when the
connection has that one call in flight; otherwise `call_id` is None, the
handler has no deadline to keep, and nothing is published (there is no call
to publish it for).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import mcp_types as types
from jsonschema.exceptions import SchemaError, best_match
from pydantic import BaseModel, ConfigDict, ValidationError

from ..masking import mask_arguments
from ..tools import ToolContext
from ._output import mismatch, schema_validator
from ._redact import redact_url

__all__ = [
    "ASKING",
    "Asking",
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "check_handler",
    "elicitation_callback",
    "while_asking",
]

log = logging.getLogger("toolbus.mcp")

T = TypeVar("T")


class ElicitationAnswer(BaseModel):
    """An answer to an `Elicitation`: made by its `accept`, `decline` or `cancel`."""

    model_config = ConfigDict(frozen=True)

    action: Literal["accept", "decline", "cancel"]
    data: dict[str, Any] | None = None


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
    if handler is not None and not callable(handler):
        raise TypeError(
            f"{owner}: elicitation must be a function of an Elicitation, "
            f"got {type(handler).__name__}"
        )
    return handler


@dataclass(eq=False, slots=True)
class Asking:
    """A toolbus call in flight on a connection, as its requests for input see it.

    `failure`: why an answer for it was not sent (the call ends with it).
    """

    ctx: ToolContext
    tool: str
    failure: str | None = None


ASKING: contextvars.ContextVar[Asking | None] = contextvars.ContextVar(
    "toolbus_mcp_asking", default=None
)
"""The call whose request is running in this task (set by `while_asking`)."""


async def while_asking(
    asking: Asking | None, in_flight: set[Asking], send: Callable[[], Awaitable[T]]
) -> T:
    """`send()` (a call's request) with `asking` as the call that the server's
    requests for input meanwhile are about: in this task (the SDK answers a
    2026-07-28 request in it) and among the connection's calls in flight."""
    if asking is None:
        return await send()
    ASKING.set(asking)
    in_flight.add(asking)
    try:
        return await send()
    finally:
        in_flight.discard(asking)


def elicitation_callback(
    handler: ElicitationHandler, server: Callable[[], str], in_flight: Collection[Asking]
) -> Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]:
    """The SDK's `elicitation_callback` for `handler`, on a connection whose
    name `server()` gives and whose calls in flight are `in_flight`."""

    async def callback(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        asking = ASKING.get()
        if asking is None and len(in_flight) == 1:  # 2025-11-25: the only call it can be
            (asking,) = in_flight
        request = _request(params, server(), asking)
        _publish_request(asking, request)
        try:
            answer = await _answered(handler, request, asking)
        except TimeoutError:
            answer = request.cancel()
        except Exception as e:
            log.warning(
                "the elicitation handler of MCP server '%s' failed: %s", request.server,
                type(e).__name__, exc_info=True,
            )  # fmt: skip
            return _refused(asking, f"the elicitation handler failed ({type(e).__name__})")
        problem, result = await _checked(answer, request)
        if result is None:
            return _refused(asking, problem)
        if isinstance(answer, ElicitationAnswer):  # (it is: `_checked` sent it)
            _publish_answer(asking, answer)
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


async def _answered(
    handler: ElicitationHandler, request: Elicitation, asking: Asking | None
) -> object:
    """The handler's answer, within the call's deadline (TimeoutError past it)."""
    remaining = asking.ctx.remaining if asking is not None else None
    async with asyncio.timeout(remaining):
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 (an object with an async __call__)
        ):
            return await handler(request)  # type: ignore[misc]
        answer = await _in_thread(handler, request)
        if inspect.isawaitable(answer):  # a sync function that returned a coroutine
            return await answer
        return answer


async def _in_thread(handler: ElicitationHandler, request: Elicitation) -> object:
    """`handler(request)` in a daemon thread: a person may take minutes, and a
    pool's thread would be joined when the connection's loop shuts down."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()

    def settle(value: object, error: BaseException | None) -> None:
        if done.done():
            return  # past the deadline: nobody waits
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        value: object = None
        error: BaseException | None = None
        try:
            value = handler(request)
        except BaseException as e:
            error = e
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the connection's loop has closed: nobody waits

    threading.Thread(target=work, name="toolbus-mcp-elicitation", daemon=True).start()
    return await done


async def _checked(answer: object, request: Elicitation) -> tuple[str, types.ElicitResult | None]:
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
    if request.requested_schema is not None:
        problem = await asyncio.to_thread(_against, request.requested_schema, answer.data or {})
        if problem:
            return problem, None
    try:
        return "", types.ElicitResult(action="accept", content=answer.data or {})
    except ValidationError:
        return (
            "the answer's data must be flat: each value a string, a number, a boolean, "
            "a list of strings or None"
        ), None


def _against(schema: dict[str, Any], data: dict[str, Any]) -> str:
    """What is wrong with `data` under `schema` ("" if nothing)."""
    try:
        error = best_match(schema_validator(schema).iter_errors(data))
    except SchemaError:
        return "the server's requested schema is not usable JSON Schema"
    if error is None:
        return ""
    return f"the answer does not match the requested schema: {mismatch(error)}"


def _refused(asking: Asking | None, why: str) -> types.ErrorData:
    if asking is not None and asking.failure is None:
        asking.failure = why
    return types.ErrorData(code=types.INVALID_PARAMS, message=f"toolbus: {why}")


def _publish_request(asking: Asking | None, request: Elicitation) -> None:
    if asking is None:
        return
    details: dict[str, Any] = {"server": request.server, "mode": request.mode}
    if request.mode == "url" and request.url is not None:
        details["url"] = redact_url(request.url)
    else:
        details["schema"] = request.requested_schema
    asking.ctx.progress(
        f"MCP server '{request.server}' asks for input: {request.message}",
        None,
        input_requested=details,
    )


def _publish_answer(asking: Asking | None, answer: ElicitationAnswer) -> None:
    if asking is None:
        return
    details: dict[str, Any] = {"action": answer.action}
    if answer.data is not None:
        details["data"] = mask_arguments(answer.data)[0]
    asking.ctx.progress(f"input answered: {answer.action}", None, input_answered=details)
