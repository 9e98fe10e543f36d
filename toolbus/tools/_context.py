"""What a running tool may know about its call, and how it reports progress,
logs, and asks the client it was served to for input."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._sync import Latch
from ..approvals import InputAnswer
from ..masking import EMPTY_SCRUBBER, Scrubber, mask_arguments, scrub_published
from ._peer import (
    LOG_LEVELS,
    ElicitationAnswer,
    InputUnavailable,
    LogLevel,
    Peer,
    log_locally,
    peer_of,
)
from ._running import current_run

__all__ = ["LogSink", "ToolContext", "call_scrubber", "pass_on_log", "served_peer", "write_log"]

ProgressSink = Callable[["ToolContext", str, float | None, dict[str, Any]], None]

LogSink = Callable[[LogLevel, str, "str | None", dict[str, Any]], None]
"""Where a call's `ctx.log` goes (level, message, logger, data): the pipeline's,
which scrubs it with the call's own scrubber from any thread; in a worker
process, a channel to the agent that does the same."""


def _no_progress(
    ctx: ToolContext, message: str, fraction: float | None, data: dict[str, Any]
) -> None:
    return None


class ToolContext:
    """Handed to a tool that declares a parameter annotated `ToolContext`.

    It is left out of the tool's parameter schema. `deadline` is a
    `time.monotonic()` value (None when there is no timeout); `cancelled` turns
    true when the caller no longer wants the result (timeout, cancellation,
    abort), so a cooperative tool can stop early.

    `idempotency_key` is the same for every attempt of the call and across a
    restart, so a mutating tool can hand it to the service it calls (a payment
    API's `Idempotency-Key` header) to have retries deduplicated there. It is
    `ToolCall.idempotency_key` when the caller set one; otherwise it is derived
    from the tool, the arguments as the model sent them, and the model's call
    id. A call whose id toolbus made up (the model gave none) has a key made of
    its tool and arguments alone: two distinct calls with the same arguments
    (`charge(card, 10)` in two turns) then share one key, and a service that
    deduplicates on it would drop the second charge. Where that matters, have
    the caller set `ToolCall.idempotency_key` (one per intended operation), or
    keep the model's call ids. See docs/journal.md.

    `answer` is the person's answer to the question the tool asked by raising
    `InputRequired`, when the call was submitted again with it (checked: an
    answer to another call, other arguments or another question is not
    handed over); None otherwise.

    `remote_task` is the handle of work this call started elsewhere (an MCP
    server's task) that a process which crashed recorded with
    `record_remote_task`, given to the first attempt of the call made again:
    the tool picks that work up instead of starting it twice. None otherwise.
    """

    __slots__ = (
        "_cancel",
        "_logs",
        "_remote",
        "_sink",
        "answer",
        "attempt",
        "call_id",
        "deadline",
        "idempotency_key",
        "remote_task",
        "tool",
    )

    def __init__(
        self,
        *,
        call_id: str,
        tool: str,
        attempt: int = 1,
        deadline: float | None = None,
        cancel: Latch | threading.Event | None = None,
        sink: ProgressSink | None = None,
        idempotency_key: str = "",
        answer: InputAnswer | None = None,
        logs: LogSink | None = None,
        remote_task: str | None = None,
        remote: Callable[[str], None] | None = None,
    ) -> None:
        self.call_id = call_id
        self.tool = tool
        self.attempt = attempt
        self.deadline = deadline
        self._cancel = cancel if cancel is not None else Latch()
        self._sink = sink or _no_progress
        # The same for every attempt of the call and across a restart: a
        # mutating tool can hand it to the service it calls to dedupe retries.
        self.idempotency_key = idempotency_key
        self.answer = answer
        self._logs = logs
        self.remote_task = remote_task
        self._remote = remote

    @property
    def cancelled(self) -> bool:
        """True once the result of this attempt is no longer wanted."""
        return self._cancel.is_set()

    @property
    def remaining(self) -> float | None:
        """Seconds left before the deadline, or None without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds until cancelled; True if cancelled."""
        return self._cancel.wait(timeout)

    def record_remote_task(self, handle: str) -> None:
        """Say that this call's work now runs elsewhere under `handle` (a
        string the tool can pick it up with again): with a journal, the same
        call made again after a crash gets it back as `remote_task` (on the
        thread and event-loop backends; a worker process records nothing).
        Never fails the call."""
        if not isinstance(handle, str) or not handle:
            raise ValueError(f"a remote task's handle must be a non-empty string, got {handle!r}")
        if self._remote is not None:
            try:
                self._remote(handle)
            except Exception:  # recorded or not, the call goes on
                log_locally(self.tool, "warning", f"call {self.call_id}: its remote task "
                            "could not be recorded")  # fmt: skip

    def progress(self, message: str, fraction: float | None = None, **data: Any) -> None:
        """Publish a `tool:progress` signal (the stage the call is at) for this
        call, while it has no result; `fraction` within 0..1 (None if it is
        no number)."""
        self._sink(self, message, fraction, data)

    def log(
        self, message: str, level: LogLevel = "info", *, logger: str | None = None, **data: Any
    ) -> None:
        """Log `message` (and `data`) for this call, masked: to Python's logger
        `toolbus.tool.<tool>` and, for a call served over MCP, to the client
        as `notifications/message` (when it asked for that level; `logger`
        names the source, the tool by default). Never fails the call; a
        `level` that is not one of `LOG_LEVELS` is the tool's mistake, a
        `ValueError` where it is called."""
        if level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
        if not isinstance(message, str):  # an exception, a list: its text is scrubbed
            message = _text(message)
        if self._logs is not None:
            self._logs(level, message, logger, data)
        else:
            write_log(self._scrubber(), self.call_id, self.tool, level, message, logger, data)

    def elicit(
        self, message: str, schema: Mapping[str, Any] | None = None, *, url: str | None = None
    ) -> ElicitationAnswer:
        """Ask the person at the MCP client this call was served to, and wait
        for the answer: a form whose data `schema` describes (a flat JSON
        Schema object), or a page at `url` to visit. An accept's data has
        been checked against the schema.

        Waits until the call's deadline at most (then: cancel). Raises
        `InputUnavailable` when nobody can answer (the call was not served
        over MCP, the client cannot elicit, the tool runs in another
        process), `ValueError` for a schema that cannot be sent or an answer
        that does not match it. From a coroutine, use `aelicit`.
        """
        future = self._ask(message, schema, url)
        try:
            return future.result(timeout=self.remaining)
        except concurrent.futures.TimeoutError:
            future.cancel()
        except concurrent.futures.CancelledError:
            pass  # the call ended while it waited
        return ElicitationAnswer(action="cancel")

    async def aelicit(
        self, message: str, schema: Mapping[str, Any] | None = None, *, url: str | None = None
    ) -> ElicitationAnswer:
        """The async twin of `elicit`, for a coroutine tool."""
        future = self._ask(message, schema, url)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.remaining)
        except TimeoutError:
            future.cancel()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this coroutine is cancelled, not only the question
        return ElicitationAnswer(action="cancel")

    def _ask(
        self, message: str, schema: Mapping[str, Any] | None, url: str | None
    ) -> concurrent.futures.Future[ElicitationAnswer]:
        if (schema is None) == (url is None):
            raise ValueError("elicit() takes a schema (a form) or a url (a page), one of them")
        peer = peer_of(self.call_id)
        if peer is None:
            raise InputUnavailable(
                f"Tool '{self.tool}' asked for input, but its call was not served to an MCP "
                "client here (or it runs in another process): nobody can answer"
            )
        # Published to the client: scrubbed (and scanned) as the call's logs are.
        scrubber = self._scrubber()
        if scrubber:
            message = scrubber.text(message)
            schema = scrubber.value(dict(schema)) if schema is not None else None
            url = scrubber.text(url) if url is not None else None
        return peer.elicit(message, schema, url)

    def _scrubber(self) -> Scrubber:
        """What the call's masking hid, when this context's call is running here."""
        given = getattr(self._logs, "scrubber", None)  # the pipeline's `CallLogs`
        if isinstance(given, Scrubber):
            return given
        current = current_run.get()
        if current is not None and current[1].call.id == self.call_id:
            return current[1].scrubber
        return EMPTY_SCRUBBER


def write_log(
    scrubber: Scrubber,
    call_id: str,
    tool: str,
    level: LogLevel,
    message: str,
    logger: str | None,
    data: dict[str, Any],
) -> None:
    """What `ctx.log` does, with the call's `scrubber`: masked, to Python's
    logger `toolbus.tool.<tool>` and, for a call served over MCP, to its client."""
    text = scrubber.text(message) if scrubber else message
    log_locally(tool, level, text)
    peer = peer_of(call_id)
    if peer is not None:
        payload: Any = text
        if data:
            payload = {"message": text, **scrub_published(scrubber, mask_arguments(data)[0])}
        peer.log(level, payload, logger or tool)


def served_peer(ctx: ToolContext) -> Peer | None:
    """The MCP client the call of `ctx` is served to: its own, or for a call
    made inside a served call (a step; an MCP tool a served tool called),
    its caller's. Read while the call runs here."""
    peer = peer_of(ctx.call_id)
    if peer is None:
        current = current_run.get()
        if current is not None and current[1].call.id == ctx.call_id:
            parent = current[1].parent_call_id
            peer = peer_of(parent) if parent is not None else None
    return peer


def call_scrubber(ctx: ToolContext) -> Scrubber:
    """What the call of `ctx` masked, for text made for it elsewhere (an MCP
    server's log message, on the connection's loop) that is cut before the
    executor publishes it: scrubbed first, it leaves no piece of a secret at the cut."""
    return ctx._scrubber()


def pass_on_log(ctx: ToolContext, peer: Peer, level: LogLevel, data: Any, logger: str) -> None:
    """A log message made for the call of `ctx` elsewhere (by the MCP server
    its tool called), sent on to the client `peer` at once, masked with the
    call's scrubber: in order with the call's own, before its result."""
    scrubber = ctx._scrubber()
    peer.log(level, scrub_published(scrubber, data) if scrubber else data, logger)


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} whose text could not be read>"
