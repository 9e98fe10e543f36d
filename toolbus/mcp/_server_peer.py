"""A served call's way back to its client: input asked for mid-call, log messages.

While `build_server` serves a call, the call's tool reaches the client that
sent it through a `ServedPeer` (named for the call in `toolbus/tools/_peer.py`):

- `ctx.elicit(...)` / `await ctx.aelicit(...)` ask for a form's data or a
  visit to a URL. On 2025-11-25 that is an `elicitation/create` request
  inside the open `tools/call`. On 2026-07-28 no request goes back inside a
  call: the question is handed to `ServedCalls` (`_server_calls.py`), which
  ends the request with an `InputRequiredResult` while the tool waits, and
  answers it when the client sends the call again. A client that declared
  no elicitation (or no URL elicitation) is never asked: the tool gets
  `InputUnavailable` at once. An accept's data is checked against the
  schema. A question still open when the call ends is withdrawn.
- `ctx.log(...)`, and Python log records made while the tool runs (those
  the process's logging lets through; toolbus's own loggers aside), become
  `notifications/message` of the request the call answers to, masked, in
  order and before its response: on 2025-11-25 at or above the level the
  client set with `logging/setLevel` (`info` until it sets one); on
  2026-07-28 as the request's `_meta` log level asks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from jsonschema.exceptions import SchemaError, best_match
from mcp.server import ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from ..tools import ElicitationAnswer, InputUnavailable, LogLevel
from ..tools._peer import LOG_LEVELS, peer_of
from ..tools._running import current_run
from ._output import mismatch, schema_validator

__all__ = ["LogLevels", "Question", "ServedPeer", "connection_of", "forward_records"]

log = logging.getLogger("toolbus.mcp")

# How long a result waits for its call's log messages to be sent (as for progress).
_FLUSH_TIMEOUT = 2.0

_DEFAULT_LEVEL: LogLevel = "info"


class LogLevels:
    """The level each client set (`logging/setLevel`), per connection."""

    def __init__(self) -> None:
        self._levels: weakref.WeakKeyDictionary[Any, LogLevel] = weakref.WeakKeyDictionary()

    def set(self, ctx: ServerRequestContext[Any], level: LogLevel) -> None:
        self._levels[connection_of(ctx)] = level

    def least(self, ctx: ServerRequestContext[Any]) -> LogLevel:
        """The least severe level the client of `ctx` wants sent."""
        return self._levels.get(connection_of(ctx), _DEFAULT_LEVEL)


def connection_of(ctx: ServerRequestContext[Any]) -> Any:
    # The SDK keeps per-client state on its `Connection`, which the low-level
    # handlers' context reaches only through the session's private attribute.
    # Not public API: should it change, the level holds per request only (a
    # client's setLevel then leaves later calls at the default).
    return getattr(ctx.session, "_connection", ctx.session)


@dataclass(eq=False)
class Question:
    """A request for input a tool made on 2026-07-28: sent back with the
    call's `InputRequiredResult`, answered when the client sends the call again."""

    key: str
    request: types.ElicitRequest
    schema: Mapping[str, Any] | None
    future: concurrent.futures.Future[ElicitationAnswer]


