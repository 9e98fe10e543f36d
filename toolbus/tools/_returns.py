"""What a function tool returns, described: its return annotation as a JSON schema.

Also the annotation resolving that `_function.py` shares for parameters.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, NotRequired, Required, Union

import typing_extensions
from pydantic import TypeAdapter

from ..models import Attachment, ToolOutput

__all__ = ["namespaces", "resolve_hint", "return_schema"]


def namespaces(fn: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The globals and the closure variables that `fn`'s annotations may name."""
    localns: dict[str, Any] = {}
    code = getattr(fn, "__code__", None)
    for name, cell in zip(
        code.co_freevars if code else (), getattr(fn, "__closure__", None) or (), strict=False
    ):
        try:
            localns[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return getattr(fn, "__globals__", {}), localns


def resolve_hint(value: Any, name: str, globalns: dict[str, Any], localns: dict[str, Any]) -> Any:
    """One annotation, resolved on its own (NameError when it names what cannot be found)."""
    shim = types.SimpleNamespace(__annotations__={name: value}, __globals__=globalns)
    return typing.get_type_hints(shim, localns=localns, include_extras=True)[name]


def return_schema(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The JSON schema of what `fn` returns, as toolbus outputs it; None when
    its return annotation says nothing pydantic can describe.

    None, never an error, for: no annotation, `Any` or `object`, a name that
    cannot be resolved (a class local to the defining function, under `from
    __future__ import annotations`), a `ToolOutput` (its content is untyped),
    and types pydantic has no JSON schema for. The schema is pydantic's
    serialization schema with field names, not aliases: toolbus turns a
    returned model into JSON with `model_dump(mode="json")`.
    """
    annotations = getattr(fn, "__annotations__", {})
    if "return" not in annotations:
        return None
    try:
        hint = resolve_hint(annotations["return"], "return", *namespaces(fn))
        if hint is Any or hint is object or _mentions(hint, (ToolOutput, Attachment)):
            return None
        schema: dict[str, Any] = TypeAdapter(_for_pydantic(hint, set())).json_schema(
            mode="serialization", by_alias=False
        )
    except Exception:  # NameError, PydanticSchemaGenerationError, ...: no schema
        return None
    return schema or None  # {} (a `type[X]`, say) says nothing


def _mentions(hint: Any, kinds: tuple[type, ...]) -> bool:
    """Whether `hint` is, or has among its type arguments, one of `kinds`."""
    if isinstance(hint, type) and issubclass(hint, kinds):
        return True
    return any(_mentions(a, kinds) for a in typing.get_args(hint))


def _for_pydantic(hint: Any, seen: set[Any]) -> Any:
    """`hint` with every `typing.TypedDict` made a `typing_extensions.TypedDict`.

    Pydantic refuses the standard library's TypedDict before Python 3.12, and
    `from typing import TypedDict` is what most code writes. A TypedDict that
    contains itself raises (the caller gives no schema).
    """
    if sys.version_info >= (3, 12):
        return hint
    if typing.is_typeddict(hint) and type(hint).__module__ == "typing":
        if hint in seen:
            raise TypeError(f"{hint.__name__} contains itself")
        seen.add(hint)
        fields: dict[str, Any] = {}
        for name, declared in typing.get_type_hints(hint, include_extras=True).items():
            # A field's own Required/NotRequired wins: with string annotations
            # (`from __future__ import annotations`) Python 3.11's
            # `__required_keys__` cannot see them.
            wrap: Any = typing.get_origin(declared)
            bare = declared
            if wrap in (Required, NotRequired):
                bare = typing.get_args(declared)[0]
            else:
                wrap = Required if name in hint.__required_keys__ else NotRequired
            fields[name] = wrap[_for_pydantic(bare, seen)]
        seen.discard(hint)
        functional: Any = typing_extensions.TypedDict  # its functional form, named at run time
        made: Any = functional(hint.__name__, fields)
        made.__doc__ = hint.__doc__
        return made
    args = typing.get_args(hint)
    if not args or typing.get_origin(hint) is typing.Literal:
        return hint
    if typing.get_origin(hint) is Annotated:
        return Annotated[(_for_pydantic(args[0], seen), *hint.__metadata__)]
    new = tuple(_for_pydantic(a, seen) for a in args)
    if new == args:
        return hint
    if typing.get_origin(hint) in (Union, types.UnionType):
        return Union[new]  # noqa: UP007 (a runtime union of a tuple of types)
    return typing.get_origin(hint)[new]
