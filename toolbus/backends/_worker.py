"""Inside a worker process: where limits are set and a shipped tool is run.

A worker serves one tool, one call at a time, over its socket to the agent: a
`CallRequest` (a pickle) in; JSON frames out, each tagged with the request's
`seq`: "progress" and "log" (a `ctx.log`, written by the agent with the call's
secrets scrubbed) zero or more times, then "ok" (the normalised output),
"raised" (the exception's type, bases and text) or "crashed" (why). Tagging
lets the agent drop what a thread left behind by an earlier call still sends.

It is a session leader (`setsid`, done before its zygote reports it forked), so
the agent kills it and everything it started with one `killpg`, and its zygote,
as it reaps it, what moved to a group of its own (`_process_group.kill_session`);
it dies with its zygote (`PR_SET_PDEATHSIG`).

Limits: `RLIMIT_AS` for memory, set once; `RLIMIT_CPU` per call, its soft limit
raised before each call to the CPU used so far plus the per-call budget (the
limit counts the process's whole life). Running out of memory anywhere (the
request, the tool, the reply) is a crash naming the limit, and the worker
exits: a process that hit its address-space limit may be in any state. Going
over the CPU limit is SIGXCPU, which kills the worker; the agent names it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import importlib
import inspect
import math
import mmap
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from . import _wire
from ._shipping import Shipped, resolve

__all__ = ["EXIT_MEMORY", "CallRequest", "ok_message", "raised_message", "serve"]

T = TypeVar("T")

# The exit code of a worker that went over its memory limit.
EXIT_MEMORY = 86


class CallRequest:
    """One call as the worker gets it (a plain class: it only has to pickle)."""

    __slots__ = ("arguments", "attempt", "call_id", "context", "cpu_limit_s", "key", "remaining",
                 "seq", "tool", "tool_id", "tool_name")  # fmt: skip

    def __init__(
        self,
        tool: Shipped | None,
        tool_id: int,
        tool_name: str,
        arguments: Any,
        *,
        seq: int,
        call_id: str,
        attempt: int,
        remaining: float | None,
        key: str,
        context: list[tuple[str, str, Any]],
        cpu_limit_s: float | None,
    ) -> None:
        self.tool = tool  # sent once per worker; later requests name it by `tool_id`
        self.tool_id = tool_id
        self.tool_name = tool_name
        self.arguments = arguments
        self.seq = seq
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


class _Channel:
    """The worker's side of the socket: whole frames, from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()

    def send(self, frame: bytes) -> None:
        with self.lock:
            self.sock.sendall(frame)

    def progress_sink(self, seq: int) -> Any:
        def sink(ctx: Any, message: str, fraction: float | None, data: dict[str, Any]) -> None:
            msg = {"seq": seq, "kind": "progress", "message": str(message), "fraction": fraction}
            # What JSON cannot hold goes as its text, whole: the agent scrubs
            # secrets from it, which a cut-off text could defeat.
            self.send(_wire.reply({**msg, "data": data}, default=str))

        return sink

    def log_sink(self, seq: int) -> Any:
        def logs(level: str, message: str, logger: str | None, data: dict[str, Any]) -> None:
            # Logged by the agent, scrubbed with the call's secrets: never here.
            msg = {"seq": seq, "kind": "log", "level": level, "message": str(message)}
            try:
                frame = _wire.reply({**msg, "logger": logger, "data": data}, default=str)
            except Exception:  # data JSON cannot hold (a cycle, a tuple key): sent without
                frame = _wire.reply({**msg, "logger": logger, "data": {}}, default=str)
            self.send(frame)

        return logs


# How long the tasks an async call left, cancelled after its reply, have to
# finish (a `finally`) before the worker reads its next request.
_LEFTOVER_GRACE = 0.1