class ServedPeer:
    """The client of one served call (`toolbus.tools._peer.Peer`).

    The call may outlive a request (2026-07-28: suspended, then sent again),
    so the request it answers to is attached per stretch (`attached`).
    """

    def __init__(self, ctx: ServerRequestContext[Any], *, suspends: bool | None = None) -> None:
        self._ctx = ctx
        self._loop = asyncio.get_running_loop()
        self._levels: frozenset[LogLevel] = frozenset()
        self._logs: asyncio.Queue[tuple[LogLevel, Any, str | None] | None] = asyncio.Queue()
        self._questions: asyncio.Queue[Question] = asyncio.Queue()
        self._asked: set[concurrent.futures.Future[ElicitationAnswer]] = set()
        self._lock = threading.Lock()
        self._closed = False
        # 2026-07-28: no request goes back to the client inside a call; nor,
        # on either version, inside a call run as a task (`_server_tasks.py`).
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        self._suspends = modern if suspends is None else suspends

    def elicit(
        self, message: str, schema: Mapping[str, Any] | None, url: str | None
    ) -> concurrent.futures.Future[ElicitationAnswer]:
        self._check_can_ask(url is not None)
        if schema is not None:
            _check_schema(schema)
        with self._lock:
            if self._closed:
                raise InputUnavailable("the call has ended: nobody is left to answer")
            if self._suspends:
                future: concurrent.futures.Future[ElicitationAnswer] = concurrent.futures.Future()
                question = Question(
                    uuid.uuid4().hex, _request(message, schema, url), schema, future
                )
                self._loop.call_soon_threadsafe(self._questions.put_nowait, question)
            else:
                future = asyncio.run_coroutine_threadsafe(
                    self._ask(message, schema, url), self._loop
                )
            self._asked.add(future)
        future.add_done_callback(self._forget)
        return future

    def log(self, level: LogLevel, data: Any, logger: str | None) -> None:
        if level not in self._levels or self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
            self._loop.call_soon_threadsafe(self._logs.put_nowait, (level, data, logger))

    @contextlib.asynccontextmanager
    async def attached(
        self, ctx: ServerRequestContext[Any], least: LogLevel
    ) -> AsyncIterator[None]:
        """While the block runs, the call answers to request `ctx`: its log
        messages at `least` and above (and as the request allows) are sent to
        it; on leaving, those still queued go first (up to 2 s)."""
        self._ctx = ctx
        allowed = allowed_log_levels(ctx.protocol_version, ctx.meta)
        self._levels = frozenset(LOG_LEVELS[LOG_LEVELS.index(least) :]) & allowed
        pump = asyncio.create_task(self._pump(ctx), name="toolbus-mcp-served-logs")
        try:
            yield
            self._logs.put_nowait(None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), _FLUSH_TIMEOUT)
        finally:
            self._levels = frozenset()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            while not self._logs.empty():  # what the stretch could not send is dropped
                self._logs.get_nowait()

    async def questions(self) -> list[Question]:
        """The questions asked since the last look: at least one (waits for it)."""
        asked = [await self._questions.get()]
        while not self._questions.empty():
            asked.append(self._questions.get_nowait())
        return asked

    async def answer(self, questions: list[Question], replies: Mapping[str, Any]) -> None:
        """Answer each of `questions` with the client's reply of its key (none: cancel)."""
        for question in questions:
            reply = replies.get(question.key)
            try:
                answer = await self._answered(question.schema, reply)
            except Exception as e:
                _settle(question.future, error=e)
            else:
                _settle(question.future, answer=answer)

    def dismiss(self, questions: list[Question]) -> None:
        """Answer `questions` cancel: their client did not come back."""
        for question in questions:
            _settle(question.future, answer=ElicitationAnswer(action="cancel"))

    def close(self) -> None:
        """The call has ended: withdraw the questions still open."""
        with self._lock:
            self._closed = True
            asked = list(self._asked)
        for future in asked:
            future.cancel()

    def _check_can_ask(self, url: bool) -> None:
        ctx = self._ctx
        if not self._suspends and not ctx.session.can_send_request:
            raise InputUnavailable("the MCP client's connection takes no request from the server")
        capabilities = ctx.session.client_capabilities
        offered = capabilities.elicitation if capabilities is not None else None
        if offered is None:
            raise InputUnavailable("the MCP client cannot be asked for input (no elicitation)")
        # An empty `elicitation: {}` is a form-only client (the spec's default).
        if url and offered.url is None:
            raise InputUnavailable("the MCP client cannot be sent to a page (no URL elicitation)")
        if not url and offered.form is None and offered.url is not None:
            raise InputUnavailable("the MCP client cannot fill in a form (URL elicitation only)")

    async def _ask(
        self, message: str, schema: Mapping[str, Any] | None, url: str | None
    ) -> ElicitationAnswer:
        ctx = self._ctx
        request = _request(message, schema, url)
        try:
            reply = await ctx.session.send_request(
                request, types.ElicitResult, metadata=ServerMessageMetadata(ctx.request_id)
            )
        except MCPError as e:
            raise InputUnavailable(f"the MCP client refused to ask: {e.error.message}") from None
        return await self._answered(schema, reply)

    async def _answered(self, schema: Mapping[str, Any] | None, reply: Any) -> ElicitationAnswer:
        if reply is None:
            return ElicitationAnswer(action="cancel")  # sent again without it
        if not isinstance(reply, types.ElicitResult):
            raise InputUnavailable("the MCP client answered a request for input with no answer")
        if reply.action != "accept" or schema is None:
            return ElicitationAnswer(action=reply.action)
        data = dict(reply.content or {})
        problem = await asyncio.to_thread(_against, schema, data)
        if problem:
            raise ValueError(f"The MCP client's answer does not match the schema: {problem}")
        return ElicitationAnswer(action="accept", data=data)

    def _forget(self, future: concurrent.futures.Future[ElicitationAnswer]) -> None:
        with self._lock:
            self._asked.discard(future)

    async def _pump(self, ctx: ServerRequestContext[Any]) -> None:
        while (item := await self._logs.get()) is not None:
            level, data, logger = item
            note = types.LoggingMessageNotification(
                params=types.LoggingMessageNotificationParams(level=level, data=data, logger=logger)
            )
            try:
                await ctx.session.send_notification(note, related_request_id=ctx.request_id)
            except Exception as e:  # the client went away: the call goes on regardless
                log.debug("could not send a log message of a served call: %s", e)
                return


