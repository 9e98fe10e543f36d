"""The calls a server runs for its clients, each in a task that may outlive its request.

`build_server` hands each `tools/call` here. The call runs on the executor
in a task of its own, beside its way back to the client (a `ServedPeer`),
and the request waits for whichever comes first: the result, or questions
the tool asked (2026-07-28, where no request goes back inside a call).

Questions end the request with an `InputRequiredResult`: the questions, and
a `request_state` that is a random handle to the suspended call, which goes
on running (its tool waits for the answers). When the client sends the call
again with that `request_state` and its answers, the answers reach the
waiting tool, and the new request waits as the first did. The tool never
starts over, so a mutating tool never runs twice.

A suspended call is held until the client comes back or `SUSPEND_TTL`
passes (then its questions are answered `cancel`); meanwhile its deadline
still runs, and a call that ended while suspended hands its result to the
request that comes back for it. A handle is good once, on this server
process, for the tool it was given for.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from ..executor import Executor
from ..models import ToolCall, ToolResult
from ..tools._peer import serving
from ._server_peer import LogLevels, Question, ServedPeer
from ._server_progress import Flow, ProgressRelay

__all__ = ["SUSPEND_TTL", "Outcome", "Poll", "ServedCalls"]

SUSPEND_TTL = 600.0
"""Seconds a call suspended for input waits for its client to send it again."""

Outcome = ToolResult | types.InputRequiredResult

Poll = Callable[[ServerRequestContext[Any]], Awaitable[None]]
"""What runs beside a call while a request waits for it (cancelled after)."""


@dataclass(eq=False)
class _Served:
    call: ToolCall
    peer: ServedPeer
    task: asyncio.Future[ToolResult]
    questions: list[Question] = field(default_factory=list)
    expiry: asyncio.TimerHandle | None = None


class ServedCalls:
    """A server's calls: started, and (2026-07-28) suspended and resumed."""

    def __init__(
        self,
        executor: Executor,
        relay: ProgressRelay,
        levels: LogLevels,
        poll: Poll | None = None,
    ) -> None:
        self._executor = executor
        self._poll = poll
        self.relay = relay
        self._relay = relay
        self._levels = levels
        self._suspended: dict[str, _Served] = {}

    async def start(
        self, call: ToolCall, ctx: ServerRequestContext[Any], wants_progress: bool
    ) -> Outcome:
        """Run `call` for request `ctx`: its result, or the questions its tool asked."""
        peer = ServedPeer(ctx)
        task = asyncio.ensure_future(self.run(call, peer))
        return await self._stretch(_Served(call, peer, task), ctx, wants_progress)

    async def resume(
        self,
        state: str,
        call: ToolCall,
        replies: Mapping[str, Any],
        ctx: ServerRequestContext[Any],
        wants_progress: bool,
    ) -> Outcome | None:
        """Answer the call suspended under `state` with `replies` and go on
        with it for request `ctx`; None if no call of `call`'s tool and
        arguments is suspended under `state` here (unknown, expired, resumed
        already, or sent again with other arguments)."""
        served = self._suspended.get(state)
        if (
            served is None
            or served.call.name != call.name
            or served.call.arguments != call.arguments
        ):
            return None
        del self._suspended[state]
        if served.expiry is not None:
            served.expiry.cancel()
        questions, served.questions = served.questions, []
        await served.peer.answer(questions, replies)
        return await self._stretch(served, ctx, wants_progress)

    async def run(self, call: ToolCall, peer: ServedPeer) -> ToolResult:
        """Run `call` on the executor, its tool reaching its client through `peer`."""
        try:
            with serving(call.id, peer):
                return await self._executor.aexecute(call)
        finally:
            peer.close()

    @contextlib.asynccontextmanager
    async def watched(
        self, call_id: str, peer: ServedPeer, ctx: ServerRequestContext[Any], wants_progress: bool
    ) -> AsyncIterator[Flow]:
        """While it lasts, request `ctx` gets the call's log messages and, if
        it asked, its progress; on leaving, those of a call that ended go
        first (its `Flow.flush`: set it False for a call still running)."""
        async with contextlib.AsyncExitStack() as stack:
            # Left in the reverse order: the call's events first (up to its
            # tool:finished), then the log messages they and the tool made.
            await stack.enter_async_context(peer.attached(ctx, self._levels.least(ctx)))
            send = ctx.session.report_progress if wants_progress else None
            yield await stack.enter_async_context(self._relay.relay(call_id, send))

    async def _stretch(
        self, served: _Served, ctx: ServerRequestContext[Any], wants_progress: bool
    ) -> Outcome:
        """Wait, for request `ctx`, for the call's result or its next questions."""
        async with self.watched(served.call.id, served.peer, ctx, wants_progress) as flow:
            asked = asyncio.ensure_future(served.peer.questions())
            either: set[asyncio.Future[Any]] = {served.task, asked}
            polled = asyncio.ensure_future(self._poll(ctx)) if self._poll is not None else None
            try:
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                # The client cancelled its request: the call goes with it.
                asked.cancel()
                served.task.cancel()
                raise
            finally:
                if polled is not None:
                    polled.cancel()
            if served.task.done():
                asked.cancel()  # (a question asked as it ended was withdrawn with it)
                return served.task.result()
            flow.flush = False  # still running: no tool:finished to wait for
            served.questions = asked.result()
            state = secrets.token_urlsafe(24)
            self._suspended[state] = served
            loop = asyncio.get_running_loop()
            served.expiry = loop.call_later(SUSPEND_TTL, self._expire, state)
            return types.InputRequiredResult(
                input_requests={q.key: q.request for q in served.questions}, request_state=state
            )

    def _expire(self, state: str) -> None:
        served = self._suspended.pop(state, None)
        if served is not None:
            served.peer.dismiss(served.questions)
