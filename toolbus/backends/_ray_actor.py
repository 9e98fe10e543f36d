"""Inside a Ray actor: a shipped tool, run for the agent's calls.

This module runs on the cluster (the agent wraps its two classes with
`ray.remote`): toolbus must be installed there, in the agent's version; the
tool itself arrives by value (`_ray_shipping.py`). A call arrives as a
`Request`; what goes back is JSON bytes, the same messages a worker process
sends (`_worker.ok_message` / `raised_message`): the tool's value normalised
here, or its exception described, so the agent rebuilds both exactly as it does
for the process backend (`_remote.py`).

`call` answers with one reply. `stream` (a Ray streaming generator, used for
tools that take a `ToolContext`) yields each `progress` message as the tool
reports it and the reply last, so progress reaches the agent's bus while the
call runs and always before its result.

`SyncToolActor` serves one call at a time (the agent keeps a pool of them, so a
hung call can be killed alone); `AsyncToolActor` serves many at once on its
event loop (Ray's async actor), its `max_concurrency` set by the agent.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import pickle
import queue
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import ray

from . import _wire
from ._worker import ok_message, raised_message

if TYPE_CHECKING:
    from ..tools import Tool, ToolContext

__all__ = ["AsyncToolActor", "Request", "SyncToolActor", "encode_request", "shared_var"]

# One call: (arguments, call_id, attempt, remaining seconds or None,
# idempotency key, [(var key, module, attribute, value), ...]). It travels
# pickled here into bytes: Ray passes bytes through as they are, where a tuple
# would take its slower path (about 40 µs more per call).
Request = tuple[Any, str, int, float | None, str, list[tuple[str, str, str, Any]]]


def encode_request(request: Request) -> bytes:
    """`request` as bytes (the agent's side); raises what pickling raises."""
    try:
        return pickle.dumps(request, protocol=5)
    except Exception:
        from ray import cloudpickle  # lambdas and the like among the values

        dumps: Any = cloudpickle.dumps  # untyped
        return bytes(dumps(request, protocol=5))


_MISSING = object()
_NO_DEFAULT = "toolbus:no-default"

# The ContextVars of shipped tools, one object per key in this process: the
# tool's pickle refers to them by key (`shared_var`), and each call sets the
# values it carries on the same objects.
_VARS: dict[str, contextvars.ContextVar[Any]] = {}


def shared_var(key: str, name: str, default: Any) -> contextvars.ContextVar[Any]:
    """The ContextVar `key` of this process (made on first use, with the
    agent's default): what a ContextVar in a shipped tool unpickles to."""
    var = _VARS.get(key)
    if var is None:
        var = (
            contextvars.ContextVar(name)
            if default == _NO_DEFAULT
            else contextvars.ContextVar(name, default=default)
        )
        var = _VARS.setdefault(key, var)
    return var


def _context(pairs: list[tuple[str, str, str, Any]]) -> contextvars.Context:
    """A fresh context with the shipped values set: on the tool's own variable
    (by key), and on the module attribute it came from when that module is
    loaded here by reference (an installed library reading its own variable)."""
    ctx = contextvars.Context()
    for key, module, attr, value in pairs:
        var = _VARS.get(key)
        if var is not None:
            ctx.run(var.set, value)
        loaded = sys.modules.get(module) if module else None
        other = getattr(loaded, attr, None) if loaded is not None else None
        if isinstance(other, contextvars.ContextVar) and other is not var:
            ctx.run(other.set, value)
    return ctx


def load_tool(payload: bytes) -> Tool:
    """The tool a payload of `_ray_shipping.ship_tool` stands for."""
    from ..tools import FunctionTool, Tool

    kind, *rest = pickle.loads(payload)
    if kind == "function":
        fn, name, kind_of = rest
        return FunctionTool(fn, name=name, type=kind_of)
    tool = rest[0]
    assert isinstance(tool, Tool)
    return tool


def _no_context() -> Any:
    from ..tools import ToolContext

    return ToolContext(call_id="", tool="")


# Handed to tools that take no context (they never see it).
_NO_CONTEXT = _no_context()


def _drop(item: bytes) -> None:
    return None  # `call`: the tool takes no context, so nothing reports progress


def _progress(message: str, fraction: float | None, data: dict[str, Any]) -> bytes:
    # What JSON cannot hold goes as its text, whole: the agent scrubs secrets
    # from it, which a cut-off text could defeat.
    msg = {"kind": "progress", "message": str(message), "fraction": fraction, "data": data}
    return _wire.body(msg, default=str)


def _log(level: str, message: str, logger: str | None, data: dict[str, Any]) -> bytes:
    # Logged by the agent, scrubbed with the call's secrets: never on the node.
    msg = {"kind": "log", "level": level, "message": str(message), "logger": logger}
    try:
        return _wire.body({**msg, "data": data}, default=str)
    except Exception:  # data JSON cannot hold (a cycle, a tuple key): sent without
        return _wire.body({**msg, "data": {}}, default=str)


def _ok(name: str, value: Any) -> bytes:
    try:
        message = ok_message(value)
    except Exception as e:  # as a local call: the tool's output cannot be used
        return _raised(e)
    try:
        return _wire.body(message)
    except Exception as e:
        return _raised(
            TypeError(f"the result of tool '{name}' cannot be sent back from its Ray actor: {e}")
        )


def _raised(error: BaseException) -> bytes:
    error.__traceback__ = None
    return _wire.body(raised_message(error), default=str)


class _Runner:
    """What both actors share: the tool, and how a call is started."""

    def __init__(self, payload: bytes, name: str) -> None:
        self.name = name
        self.tool: Tool | None = None
        # A tool that cannot be loaded here (a module the node lacks) is
        # reported by `ready`, not raised: the agent tells it apart from a crash.
        self.error: str | None = None
        try:
            self.tool = load_tool(payload)
        except BaseException as e:
            self.error = f"{type(e).__name__}: {e}"

    def info(self) -> tuple[int, str, str | None]:
        return os.getpid(), socket.gethostname(), self.error

    def start(self, req: Request, put: Callable[[bytes], None]) -> Any:
        """Parse and invoke: the tool's value, or its coroutine. `put`: where
        the call's progress and log messages go (to the agent, on a stream)."""
        from ..tools import ToolContext

        tool = self.tool
        if tool is None:
            raise RuntimeError(f"tool '{self.name}' could not be loaded: {self.error}")
        arguments, call_id, attempt, remaining, key, _ = req
        params = tool.parse(arguments)
        if not tool.wants_context:
            return tool.invoke(params, _NO_CONTEXT)
        # The agent's deadline, rebased on this node's clock.
        deadline = None if remaining is None else time.monotonic() + remaining
        ctx: ToolContext = ToolContext(
            call_id=call_id,
            tool=self.name,
            attempt=attempt,
            deadline=deadline,
            sink=lambda _, message, fraction, data: put(_progress(message, fraction, data)),
            idempotency_key=key,
            logs=lambda level, message, logger, data: put(_log(level, message, logger, data)),
        )
        return tool.invoke(params, ctx)


class SyncToolActor(_Runner):
    """One sync tool, one call at a time (`max_concurrency=1`)."""

    def __init__(self, payload: bytes, name: str) -> None:
        super().__init__(payload, name)
        self._helper: ThreadPoolExecutor | None = None

    def ready(self) -> tuple[int, str, str | None]:
        return self.info()

    def _run(self, req: Request, put: Callable[[bytes], None]) -> bytes:
        try:
            value = self.start(req, put)
            if inspect.iscoroutine(value):
                value = asyncio.run(value)
        except BaseException as e:  # the tool's own failure, SystemExit included
            return _raised(e)
        return _ok(self.name, value)

    def call(self, data: bytes) -> bytes:
        req: Request = pickle.loads(data)
        if req[5]:
            return _context(req[5]).run(self._run, req, _drop)
        return self._run(req, _drop)

    @ray.method(num_returns="streaming")  # type: ignore[call-arg,untyped-decorator,unused-ignore]
    def stream(self, data: bytes) -> Iterator[bytes]:
        req: Request = pickle.loads(data)
        # The tool runs on a helper thread so that this generator can yield its
        # progress while it runs; killing the actor stops both.
        items: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        done = threading.Event()

        def put(item: bytes) -> None:
            if not done.is_set():  # a thread the tool left behind: the call is over
                items.put(item)

        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="toolbus-tool")
        ctx = _context(req[5])
        future: Future[bytes] = self._helper.submit(ctx.run, self._run, req, put)

        def finished(_: Future[bytes]) -> None:
            done.set()
            items.put(None)

        future.add_done_callback(finished)
        while (item := items.get()) is not None:
            yield item
        yield future.result()


