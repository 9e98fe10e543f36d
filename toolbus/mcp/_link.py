"""The MCP session of one connection, kept alive on the connection's own event loop.

A `Link` lives on one asyncio loop (the `SessionActor`'s) and is only touched
from it, so it needs no locks. It holds at most one live `Generation` (one
`mcp.Client`, one server process for stdio; `_generation.py`) and replaces it
when it dies:

- a call that finds the connection closed, or loses it mid-call, drops the
  generation, and a new one is started at once;
- a call that is cancelled (toolbus's timeout fired) triggers a health check;
  a server that does not answer it within `probe_timeout` is dropped too;
- a failed connection attempt is retried only on demand, and not before a
  backoff delay (doubling, capped at `max_backoff`); calls in between fail fast
  with `MCPServerUnavailable`.

It also keeps the server's tool list current: a change the server announces
(`notifications/tools/list_changed`, or a `subscriptions/listen` event), a
reconnection, and a call made after the last listing's `ttlMs` ran out each
list the tools again, in the background, and hand them to `on_tools`.

One piece, some 570 lines: the generations, the calls, the listings and
the tasks fetched again after a lost connection share one state (the live
generation, the backoff, the probes), touched only from the loop; split,
each part would reach into the others.
What a server asks during a call is `_asking.py`'s (a question left for later
`_input_later.py`'s), its roots `_roots.py`'s, the resources followed
`_resource_updates.py`'s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import pydantic
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage
from mcp.shared.dispatcher import ProgressFnT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..approvals import InputAnswer
from ._asking import Asking, Calls, while_asking
from ._client_tasks import TaskMode, Tracked, as_task, call_as_task, fetch_task, tracking
from ._errors import MCPCallError, MCPConnectionLost, MCPServerUnavailable, malformed_reply
from ._generation import Generation, MakeClient, connection_lost, describe
from ._http_target import SDK_REFUSED
from ._input_later import Seed, seed, send
from ._listing import refused_listing
from ._output import sdk_output_error
from ._resource_updates import ResourceWatch
from ._unreadable import end_unreadable, is_unreadable

__all__ = ["ConnectionStatus", "Link", "describe"]

log = logging.getLogger("toolbus.mcp")

FETCH_WITHIN = 60.0
"""Seconds a call whose task is known goes on making a session again to fetch
it, after losing one (its own deadline may end it sooner)."""

# Told the server's tools each time they were listed again (on the session's loop).
OnTools = Callable[[list[types.Tool]], None]

_LIST_PAGE_CAP = 100
# How long a dropped generation may take to shut its server down before close() gives up on it.
_TEARDOWN_TIMEOUT = 6.0


@dataclass(frozen=True)
class ConnectionStatus:
    """A snapshot of a connection's health."""

    connected: bool
    generation: int
    connects: int
    drops: int
    last_error: str | None
    listings: int = 0
    """How often the tools were listed (connecting, `refresh()`, a change the server announced)."""
    protocol_version: str | None = None
    """The protocol version the live session speaks (None when there is none)."""


