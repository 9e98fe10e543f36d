"""Connecting to an MCP server: `connect`, `connect_stdio`, `connect_http` and their async twins.

    with connect_stdio(sys.executable, ["-m", "mcp_server_time"]) as time_server:
        time_server.register(registry, prefix="time_")

Each returns an `MCPConnection` (`_connection.py`) once the server answered
the handshake and listed its tools.

One piece, a little over 400 lines: the options, how each is checked, and
the SDK client each connection attempt makes from them, read together.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO, TypedDict, Unpack, cast

import httpx2
import mcp_types as types
import pykka
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp.client.session import MessageHandlerFnT
from mcp.server import MCPServer, Server

from .._keywords import keywords_of, refuse_unknown
from .._options import non_negative_number, positive_int, positive_number
from .._version import __version__
from ..tools import LogLevel
from ._actor import Open, Opened, SessionActor
from ._asking import InFlight
from ._client_tasks import TaskMode, TasksClaim, check_tasks
from ._connection import MCPConnection
from ._elicitation import ElicitationHandler, check_handler, elicitation_callback
from ._errors import MCPConnectError
from ._generation import MakeClient
from ._http_target import HttpTarget
from ._link import Link
from ._oauth_client import check_auth
from ._redact import redact_argv, redact_url
from ._roots import Roots, RootsOption, given_roots, root_list
from ._sampling import SamplingHandler, check_sampling, sampling_callback
from ._server_logs import check_log_level, logging_callback

__all__ = [
    "ConnectOptions",
    "MCPTarget",
    "aconnect",
    "aconnect_http",
    "aconnect_stdio",
    "connect",
    "connect_http",
    "connect_stdio",
]

MCPTarget = StdioServerParameters | str | Server[Any] | MCPServer[Any] | Callable[[], Transport]
"""What `connect` accepts: stdio parameters, a streamable HTTP URL, an in-process
server, or a function that makes a fresh transport (called once per connection
attempt, since transports are single-use)."""

_CLIENT_INFO = types.Implementation(name="toolbus", version=__version__)

ProtocolChoice = Literal["auto", "2025-11-25"]


class ConnectOptions(TypedDict, total=False):
    """The options of `connect` and `aconnect` (and of each `connect_*`): see `connect`."""

    name: str | None
    connect_timeout: float
    probe_timeout: float
    backoff_base: float
    max_backoff: float
    server_max_concurrency: int | None
    idempotent_hints: bool
    unwrap_results: bool | None
    elicitation: ElicitationHandler | None
    sampling: SamplingHandler | None
    roots: RootsOption | None
    log_level: LogLevel | None
    tasks: TaskMode
    protocol: ProtocolChoice


_CONNECT_KEYWORDS = keywords_of(ConnectOptions)

# `protocol=` as the SDK's client says it: the initialize handshake for
# 2025-11-25 (as servers before 2026-07-28 speak it). (No pin of 2026-07-28:
# the SDK's pin skips `server/discover`, and with it the server's name and
# capabilities, its tool-list changes among them.)
_MODES: dict[str, str] = {"auto": "auto", "2025-11-25": "legacy"}


def _settings(options: ConnectOptions, where: str) -> ConnectOptions:
    """The options of a call of `where` (`connect` or `aconnect`), checked,
    each with its value or its default."""
    refuse_unknown(options, _CONNECT_KEYWORDS, where)
    server_max_concurrency = options.get("server_max_concurrency")
    if server_max_concurrency is not None:
        server_max_concurrency = positive_int(
            server_max_concurrency, "server_max_concurrency", "connect"
        )
    idempotent_hints = options.get("idempotent_hints", False)
    if not isinstance(idempotent_hints, bool):
        raise TypeError(
            f"connect: idempotent_hints must be True or False, got {idempotent_hints!r}"
        )
    unwrap_results = options.get("unwrap_results")
    if unwrap_results is not None and not isinstance(unwrap_results, bool):
        raise TypeError(
            f"connect: unwrap_results must be True, False or None, got {unwrap_results!r}"
        )
    # Checked up front: a zero or negative timeout would make every attempt fail
    # at once; a backoff of 0 is allowed (reconnect at once), a negative one is not.
    return ConnectOptions(
        name=options.get("name"),
        connect_timeout=positive_number(
            options.get("connect_timeout", 10.0), "connect_timeout", "connect"
        ),
        probe_timeout=positive_number(
            options.get("probe_timeout", 2.0), "probe_timeout", "connect"
        ),
        backoff_base=non_negative_number(
            options.get("backoff_base", 0.5), "backoff_base", "connect"
        ),
        max_backoff=non_negative_number(options.get("max_backoff", 30.0), "max_backoff", "connect"),
        server_max_concurrency=server_max_concurrency,
        idempotent_hints=idempotent_hints,
        unwrap_results=unwrap_results,
        elicitation=check_handler(options.get("elicitation"), where),
        sampling=check_sampling(options.get("sampling"), where),
        roots=given_roots(options.get("roots"), where),
        log_level=check_log_level(options.get("log_level"), where),
        tasks=check_tasks(options.get("tasks", "auto"), where),
        protocol=_protocol(options.get("protocol", "auto"), where),
    )


def _protocol(value: object, where: str) -> ProtocolChoice:
    if not isinstance(value, str) or value not in _MODES:
        raise ValueError(f"{where}: protocol must be 'auto' or '2025-11-25', got {value!r}")
    return cast(ProtocolChoice, value)


def connect(target: MCPTarget, **options: Unpack[ConnectOptions]) -> MCPConnection:
    """Connect to an MCP server and list its tools; blocks until both are done.

    Raises `MCPConnectError` when the server cannot be reached within
    `connect_timeout` seconds (default 10). Later failures never raise here:
    calls end as errors, and the connection reconnects (at once after a drop;
    after a failed attempt not before `backoff_base * 2**n` seconds, default
    0.5, at most `max_backoff`, default 30). A call cancelled by toolbus
    (timeout) triggers a health check; a server that does not answer it within
    `probe_timeout` seconds (default 2) is restarted. `name` is the one used in
    errors and logs (default: the server's own).

    `server_max_concurrency=N`: at most N calls in flight to this server, all
    its tools together (a capacity group, `mcp:<name>`, that the tools bring
    to the executor); calls beyond wait in toolbus. `idempotent_hints=True`
    trusts the server's `idempotentHint`s (toolbus's `Tool.idempotent`: a
    timed-out or lost call of a mutating tool may be retried).

    A tool whose output is not an object is served wrapped, its
    `outputSchema` `{"result": <schema>}` and each output `{"result": ...}`.
    `unwrap_results` says when a tool's outputs are unwrapped (and its
    `output_schema` is the inner one): None (the default) when a toolbus
    server marked the schema (`x-toolbus-wrapped`), True for any schema of
    that shape (another server's; a tool that really returns `{"result":
    ...}` is unwrapped too), False never.

    `elicitation`: what answers the server's requests for input while a call
    is open (a function of an `Elicitation`, sync or async, returning its
    `accept(data)`, `decline()` or `cancel()`); without one, each request is
    declined, and the call's result says what was asked (its error text, or
    `metadata["mcp_input_declined"]`). `sampling`: what answers the server's
    requests for a sample of the client's model (a function of a
    `SamplingRequest`, sync or async, returning its `reply(text, model=)`);
    without one, sampling is not offered. `roots`: the directories the server
    may work in (paths or `file://` URIs, each alone or with a name), which
    `set_roots` replaces; without it, roots are not offered. `log_level`
    (`"debug"` ... `"emergency"`): the server's log messages of that level and
    above are asked for; each becomes a `tool:progress` event (data
    `server_log`) of the call it came during, or a Python log record.
    `tasks` (`"auto"`, `"always"`, `"never"`): which calls are made as MCP
    tasks, whose results toolbus fetches (`_client_tasks.py`): `"auto"` those
    of tools the server says must be, `"always"` those it allows too.
    `protocol`: `"auto"` (the default: the newest both sides speak) or
    `"2025-11-25"` (the initialize handshake, as before 2026-07-28).
    """
    return _connect(target, _settings(options, "connect"))


def _connect(target: MCPTarget, settings: ConnectOptions) -> MCPConnection:
    name = settings["name"]
    connect_timeout = settings["connect_timeout"]
    if isinstance(target, str):
        target = HttpTarget(target)
    given = settings["roots"]
    roots = Roots(root_list(given, "connect")) if given is not None else None
    link = Link(
        name or _default_name(target),
        _client_factory(target, settings, roots, lambda: link),
        connect_timeout=connect_timeout,
        probe_timeout=settings["probe_timeout"],
        backoff_base=settings["backoff_base"],
        max_backoff=settings["max_backoff"],
    )
    link.asks_later = settings["elicitation"] is None
    link.tasks = settings["tasks"]
    if isinstance(target, HttpTarget):
        link.explain = target.refusal
        link.auth_failure = target.oauth_failure
    # Only streamable HTTP has the SDK's "SSE stream ..." errors: over stdio
    # or in-process, a -32000 error in those words is the server's refusal.
    link.http_streams = not isinstance(
        target, _StdioTarget | StdioServerParameters | Server | MCPServer
    )
    actor = SessionActor.start(link)
    try:
        opened = cast(
            Opened, actor.ask(Open(2 * connect_timeout + 5), timeout=2 * connect_timeout + 10)
        )
    except BaseException as e:
        actor.stop(block=False)
        if isinstance(e, pykka.Timeout):
            raise MCPConnectError(f"MCP server '{link.name}' did not connect in time") from None
        raise
    if name is None and opened.server_name:
        link.name = opened.server_name
    return MCPConnection(
        actor,
        opened,
        link,
        server_max_concurrency=settings["server_max_concurrency"],
        idempotent_hints=settings["idempotent_hints"],
        unwrap_results=settings["unwrap_results"],
        roots=roots,
    )


async def aconnect(target: MCPTarget, **options: Unpack[ConnectOptions]) -> MCPConnection:
    """Async twin of `connect`; never blocks the event loop.

    Cancelling it cannot stop a connect under way (it runs in a thread); the
    connection it then yields is closed, so no server process is left behind.
    """
    settings = _settings(options, "aconnect")
    loop = asyncio.get_running_loop()
    future: asyncio.Future[MCPConnection] = loop.create_future()
    abandoned = threading.Event()
    context = contextvars.copy_context()

    def make() -> MCPConnection:
        return _connect(target, settings)

    def work() -> None:
        # Our own thread, not the loop's executor: asyncio.run() cancels the
        # executor's task at exit, and the connection made after would be lost.
        try:
            conn = context.run(make)
        except BaseException as e:
            _deliver(loop, future, None, e)
            return
        if abandoned.is_set() or not _deliver(loop, future, conn, None):
            conn.close()

    threading.Thread(target=work, name="toolbus-mcp-connect", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        abandoned.set()
        raise


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[MCPConnection],
    conn: MCPConnection | None,
    error: BaseException | None,
) -> bool:
    """Hand the outcome to the awaiting task; False if nobody can take it."""

    def settle() -> None:
        if future.cancelled():
            if conn is not None:  # cancelled just now: close it, off the loop
                threading.Thread(target=conn.close, name="toolbus-mcp-close", daemon=True).start()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(conn)  # type: ignore[arg-type]

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed
        return False
    return True


def connect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    errlog: TextIO | None = None,
    **options: Unpack[ConnectOptions],
) -> MCPConnection:
    """Start `command args` as an MCP server and connect to it over its stdin/stdout.

    `env` is added to a minimal inherited environment (PATH, HOME, ...); the
    server's stderr goes to `errlog` (default: this process's stderr).
    `options` are `connect`'s. Each reconnection starts a new process.
    """
    return connect(_stdio_target(command, args, env, cwd, errlog), **options)


async def aconnect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    errlog: TextIO | None = None,
    **options: Unpack[ConnectOptions],
) -> MCPConnection:
    """Async twin of `connect_stdio`."""
    return await aconnect(_stdio_target(command, args, env, cwd, errlog), **options)


def connect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: httpx2.Auth | None = None,
    **options: Unpack[ConnectOptions],
) -> MCPConnection:
    """Connect to an MCP server over streamable HTTP at `url` (e.g. `http://host/mcp`).

    `headers` go with every request: a fixed token as `{"Authorization":
    "Bearer <token>"}`. `auth`: an OAuth provider for a server protected by an
    authorization server (`oauth_authorization_code`, `oauth_client_credentials`,
    or the SDK's own), used by every reconnection, so its tokens outlive one.
    A server that refuses the connection is named with its HTTP status, and
    for 401/403 what to check. `options` are `connect`'s.
    """
    return connect(_http_target(url, headers, auth, "connect_http"), **options)


async def aconnect_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: httpx2.Auth | None = None,
    **options: Unpack[ConnectOptions],
) -> MCPConnection:
    """Async twin of `connect_http`."""
    return await aconnect(_http_target(url, headers, auth, "aconnect_http"), **options)


def _http_target(url: str, headers: object, auth: object, where: str) -> HttpTarget:
    checked = _checked_headers(headers)
    provider = check_auth(auth, where)
    if provider is not None and any(k.lower() == "authorization" for k in checked or {}):
        raise ValueError(f"{where}: an Authorization header and auth both given: pass one")
    return HttpTarget(url, checked, provider)


def _checked_headers(headers: object) -> Mapping[str, str] | None:
    if headers is None:
        return None
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise TypeError("connect_http: headers must be a mapping of str to str")
    return headers


# -- helpers ---------------------------------------------------------------------------


class _StdioTarget:
    """A transport factory for a stdio server: a fresh process per connection attempt."""

    def __init__(self, params: StdioServerParameters, errlog: TextIO) -> None:
        self.params = params
        self.errlog = errlog

    def __call__(self) -> Transport:
        return stdio_client(self.params, errlog=self.errlog)


def _stdio_target(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
    errlog: TextIO | None,
) -> _StdioTarget:
    params = StdioServerParameters(
        command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
    )
    return _StdioTarget(params, errlog if errlog is not None else sys.stderr)


def _client_factory(
    target: MCPTarget, settings: ConnectOptions, roots: Roots | None, link: Callable[[], Link]
) -> MakeClient:
    """What makes each connection attempt's client (`link()`: the connection's
    `Link`, for the handlers of a server's requests)."""
    name, in_flight = (lambda: link().name), InFlight(lambda: link().asking)
    # Offered with or without a handler: without one, a server's request is
    # declined and the call says so, where a server that found elicitation
    # missing would refuse the call outright.
    answers: dict[str, Any] = {
        "elicitation_callback": elicitation_callback(settings["elicitation"], name, in_flight)
    }
    if settings["sampling"] is not None:
        answers["sampling_callback"] = sampling_callback(settings["sampling"], name, in_flight)
    if roots is not None:
        answers["list_roots_callback"] = roots.listed
    answers["logging_callback"] = logging_callback(name, in_flight, settings["log_level"])
    if settings["tasks"] != "never":  # (2026-07-28: the server then decides which calls)
        answers["extensions"] = [TasksClaim()]
    if settings["log_level"] is not None:
        answers["log_level"] = settings["log_level"]
    if settings["protocol"] != "auto":  # (otherwise the SDK's own default)
        answers["mode"] = _MODES[settings["protocol"]]
    if isinstance(target, StdioServerParameters | str | Server | MCPServer):
        fixed = target

        def fixed_client(on_message: MessageHandlerFnT) -> Client:
            return Client(fixed, client_info=_CLIENT_INFO, message_handler=on_message, **answers)

        return fixed_client
    make_transport = target

    def fresh_client(on_message: MessageHandlerFnT) -> Client:
        return Client(
            make_transport(), client_info=_CLIENT_INFO, message_handler=on_message, **answers
        )

    return fresh_client


def _default_name(target: MCPTarget) -> str:
    if isinstance(target, _StdioTarget):
        target = target.params
    if isinstance(target, HttpTarget):
        target = target.url
    # The name is in every error text and log line: no credentials in it.
    if isinstance(target, StdioServerParameters):
        words = [os.path.basename(target.command), *redact_argv(target.args)]
        return " ".join(words)[:80]
    if isinstance(target, str):
        return redact_url(target)
    if isinstance(target, MCPServer | Server):
        return str(target.name)
    return "mcp"