class AsyncToolActor(_Runner):
    """One async tool, many calls at once on the actor's event loop."""

    async def ready(self) -> tuple[int, str, str | None]:
        return self.info()

    async def _run(self, req: Request, put: Callable[[bytes], None]) -> bytes:
        try:
            value = self.start(req, put)
            if inspect.iscoroutine(value):
                value = await value
        except asyncio.CancelledError:
            # By ray.cancel, or the tool's own: the agent knows whether it asked.
            raise
        except BaseException as e:
            return _raised(e)
        return _ok(self.name, value)

    async def call(self, data: bytes) -> bytes:
        req: Request = pickle.loads(data)
        if req[5]:
            task = asyncio.get_running_loop().create_task(
                self._run(req, _drop), context=_context(req[5])
            )
            return await task
        return await self._run(req, _drop)

    @ray.method(num_returns="streaming")  # type: ignore[call-arg,untyped-decorator,unused-ignore]
    async def stream(self, data: bytes) -> AsyncIterator[bytes]:
        req: Request = pickle.loads(data)
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[bytes | None] = asyncio.Queue()
        here = threading.get_ident()

        def put(item: bytes) -> None:
            if threading.get_ident() == here:
                items.put_nowait(item)
            else:  # from a thread the tool started
                loop.call_soon_threadsafe(items.put_nowait, item)

        task = loop.create_task(self._run(req, put), context=_context(req[5]))
        task.add_done_callback(lambda _: items.put_nowait(None))
        try:
            while (item := await items.get()) is not None:
                yield item
            yield await task
        finally:
            task.cancel()  # cancelled (ray.cancel) while it ran: so is the tool
