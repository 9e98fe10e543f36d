"""Which backend runs a tool: names, defaults and the pairings that cannot work."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._loop import LoopBackend
from ._protocol import Backend
from ._thread import ThreadBackend

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["BUILTIN_NAMES", "BackendSpec", "Backends", "check_spec", "check_tool_backend"]

BackendSpec = str | Backend | None

# "process" is reserved for the process backend.
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


class Backends:
    """One executor's backends: the built-in thread and loop backends, the
    names it binds, and its default."""

    def __init__(self, default: Any, named: Mapping[str, Backend] | None) -> None:
        self.default = check_spec(default if default is not None else "auto", owner="Executor")
        self.thread = ThreadBackend()
        self.loop = LoopBackend()
        self.named: dict[str, Backend] = {}
        for name, backend in (named or {}).items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"Executor(backends=...): {name!r} is not a valid backend name")
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
        if name in self.named:
            return self.named[name]
        known = sorted({"auto", "thread", "loop", *self.named})
        what = f"tool {tool.name!r}" if tool is not None else "Executor(backend=...)"
        raise ValueError(f"{what}: unknown backend {name!r}; known: {', '.join(known)}")

    def all(self) -> list[Backend]:
        return [self.thread, self.loop, *self.named.values()]
