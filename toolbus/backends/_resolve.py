"""Which backend runs a tool: names, defaults and the pairings that cannot work."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._loop import LoopBackend
from ._process import ProcessBackend, check_process_tool
from ._protocol import Backend
from ._thread import ThreadBackend

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["BUILTIN_NAMES", "BackendSpec", "Backends", "check_spec", "check_tool_backend"]

BackendSpec = str | Backend | None

BUILTIN_NAMES = frozenset({"auto", "thread", "loop", "process"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def check_spec(spec: Any, *, owner: str) -> BackendSpec:
    """`spec` if it can name or be a backend; ValueError/TypeError saying why not."""
    if spec is None or isinstance(spec, Backend):
        return spec
    if isinstance(spec, str):
        if not _NAME.match(spec):
            raise ValueError(f"{owner}: backend name {spec!r} is not a valid name")
        return spec
    raise TypeError(
        f"{owner}: backend must be a name or a toolbus.backends.Backend, not {type(spec).__name__}"
    )


def check_tool_backend(tool: Tool) -> None:
    """The checks a tool's own `backend=` allows before any executor binds names."""
    spec = check_spec(tool.backend, owner=f"tool {tool.name!r}")
    if spec == "loop" and not tool.is_async:
        raise ValueError(
            f"tool {tool.name!r} is sync: backend='loop' would block the event loop "
            "(use 'thread' or 'auto')"
        )
    if isinstance(spec, Backend):
        spec.check(tool)
    if spec == "process":
        check_process_tool(tool)
    if isinstance(spec, str | Backend):
        _check_limits(tool, spec)


def _check_limits(tool: Tool, backend: BackendSpec) -> None:
    """Limits only a process backend enforces: refused where they would be ignored."""
    if tool.applies_own_limits or (tool.memory_limit_mb is None and tool.cpu_limit_s is None):
        return
    if isinstance(backend, str):
        if backend in ("process",) or backend not in BUILTIN_NAMES:
            return  # a name the executor binds: checked again when it does
    elif getattr(backend, "enforces_limits", False):
        return
    which = "memory_limit_mb" if tool.memory_limit_mb is not None else "cpu_limit_s"
    name = backend if isinstance(backend, str) else getattr(backend, "name", "?")
    raise ValueError(
        f"tool {tool.name!r} sets {which}, which backend {name!r} cannot enforce: "
        "use backend='process'"
    )


class Backends:
    """One executor's backends: the built-in thread and loop backends, the
    names it binds, and its default."""

    def __init__(
        self,
        default: Any,
        named: Mapping[str, Backend] | None,
        *,
        idle_timeout: float = 60.0,
        thread_idle_timeout: float | None = None,
    ) -> None:
        self.default = check_spec(default if default is not None else "auto", owner="Executor")
        # The thread backend's, and the process backend's when the executor
        # makes it (`thread_idle_timeout`: its old name, still accepted).
        if thread_idle_timeout is not None:
            idle_timeout = thread_idle_timeout
        self.idle_timeout = idle_timeout
        self.thread = ThreadBackend(idle_timeout=idle_timeout)
        self.loop = LoopBackend()
        self._process: ProcessBackend | None = None
        self.named: dict[str, Backend] = {}
        if named is not None and not isinstance(named, Mapping):
            raise TypeError(
                "Executor(backends=...) must map backend names to backends, "
                f"got {type(named).__name__}"
            )
        for name, backend in (named or {}).items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"Executor(backends=...): {name!r} is not a valid backend name")
            if name == "process" and isinstance(backend, ProcessBackend):
                self._process = backend  # the one "process" names: configured
                continue
            if name in BUILTIN_NAMES:
                raise ValueError(f"Executor(backends=...): {name!r} is a built-in backend name")
            if not isinstance(backend, Backend):
                raise TypeError(
                    f"Executor(backends=...): {name!r} must be a toolbus.backends.Backend, "
                    f"not {type(backend).__name__}"
                )
            self.named[name] = backend
        if isinstance(self.default, str):
            self._named_or_builtin(self.default, None)  # unknown names fail here

    def for_tool(self, tool: Tool) -> Backend:
        """The backend that runs `tool`; ValueError (clear, naming both) if none can."""
        spec = tool.backend if tool.backend is not None else self.default
        backend = self._named_or_builtin(spec, tool) if isinstance(spec, str) else spec
        assert backend is not None
        try:
            backend.check(tool)
            _check_limits(tool, backend)
        except ValueError as e:
            raise ValueError(
                f"tool {tool.name!r} cannot run on backend {backend.name!r}: {e}"
            ) from None
        return backend

    def _named_or_builtin(self, name: str, tool: Tool | None) -> Backend:
        if name == "auto":
            if tool is None:
                return self.thread
            return self.loop if tool.is_async else self.thread
        if name == "thread":
            return self.thread
        if name == "loop":
            return self.loop
        if name == "process":
            return self.process
        if name in self.named:
            return self.named[name]
        known = sorted({*BUILTIN_NAMES, *self.named})
        what = f"tool {tool.name!r}" if tool is not None else "Executor(backend=...)"
        raise ValueError(f"{what}: unknown backend {name!r}; known: {', '.join(known)}")

    @property
    def process(self) -> ProcessBackend:
        """The executor's own process backend (made when a tool first names it)."""
        if self._process is None:
            self._process = ProcessBackend(idle_timeout=self.idle_timeout)
        return self._process

    def all(self) -> list[Backend]:
        extra = [self._process] if self._process is not None else []
        return [self.thread, self.loop, *extra, *self.named.values()]