class _Loop:
    """The worker's event loop for async tools, kept across calls (as the
    agent's is for tools on "auto"). A call's value goes back as soon as its
    coroutine returns (`asyncio.run` would wait for what it left running);
    then `tidy` cancels the tasks it left. One still running after
    `_LEFTOVER_GRACE`, or one raising SystemExit, would run inside the next
    call: the worker retires instead. Threads it started run on."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ran = False  # since the last `tidy`

    def run(self, coroutine: Any) -> Any:
        loop = self.loop
        if loop is None or loop.is_closed():
            loop = self.loop = asyncio.new_event_loop()
        self.ran = True
        return loop.run_until_complete(coroutine)

    def tidy(self) -> bool:
        """After a reply: cancel the tasks left running, give them a moment;
        whether the loop is clean again (False: retire the worker)."""
        loop = self.loop
        if loop is None or not self.ran:
            return True
        self.ran = False
        try:
            left = asyncio.all_tasks(loop)
            if not left:
                return True
            for task in left:
                task.cancel()
            _, pending = loop.run_until_complete(asyncio.wait(left, timeout=_LEFTOVER_GRACE))
        except MemoryError:
            raise
        except BaseException:  # a leftover raising SystemExit, say
            return False
        return not pending


def _run_call(req: CallRequest, tools: dict[int, Any], channel: _Channel, aio: _Loop) -> Any:
    from ..tools import ToolContext

    tool = tools.get(req.tool_id)
    if tool is None:
        if req.tool is None:
            raise RuntimeError(f"tool '{req.tool_name}' was never sent to this worker")
        tool = tools[req.tool_id] = resolve(req.tool)
    params = tool.parse(req.arguments)
    deadline = None if req.remaining is None else time.monotonic() + req.remaining
    ctx = ToolContext(
        call_id=req.call_id,
        tool=req.tool_name,
        attempt=req.attempt,
        deadline=deadline,
        sink=channel.progress_sink(req.seq),
        idempotency_key=req.key,
        logs=channel.log_sink(req.seq),
    )
    value = tool.invoke(params, ctx)
    if inspect.iscoroutine(value):
        value = aio.run(value)
    return value


def ok_message(value: Any) -> dict[str, Any]:
    """A tool's value as it travels back: normalised as any tool's result is."""
    from ..tools import normalize_output

    output, attachments, metadata = normalize_output(value)
    return {
        "kind": "ok",
        "output": output,
        "attachments": [a.model_dump() for a in attachments],
        "metadata": metadata,
    }


def raised_message(error: BaseException) -> dict[str, Any]:
    """What the agent needs to rebuild the failure (`_remote.remote_error`):
    never the object itself. Encode it with `default=str`."""
    from ..tools import ToolError, ToolFailure, error_text

    # Each part read apart: the exception's own code (a property, `__str__`,
    # `__getattribute__`) may raise anything, SystemExit too, and describing
    # it must never end the worker.
    cls = type(error)
    name = _part(lambda: str(cls.__name__), "Exception")
    bases = _part(
        lambda: [c.__name__ for c in cls.__mro__ if getattr(builtins, c.__name__, None) is c],
        ["Exception"],
    )
    retryable = _part(lambda: getattr(error, "retryable", None), None)
    message: dict[str, Any] = {
        "kind": "raised",
        "type": name,
        "bases": bases,
        "text": _part(lambda: error_text(error), name),
        "tool_error": _part(lambda: isinstance(error, ToolError), False),
        "retryable": retryable if isinstance(retryable, bool) else None,
    }
    if _part(lambda: isinstance(error, ToolFailure), False):
        tf: Any = error
        failure = _part(
            lambda: {"code": str(tf.code), "metadata": tf.metadata, "retry": tf.retry}, None
        )
        if failure is not None:
            message["failure"] = failure
    return message


def _part(read: Callable[[], T], otherwise: T) -> T:
    """A part of an exception's description; `otherwise` if reading it raises."""
    try:
        return read()
    except MemoryError:
        raise
    except BaseException:
        return otherwise


