"""How a tool reaches a worker process: by import reference, resolved there.

A function tool travels as `module:qualname` of its function and is imported
again in the worker (pickling the function itself fails: under a decorator its
module attribute is the tool, "not the same object"). A tool object that is a
module attribute travels the same way; any other `Tool` instance travels as a
pickle of an importable class. What the worker could never import is refused
when the tool is bound to the backend: tools defined inside a function
(`<locals>`), lambdas, and anything in `__main__` (a worker never runs the
agent's main script).
"""

from __future__ import annotations

import importlib
import pickle
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Shipped", "check_shippable", "resolve", "ship"]


@dataclass(frozen=True, slots=True)
class Shipped:
    """A tool as it travels: an import reference, or a pickle of the tool object."""

    module: str
    qualname: str = ""
    pickled: bytes = b""

    @property
    def label(self) -> str:
        return f"{self.module}:{self.qualname}" if self.qualname else f"{self.module} (pickled)"


def _lookup(module: str, qualname: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _reference(fn: Any, what: str) -> tuple[str, str]:
    """A function tool's import reference; ValueError saying why it has none."""
    bound = getattr(fn, "__self__", None)
    if bound is not None and not isinstance(bound, type | types.ModuleType):
        raise ValueError(
            f"{what} is a method bound to a {type(bound).__name__} object: a worker process "
            "can only import module-level definitions (wrap it in a module-level function)"
        )
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(qualname, str):
        kind = type(fn)
        raise ValueError(
            f"{what} is a {kind.__module__}.{kind.__qualname__} object, not a module-level "
            "function: a worker process cannot import it (wrap it in a module-level function)"
        )
    return _importable(getattr(fn, "__module__", None), qualname, what)


def _importable(module: str | None, qualname: str, what: str) -> tuple[str, str]:
    if not isinstance(module, str) or not module:
        raise ValueError(
            f"{what} names no module it is defined in: a worker process cannot import it"
        )
    if module == "__main__":
        raise ValueError(
            f"{what} is defined in __main__, which a worker process never imports: "
            "move it to a module"
        )
    if "<locals>" in qualname:
        raise ValueError(
            f"{what} is defined inside a function ({qualname}): a worker process can only "
            "import module-level definitions"
        )
    if "<lambda>" in qualname:
        raise ValueError(f"{what} is a lambda: a worker process cannot import it")
    return module, qualname


def check_shippable(tool: Tool) -> None:
    """What can be told when the tool is made: ValueError if no worker could
    ever import it. (Its module may still be importing, so the lookup itself
    waits for `ship`.)"""
    from ..tools import FunctionTool

    if isinstance(tool, FunctionTool):
        _reference(tool.fn, f"the function of tool {tool.name!r}")
    else:
        cls = type(tool)
        _importable(cls.__module__, cls.__qualname__, f"the class of tool {tool.name!r}")


def ship(tool: Tool) -> Shipped:
    """How `tool` travels to a worker; ValueError saying why it cannot."""
    from ..tools import FunctionTool  # the tools layer sits below the backends

    if isinstance(tool, FunctionTool):
        fn = tool.fn
        module, qualname = _reference(fn, f"the function of tool {tool.name!r}")
        try:
            found = _lookup(module, qualname)
        except Exception as e:
            raise ValueError(
                f"the function of tool {tool.name!r} cannot be imported as "
                f"{module}:{qualname} ({type(e).__name__}: {e})"
            ) from None
        if found is not tool and found is not fn and getattr(found, "fn", None) is not fn:
            raise ValueError(
                f"{module}:{qualname} is not the function of tool {tool.name!r}: a worker "
                "process would import something else"
            )
        return Shipped(module, qualname)
    cls = type(tool)
    _importable(cls.__module__, cls.__qualname__, f"the class of tool {tool.name!r}")
    try:
        return Shipped(cls.__module__, pickled=pickle.dumps(tool, pickle.HIGHEST_PROTOCOL))
    except Exception as e:
        raise ValueError(
            f"tool {tool.name!r} cannot be sent to a worker process: pickling it failed "
            f"({type(e).__name__}: {e})"
        ) from None


def resolve(shipped: Shipped) -> Tool:
    """In the worker: the tool `shipped` stands for."""
    from ..tools import FunctionTool, Tool

    if shipped.pickled:
        importlib.import_module(shipped.module)
        tool = pickle.loads(shipped.pickled)
        assert isinstance(tool, Tool)
        return tool
    found = _lookup(shipped.module, shipped.qualname)
    if isinstance(found, Tool):
        return found
    return FunctionTool(found, backend="thread")