class Link:
    """Calls into one MCP server, across however many sessions it takes."""

    def __init__(
        self,
        name: str,
        make_client: MakeClient,
        *,
        connect_timeout: float,
        probe_timeout: float,
        backoff_base: float,
        max_backoff: float,
    ) -> None:
        self.name = name
        self._make_client = make_client
        self._connect_timeout = connect_timeout
        self._probe_timeout = probe_timeout
        self._backoff_base = backoff_base
        self._max_backoff = max_backoff
        self._current: Generation | None = None
        self._generations: set[Generation] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._probing: set[int] = set()
        self._count = 0
        self._failures = 0
        self._retry_at = 0.0
        self._connects = 0
        self._drops = 0
        self._last_error: str | None = None
        self._closed = False
        # Given each new listing of the tools (the connection updates its registrations).
        self.on_tools: OnTools | None = None
        # What the transport knows of a failed attempt that the SDK's error does
        # not say (an HTTP status): added to a connect error.
        self.explain: Callable[[], str | None] | None = None
        # Set for a URL with an OAuth provider (the transport notes its failures).
        self.auth_failure: Callable[[], str | None] | None = None
        # Whether the transport may be streamable HTTP (a URL, or a transport
        # the caller makes), whose SDK client ends a request that lost its
        # response stream with an "SSE stream ..." error of its own. False
        # over stdio and in-process, where an error in those words is the
        # server's refusal (set by `connect`).
        self.http_streams = True
        self._listings = 0
        self._listing = asyncio.Lock()
        self._relist_pending = False
        # When the last listing's ttlMs runs out (loop time), if it set one.
        self._tools_expire: float | None = None
        # The calls in flight that a server's request for input may be about.
        self.asking: set[Asking] = Calls()
        # No elicitation handler: on 2026-07-28 a question ends the call
        # `deferred`, to be answered later (`_input_later.py`).
        self.asks_later = False
        # Which calls are made as MCP tasks (`_client_tasks.py`).
        self.tasks: TaskMode = "auto"
        # The resources followed (set by the connection): their updates, and
        # asked for again after a reconnection.
        self.resources: ResourceWatch | None = None

    # -- what the connection offers ------------------------------------------------

    async def open(self) -> Client:
        """Connect for the first time; raise the reason when that fails."""
        generation = self._start()
        return await asyncio.shield(generation.ready)

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists, all pages, fresh (never the SDK's cached listing).

        Listings are made one at a time, and each is handed to `on_tools`
        before the next one starts, so changes are applied in order.
        """
        async with self._listing:
            return await self._list_and_apply()

    async def _list_and_apply(self) -> list[types.Tool]:
        tools = await self._list_pages()
        self._listings += 1
        if self.on_tools is not None:
            try:
                self.on_tools(tools)
            except Exception:  # a bug there must not fail the listing
                log.exception("MCP server '%s': applying its tool list failed", self.name)
        return tools

    async def _list_pages(self) -> list[types.Tool]:
        generation = await self._live()
        assert generation.client is not None
        tools: list[types.Tool] = []
        cursor: str | None = None
        ttl: int | None = None
        try:
            for _ in range(_LIST_PAGE_CAP):
                page = await generation.client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                if cursor is None:
                    ttl = getattr(page, "ttl_ms", None)
                cursor = page.next_cursor
                if not cursor:
                    break
        except pydantic.ValidationError as e:
            raise refused_listing(e) from None
        except MCPError as e:
            if not self.lost(e, generation.client):
                raise
            self._drop(generation, "closed the connection while listing tools")
            raise MCPServerUnavailable(self._message("closed the connection")) from None
        # ttlMs 0 (or none, before 2026-07-28) sets no expiry: changes are announced.
        self._tools_expire = (
            asyncio.get_running_loop().time() + ttl / 1000
            if isinstance(ttl, int) and ttl > 0
            else None
        )
        return tools

    def lost(self, error: MCPError, client: Client | None) -> bool:
        """Whether `error` says the request's connection was lost, as this
        link's transport can say it (`connection_lost`), not that the server
        refused the request."""
        return connection_lost(error, client, http=self.http_streams)

    def refused(self, why: str) -> str:
        """`why` (an SDK error's text), or, when the SDK said only that the
        server refused, the HTTP status behind it as the transport saw it."""
        if self.explain is not None and (why in SDK_REFUSED or self.auth_failed() is not None):
            return self.explain() or why
        return why

    def auth_failed(self) -> str | None:
        """Why the transport's OAuth flow last failed (None: no flow, or it worked)."""
        return self.auth_failure() if self.auth_failure is not None else None

    def tools_changed(self) -> None:
        """List the tools again, in the background; several changes at once make one listing."""
        if self._closed or self._relist_pending:
            return
        self._relist_pending = True
        self._spawn(self._relist(), "relist")

    def _spawn(self, work: Coroutine[Any, Any, None], what: str) -> None:
        """Run `work` in the background, cancelled when the link closes."""
        task = asyncio.create_task(work, name=f"toolbus-mcp-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relist(self) -> None:
        try:
            async with self._listing:  # after any listing under way
                # A change announced from now on needs a listing after this one.
                self._relist_pending = False
                await self._list_and_apply()
        except Exception as e:
            log.warning(
                "MCP server '%s': could not list its tools again: %s", self.name, describe(e)
            )

    async def _on_message(self, message: IncomingMessage) -> None:
        # Servers before 2026-07-28 announce tool list changes unasked (the SDK
        # also hands this handler the events of a `subscriptions/listen` stream).
        # Runs in the session's read loop: it may not wait for the session.
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.tools_changed()
        elif self.resources is not None:
            self.resources.on_message(message)

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        retry_safe: bool,
        progress: ProgressFnT | None = None,
        asking: Asking | None = None,
        answer: InputAnswer | None = None,
        task_support: str | None = None,
        task: Tracked | None = None,
    ) -> types.CallToolResult:
        """Call `tool` on a live session (connecting first if need be).
        `task_support`: the server's `taskSupport` for it (`_client_tasks.py`).
        `task`: the call's task followed: one to fetch instead of calling
        (`resume`), and told the id of one the server makes; a connection lost
        once the task is known is made again, and the task fetched by id.

        `asking`: the toolbus call, for the server's requests for input while
        it is open (`_elicitation.py`). `answer`: a person's answer to the
        question that ended the call before, sent with the server's state;
        without a handler, a question on 2026-07-28 raises `InputRequired`
        (`_input_later.py`).

        Raises `MCPServerUnavailable` (never sent), `MCPConnectionLost` (sent,
        no answer; retryable only if `retry_safe`: read-only or idempotent),
        `MCPCallError` (a protocol error), `MCPOutputError` (the SDK found the
        structured content off the tool's outputSchema). Cancellation cancels
        the request on the server and starts a health check of the server.
        """
        generation = await self._live()
        client = generation.client
        assert client is not None
        expire = self._tools_expire
        if expire is not None and asyncio.get_running_loop().time() >= expire:
            self._tools_expire = None
            self.tools_changed()
        lost: BaseException
        followed = task if task is not None else Tracked()
        try:
            return await while_asking(
                asking,
                self.asking,
                await self._sender(
                    client, tool, arguments, progress, answer, task_support, followed
                ),
            )
        except asyncio.CancelledError:
            self._probe(generation)
            raise
        except RuntimeError as e:
            output_error = sdk_output_error(e, server=self.name, tool=tool)
            if output_error is None:
                raise
            raise output_error from None
        except pydantic.ValidationError as e:
            raise malformed_reply(e, server=self.name) from None
        except MCPError as e:
            if is_unreadable(e):
                raise MCPCallError(f"MCP server '{self.name}' {e.message}") from None
            if not self.lost(e, client):
                why = self.refused(str(e))  # (a token revoked meanwhile, say)
                raise MCPCallError(f"MCP server '{self.name}' refused the call: {why}") from None
            lost = e
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as e:
            lost = e
        retryable = None if retry_safe else False
        if self._closed:
            raise MCPConnectionLost(
                f"the connection to MCP server '{self.name}' was closed during the call",
                retryable=retryable,
            )
        self._drop(generation, f"closed the connection during a call to '{tool}'")
        if followed.seen is not None and self.auth_failed() is None:
            return await self._fetch_again(tool, followed.seen, asking, lost, retryable)
        if (failed := self.auth_failed()) is not None:
            # Not the server's doing: this side could not get a token it accepts.
            raise MCPCallError(
                f"MCP server '{self.name}' was not called: the OAuth flow failed ({failed})"
            ) from None
        raise MCPConnectionLost(
            self._message(
                f"closed the connection during the call ({describe(lost)}); "
                "it may have exited or crashed. toolbus reconnects for the next call"
            ),
            retryable=retryable,
        ) from None

    async def _sender(
        self,
        client: Client,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressFnT | None,
        answer: InputAnswer | None,
        task_support: str | None,
        followed: Tracked,
    ) -> Callable[[], Awaitable[types.CallToolResult]]:
        """How this call is sent: by the SDK's client, which answers a
        server's questions through the handlers; or, to leave a question for
        later, by `_input_later.send`; or as a 2025-11-25 task; or, for a task
        made before, by fetching it."""
        followed.progress = progress
        given: Seed = (None, None) if answer is None else await seed(answer, self.name)
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        sent: Callable[[], Awaitable[types.CallToolResult]]
        if (resume := followed.resume) is not None:
            followed.seen = resume  # (its call's intent holds it already, for another crash)
            sent = lambda: fetch_task(client, resume)  # noqa: E731
        elif not modern and answer is None and as_task(self.tasks, task_support):
            sent = lambda: call_as_task(client, tool, arguments)  # noqa: E731
        elif self.asks_later and modern:
            sent = lambda: send(client, tool, arguments, progress, self.name, given)  # noqa: E731
        else:
            responses, state = given
            sent = lambda: client.call_tool(  # noqa: E731
                tool,
                arguments,
                progress_callback=progress,
                input_responses=responses,
                request_state=state,
            )

        async def tracked() -> types.CallToolResult:
            followed_now = tracking.set(followed)  # the 2026 claim reads it
            try:
                return await sent()
            finally:
                tracking.reset(followed_now)

        return tracked

    async def _fetch_again(
        self,
        tool: str,
        task_id: str,
        asking: Asking | None,
        lost: BaseException,
        retryable: bool | None,
    ) -> types.CallToolResult:
        """The connection was lost after the server made the call a task: on
        a new session, fetch the task by id. A session lost again is made
        again, for `FETCH_WITHIN` seconds (the call's deadline, which cancels
        this, may come first)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + FETCH_WITHIN
        while loop.time() < until:
            try:
                generation = await self._live()
            except MCPServerUnavailable:
                if self._closed:
                    break
                await asyncio.sleep(min(max(self._retry_at - loop.time(), 0.05), 5.0))
                continue
            client = generation.client
            assert client is not None
            try:
                fetch = functools.partial(fetch_task, client, task_id)
                return await while_asking(asking, self.asking, fetch)
            except MCPError as e:
                if not self.lost(e, client):
                    # Gone with the connection (a server that restarted): the
                    # call was lost as any call whose connection is, retried
                    # only where that is safe.
                    raise MCPConnectionLost(
                        self._message(
                            f"closed the connection during the call ({describe(lost)}), and "
                            f"then no longer had its task ({self.refused(str(e))})"
                        ),
                        retryable=retryable,
                    ) from None
                lost = e
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as e:
                lost = e
            self._drop(generation, f"closed the connection while fetching a task of '{tool}'")
        raise MCPConnectionLost(
            self._message(
                f"closed the connection during the call ({describe(lost)}), and its task "
                f"could not be fetched within {FETCH_WITHIN:g}s"
            ),
            retryable=False,
        ) from None

    async def session(self) -> Client:
        """The live session's client, connecting first if need be (errors as `call`'s)."""
        client = (await self._live()).client
        assert client is not None  # (ready: it has one)
        return client

    @property
    def live_client(self) -> Client | None:
        """The live session's client, if one is live now."""
        current = self._current
        return current.client if current is not None and current.usable else None

    def status(self) -> ConnectionStatus:
        current = self._current
        return ConnectionStatus(
            connected=current is not None and current.usable,
            generation=current.number if current is not None else self._count,
            connects=self._connects,
            drops=self._drops,
            last_error=self._last_error,
            listings=self._listings,
            protocol_version=(
                current.client.protocol_version
                if current is not None and current.usable and current.client is not None
                else None
            ),
        )

    async def close(self) -> None:
        """Stop every session and its server; returns once they have shut down.

        Calls still in flight end: those whose session closed with an error, any
        other (none expected) cancelled, so that no caller waits on a stopped loop.
        """
        self._closed = True
        self._current = None
        for task in list(self._tasks):
            task.cancel()
        generations = list(self._generations)
        for generation in generations:
            generation.stop()
        tasks = [g.task for g in generations] + list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=_TEARDOWN_TIMEOUT)
        others = asyncio.all_tasks() - {asyncio.current_task()}
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=1.0)

    # -- generations ------------------------------------------------------------------

    async def _live(self) -> Generation:
        if self._closed:
            raise MCPServerUnavailable(f"the connection to MCP server '{self.name}' is closed")
        generation = self._current
        if generation is not None and generation.ready.done() and not generation.usable:
            self._drop(generation, "closed the connection")
            generation = self._current
        if generation is None:
            wait = self._retry_at - asyncio.get_running_loop().time()
            if wait > 0:
                raise MCPServerUnavailable(
                    self._message(
                        f"is unavailable ({self._last_error}); "
                        f"the next connection attempt is in {wait:.1f}s"
                    )
                )
            generation = self._start()
        try:
            await asyncio.shield(generation.ready)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise MCPServerUnavailable(self._message(f"is unavailable ({describe(e)})")) from None
        return generation

    def _start(self) -> Generation:
        self._count += 1
        made: list[Generation] = []

        async def heard(message: IncomingMessage) -> None:
            if isinstance(message, Exception):  # a line the SDK could not read: a reply?
                end_unreadable(made[0].client if made else None, message, self.name)
            await self._on_message(message)

        generation = Generation(
            self._count,
            self._make_client,
            self._connect_timeout,
            self._attempted,
            heard,
            self.tools_changed,
        )
        made.append(generation)
        self._current = generation
        self._generations.add(generation)
        generation.task.add_done_callback(lambda _: self._generations.discard(generation))
        return generation

    def _attempted(self, generation: Generation, error: BaseException | None) -> None:
        if error is None:
            self._failures = 0
            self._connects += 1
            if self._connects > 1:
                log.info("MCP server '%s': reconnected (session %d)", self.name, generation.number)
                self.tools_changed()  # a restarted server may offer other tools
                if self.resources is not None and generation.client is not None:
                    self._spawn(self.resources.resumed(generation.client), "resubscribe")
            return
        self._failures += 1
        # The exponent is capped: 2.0 ** 1024 overflows, and max_backoff wins long before.
        delay = min(self._max_backoff, self._backoff_base * 2.0 ** min(self._failures - 1, 60))
        self._retry_at = asyncio.get_running_loop().time() + delay
        self._last_error = describe(error)
        log.log(
            logging.WARNING if self._connects else logging.DEBUG,  # the first: connect() raises
            "MCP server '%s': connection attempt %d failed (%s); next attempt in %.1fs or later",
            self.name,
            generation.number,
            self._last_error,
            delay,
        )
        if self._current is generation:
            self._current = None

    def _drop(self, generation: Generation, reason: str) -> None:
        """Give up on `generation`; start a new one at once unless the link is closed."""
        generation.stop()
        if self._current is not generation:
            return  # dropped already
        self._current = None
        self._drops += 1
        self._last_error = reason
        log.warning("MCP server '%s' %s; reconnecting", self.name, reason)
        if not self._closed:
            self._start()

    def _probe(self, generation: Generation) -> None:
        """After a cancelled call: check, in the background, that the server still answers."""
        if self._closed or generation is not self._current or generation.number in self._probing:
            return
        self._probing.add(generation.number)
        self._spawn(self._check(generation), "probe")

    async def _check(self, generation: Generation) -> None:
        try:
            client = generation.client
            if client is None:
                return
            with anyio.fail_after(self._probe_timeout):
                await client.list_tools(cache_mode="bypass")
        except Exception as e:
            self._drop(
                generation,
                f"did not answer a health check within {self._probe_timeout:g}s ({describe(e)})",
            )
        finally:
            self._probing.discard(generation.number)

    def _message(self, text: str) -> str:
        return f"MCP server '{self.name}' {text}"
