"""Inside a worker process: where limits are set and a shipped tool is run.

A worker serves one tool, one call at a time, over its socket to the parent:
("call", ...) in; ("progress", ...) zero or more times, then ("ok", value),
("raised", error) or ("crashed", why) out. It is a session leader (`setsid`),
so the parent kills it and everything it started with one `killpg`.

Limits: `RLIMIT_AS` for memory, set once; `RLIMIT_CPU` per call, its soft limit
raised before each call to the CPU used so far plus the per-call budget (the
limit counts the process's whole life). A tool that runs out of memory gets a
MemoryError: the worker reports a crash naming the limit and exits, since a
process that hit its address-space limit may be in any state. Going over the
CPU limit is SIGXCPU, which kills the worker; the parent names the limit.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import math
import os
import resource
import socket
import threading
import time
import traceback
from typing import Any

from . import _wire
from ._shipping import Shipped, resolve

__all__ = ["CallRequest", "serve"]

# The exit code of a worker that went over its memory limit.
EXIT_MEMORY = 86


class CallRequest:
    """One call as the worker gets it (a plain class: it only has to pickle)."""

    __slots__ = ("arguments", "attempt", "call_id", "context", "cpu_limit_s", "key", "remaining",
                 "tool", "tool_name")  # fmt: skip

    def __init__(
        self,
        tool: Shipped,
        tool_name: str,
        arguments: Any,
        *,
        call_id: str,
        attempt: int,
        remaining: float | None,
        key: str,
        context: list[tuple[str, str, Any]],
        cpu_limit_s: float | None,
    ) -> None:
        self.tool = tool
        self.tool_name = tool_name
        self.arguments = arguments
        self.call_id = call_id
        self.attempt = attempt
        self.remaining = remaining
        self.key = key
        self.context = context
        self.cpu_limit_s = cpu_limit_s

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for k, v in zip(self.__slots__, state, strict=True):
            setattr(self, k, v)


def _cpu_used() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _set_cpu_budget(seconds: float | None) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if seconds is None:
        soft = hard
    else:
        # Whole seconds: the kernel counts RLIMIT_CPU so. The budget is at
        # least `seconds` and less than a second more.
        soft = math.ceil(_cpu_used() + seconds)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _context(pairs: list[tuple[str, str, Any]]) -> contextvars.Context:
    """A context with the shipped ContextVars set (each by `module:attribute`)."""
    ctx = contextvars.Context()
    for module, name, value in pairs:
        var = getattr(importlib.import_module(module), name)
        ctx.run(var.set, value)
    return ctx


class _Progress:
    """The worker's progress channel: frames to the parent, from any thread."""

    def __init__(self, sock: socket.socket, lock: threading.Lock) -> None:
        self.sock = sock
        self.lock = lock

    def __call__(
        self, ctx: Any, message: str, fraction: float | None, data: dict[str, Any]
    ) -> None:
        try:
            frame = _wire.encode(("progress", str(message), fraction, data))
        except Exception:
            frame = _wire.encode(("progress", str(message), fraction, {}))
        with self.lock:
            self.sock.sendall(frame)


def _run_call(req: CallRequest, tools: dict[Shipped, Any], progress: _Progress) -> Any:
    from ..tools import ToolContext

    tool = tools.get(req.tool)
    if tool is None:
        tool = tools[req.tool] = resolve(req.tool)
    params = tool.parse(req.arguments)
    deadline = None if req.remaining is None else time.monotonic() + req.remaining
    ctx = ToolContext(
        call_id=req.call_id,
        tool=req.tool_name,
        attempt=req.attempt,
        deadline=deadline,
        sink=progress,
        idempotency_key=req.key,
    )
    value = tool.invoke(params, ctx)
    if inspect.iscoroutine(value):
        value = asyncio.run(value)
    return value


def _reply_error(error: BaseException) -> Any:
    error.__traceback__ = None
    try:
        _wire.encode(error)
        return ("raised", error)
    except Exception:
        # Unpicklable (or its class cannot be imported there): its text travels.
        return ("raised", RuntimeError(f"{type(error).__name__}: {error}"))


def serve(sock: socket.socket, memory_limit_mb: int | None) -> None:
    """The worker's life: serve calls until the parent goes away. Never returns."""
    os.setsid()
    code = 0
    try:
        if memory_limit_mb is not None:
            limit = memory_limit_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        tools: dict[Shipped, Any] = {}
        lock = threading.Lock()
        progress = _Progress(sock, lock)
        while True:
            try:
                req: CallRequest = _wire.recv(sock)
            except EOFError:
                break
            try:
                _set_cpu_budget(req.cpu_limit_s)
                value = _context(req.context).run(_run_call, req, tools, progress)
                try:
                    frame = _wire.encode(("ok", value))
                except Exception as e:
                    frame = _wire.encode(
                        _reply_error(
                            TypeError(
                                f"the result of tool '{req.tool_name}' cannot be sent back from "
                                f"its worker process: {type(e).__name__}: {e}"
                            )
                        )
                    )
            except MemoryError:
                why = (
                    f"the tool went over its memory limit (memory_limit_mb={memory_limit_mb})"
                    if memory_limit_mb is not None
                    else "the tool ran out of memory"
                )
                frame = _wire.encode(("crashed", why))
                code = EXIT_MEMORY
            except BaseException as e:  # the tool's own failure, SystemExit included
                frame = _wire.encode(_reply_error(e))
            with lock:
                sock.sendall(frame)
            if code:
                break
    except BaseException:
        traceback.print_exc()
        code = code or 1
    finally:
        os._exit(code)