def _request(
    message: str, schema: Mapping[str, Any] | None, url: str | None
) -> types.ElicitRequest:
    if url is not None:
        return types.ElicitRequest(
            params=types.ElicitRequestURLParams(
                message=message, url=url, elicitation_id=uuid.uuid4().hex
            )
        )
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=dict(schema or {}))
    )


def _settle(
    future: concurrent.futures.Future[ElicitationAnswer],
    *,
    answer: ElicitationAnswer | None = None,
    error: BaseException | None = None,
) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # withdrawn meanwhile
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer or ElicitationAnswer(action="cancel"))


def _check_schema(schema: Mapping[str, Any]) -> None:
    """A form's schema must be an object of fields (MCP's restricted JSON Schema)."""
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), Mapping):
        raise ValueError("an elicitation schema must be an object with 'properties'")
    try:
        schema_validator(dict(schema), formats=True)
    except SchemaError as e:
        raise ValueError(f"the elicitation schema is not valid JSON Schema: {e.message}") from None


def reply_problem(schema: Mapping[str, Any] | None, value: Any) -> str | None:
    """Why `value` cannot answer a question whose form is `schema` (None: it can)."""
    try:
        reply = types.ElicitResult.model_validate(value, by_name=False)
    except ValidationError as e:
        return f"not an answer to a request for input ({e.error_count()} problem(s))"
    if reply.action != "accept" or schema is None:
        return None
    return _against(schema, dict(reply.content or {})) or None


def _against(schema: Mapping[str, Any], data: dict[str, Any]) -> str:
    error = best_match(schema_validator(dict(schema), formats=True).iter_errors(data))
    return "" if error is None else mismatch(error)


# Python log records made while a served call's tool runs, sent to its client.

_forwarding = 0  # servers running
_forward_lock = threading.Lock()
_installed = False  # whether `_record_factory` is in the factory chain
_previous_factory: Callable[..., logging.LogRecord] = logging.LogRecord


def _level_of(levelno: int) -> LogLevel:
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    return "info" if levelno >= logging.INFO else "debug"


def _record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _previous_factory(*args, **kwargs)
    current = current_run.get() if _forwarding else None
    if current is None or record.name == "toolbus" or record.name.startswith("toolbus."):
        return record  # not in a tool's code; toolbus's own (ctx.log sends its own)
    run = current[1]
    peer = peer_of(run.call.id)
    if peer is not None:
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text = f"{text}\n{logging.Formatter().formatException(record.exc_info)}"
            peer.log(_level_of(record.levelno), run.scrubber.text(text), record.name)
        except Exception:  # a record that cannot be formatted is not sent (nor fails the call)
            log.debug("a served call's log record could not be sent", exc_info=True)
    return record


@contextlib.contextmanager
def forward_records() -> Iterator[None]:
    """While the block runs (a server's lifespan), Python log records made in
    served calls' tools go to their clients.

    Through the record factory, not a handler on the root logger: a handler
    there would stop Python's last-resort handler (warnings to stderr in a
    process that configured no logging), which a stdio server depends on.
    """
    global _forwarding, _installed, _previous_factory
    with _forward_lock:
        if not _installed:
            _previous_factory = logging.getLogRecordFactory()
            logging.setLogRecordFactory(_record_factory)
            _installed = True
        _forwarding += 1
    try:
        yield
    finally:
        with _forward_lock:
            _forwarding -= 1
            # Unwrapped only if nobody wrapped it since: otherwise it stays in
            # their chain, inert while no server runs.
            if _forwarding == 0 and logging.getLogRecordFactory() is _record_factory:
                logging.setLogRecordFactory(_previous_factory)
                _installed = False