def _ok(seq: int, value: Any) -> bytes:
    return _wire.reply({"seq": seq, **ok_message(value)})


def _raised(seq: int, error: BaseException) -> bytes:
    try:
        return _wire.reply({"seq": seq, **raised_message(error)}, default=str)
    except MemoryError:
        raise
    except BaseException:  # what `default=str` met raised: the description without it
        message = raised_message(error)
        message.pop("failure", None)
        return _wire.reply({"seq": seq, **message, "text": message["type"]})


def _memory_message(memory_limit_mb: int | None) -> str:
    if memory_limit_mb is not None:
        return f"it went over its memory limit (memory_limit_mb={memory_limit_mb})"
    return "it ran out of memory"


def _apply_memory_limit(memory_limit_mb: int | None) -> None:
    if memory_limit_mb is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = memory_limit_mb * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)  # never above what this process may set
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class _Read:
    """How many requests this worker has read whole, kept where the agent can
    read it after the worker is gone (`WorkerProcess.reached`, a memfd its
    zygote made): a worker that died before it read its call's request never
    ran it, and the call goes to another worker. Only that: the tool itself
    could write here, but a tool can repeat its own effects anyway."""

    def __init__(self, fd: int | None) -> None:
        self.count = 0
        self.page: mmap.mmap | None = None
        if fd is not None:
            try:
                self.page = mmap.mmap(fd, 8)
            except (OSError, ValueError):
                pass  # the agent then cannot tell: a death is a crash, as it was
            finally:
                os.close(fd)

    def __call__(self) -> None:
        self.count += 1
        if self.page is not None:
            struct.pack_into("=Q", self.page, 0, self.count)


def serve(
    sock: socket.socket, memory_limit_mb: int | None, module: str | None, mark: int | None = None
) -> None:
    """The worker's life: import `module` if its zygote could not (it starts
    threads), say it is ready, then serve calls until the agent goes away;
    each request read whole is counted in `mark` (see `_Read`). Never returns."""
    me = os.getpid()
    code = 0
    read = _Read(mark)
    aio = _Loop()
    channel = _Channel(sock)
    tools: dict[int, Any] = {}
    seq = 0
    cpu_limited = False
    try:
        _apply_memory_limit(memory_limit_mb)
        error = None
        if module is not None:
            try:
                importlib.import_module(module)
            except BaseException as e:
                error = f"{type(e).__name__}: {e}"
        channel.send(_wire.reply({"seq": 0, "kind": "ready", "error": error}, default=str))
        while True:
            frame: bytes | None = None
            try:
                req: CallRequest = _wire.recv(sock, read)
                seq = req.seq
                if req.cpu_limit_s is not None or cpu_limited:
                    _set_cpu_budget(req.cpu_limit_s)
                    cpu_limited = req.cpu_limit_s is not None
                value = _context(req.context).run(_run_call, req, tools, channel, aio)
                if os.getpid() != me:
                    os._exit(0)  # a fork the tool made returned here: never reply twice
                try:
                    frame = _ok(seq, value)
                except MemoryError:
                    raise
                except Exception as e:
                    frame = _raised(
                        seq,
                        TypeError(
                            f"the result of tool '{req.tool_name}' cannot be sent back from "
                            f"its worker process: {e}"
                        ),
                    )
            except EOFError:
                break
            except MemoryError:
                frame = _wire.reply(
                    {"seq": seq, "kind": "crashed", "why": _memory_message(memory_limit_mb)}
                )
                code = EXIT_MEMORY
            except BaseException as e:  # the tool's own failure, SystemExit included
                if os.getpid() != me:
                    os._exit(0)
                frame = _raised(seq, e)
            channel.send(frame)
            if code or not aio.tidy():
                break  # a worker whose loop a call left unclean retires (`_Loop`)
    except MemoryError:
        code = EXIT_MEMORY
    except BaseException:
        code = code or 1
    finally:
        os._exit(code)
