"""How a tool reaches a Ray actor: by value, with cloudpickle.

A cluster's nodes need not have the agent's code: the tool's own top-level
package (or module, or `__main__`) is pickled by value, so its function, the
helpers and classes it uses, and closures and lambdas all travel. What it
imports from installed packages (site-packages) travels by reference and must
be installed on the nodes, as must toolbus itself.

A ContextVar cannot be pickled. One the tool refers to travels as a reference
(`_ray_actor.shared_var`): one variable per key in each actor process, with the
agent's default; the values of the ones listed in `RayBackend(context_vars=...)`
travel with each call (`context_pairs`) and are set on that same variable.
"""

from __future__ import annotations

import contextvars
import io
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import cloudpickle as _cloudpickle

from ._ray_actor import _NO_DEFAULT, shared_var
from ._remote_base import var_home

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Var", "context_pairs", "ship_tool", "shipped_vars"]

_MISSING = object()
cloudpickle: Any = _cloudpickle  # Ray's own copy: its API is untyped

# A listed ContextVar as the agent ships it: (the variable, its key, the module
# and attribute it is found at, or "" when it is no module's attribute).
Var = tuple[contextvars.ContextVar[Any], str, str, str]


def _key(var: contextvars.ContextVar[Any]) -> str:
    # Unique in this agent, and the same in the tool's pickle and in each call.
    return f"{var.name}#{id(var):x}"


def _default(var: contextvars.ContextVar[Any]) -> Any:
    try:
        return contextvars.Context().run(var.get)  # in an empty context: the default
    except LookupError:
        return _NO_DEFAULT


def shipped_vars(variables: Iterable[Any]) -> list[Var]:
    """`context_vars=` checked: ContextVar objects, each with its key."""
    out: list[Var] = []
    for var in variables:
        module, attr = var_home(var, "RayBackend") or ("", "")
        out.append((var, _key(var), module, attr))
    return out


def context_pairs(
    variables: list[Var], context: contextvars.Context
) -> list[tuple[str, str, str, Any]]:
    """The values a call carries: each listed variable set in the caller's context."""
    return [
        (key, module, attr, value)
        for var, key, module, attr in variables
        if (value := context.get(var, _MISSING)) is not _MISSING
    ]


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is contextvars.ContextVar:
            return shared_var, (_key(obj), obj.name, _default(obj))
        return super().reducer_override(obj)


def _by_value(module_name: str) -> Any:
    """The package to pickle by value for a tool defined in `module_name`, or
    None: `__main__` (by value anyway), toolbus and installed packages (the
    nodes import them)."""
    top = module_name.partition(".")[0]
    if not top or top in ("__main__", "toolbus") or top in sys.builtin_module_names:
        return None
    package = sys.modules.get(top)
    path = str(getattr(package, "__file__", None) or "")
    if package is None or not path or "site-packages" in path or "dist-packages" in path:
        return None
    if _in_stdlib(path):
        return None  # the standard library
    return package


def _in_stdlib(path: str) -> bool:
    # By the stdlib's own directories, path component by component: an app under
    # a system Python's prefix (/usr/src/app, prefix /usr) is not the stdlib.
    file = Path(path).resolve()
    return any(file.is_relative_to(Path(d).resolve()) for d in _STDLIB_DIRS)


_STDLIB_DIRS = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")}


def ship_tool(tool: Tool) -> bytes:
    """`tool` as the payload a `_ray_actor` loads; ValueError saying why not."""
    from ..tools import FunctionTool

    what: tuple[Any, ...]
    if isinstance(tool, FunctionTool):
        # The function, not the tool object: the actor rebuilds the tool around it.
        what = ("function", tool.fn, tool.name, tool.type)
        module = getattr(tool.fn, "__module__", None) or ""
    else:
        what = ("tool", tool)
        module = type(tool).__module__
    package = _by_value(module)
    registered = package is not None and package.__name__ in (
        cloudpickle.list_registry_pickle_by_value()
    )
    if package is not None and not registered:
        cloudpickle.register_pickle_by_value(package)
    try:
        buffer = io.BytesIO()
        _Pickler(buffer, protocol=5).dump(what)
        return buffer.getvalue()
    except Exception as e:
        raise ValueError(
            f"tool {tool.name!r} cannot be sent to Ray: pickling it failed "
            f"({type(e).__name__}: {e})"
        ) from None
    finally:
        if package is not None and not registered:
            cloudpickle.unregister_pickle_by_value(package)
