"""Tools made from plain functions by `@tool`.

The name comes from the function, the description from its docstring, the
parameter schema from its type hints through pydantic, each parameter's
description from the docstring's `Args:` (Google), `Parameters` (NumPy) or
`:param:` (Sphinx) entries unless its annotation gives one
(`Annotated[..., Field(description=...)]`). A parameter annotated
`ToolContext` is filled in by toolbus and left out of the schema.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, Unpack, overload

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from ._context import ToolContext
from ._docstring import parse_docstring
from ._injected import is_injected_marker
from ._names import check_tool_name
from ._returns import namespaces, resolve_hint, return_schema
from ._tool import STANDARD_INVOKES, Tool, check_output_schema
from ._tool_options import ToolOptions

__all__ = ["FunctionTool", "ToolOptions", "tool"]

AnyFunction = Callable[..., Any]


class _ParamsBase(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionTool(Tool):
    """A `Tool` whose `run` is a plain (sync or async) function.

    Calling the tool object calls the function itself, so decorated functions
    stay usable as functions.
    """

    def __init__(self, fn: AnyFunction, **options: Unpack[ToolOptions]) -> None:
        if not callable(fn):
            raise TypeError(f"a tool is made of a function, not of {type(fn).__name__}")
        if isinstance(fn, type) and issubclass(fn, Tool):
            # Else a tool of its constructor: a call would make a tool, not run one.
            raise TypeError(f"{fn.__name__} is a Tool class: register an instance, {fn.__name__}()")
        given = options.get("name")
        if not isinstance(getattr(fn, "__name__", None), str) and not given:
            # (A callable object, a functools.partial: no name of its own.)
            raise TypeError(f"a tool of {type(fn).__name__} needs name=: it has no __name__")
        self.fn = fn
        self._output_schema: dict[str, Any] | None = None
        self._output_schema_known = False  # worked out on first read
        unknown = sorted(set(options) - set(ToolOptions.__annotations__))
        if unknown:
            raise TypeError(f"tool {_label(fn)!r}: unknown option {unknown[0]!r}")
        name = options.pop("name", None)
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"tool {_label(fn)!r}: name must be a non-empty string, got {name!r}")
        description = options.pop("description", None)
        # Checked before the schema is built: pydantic names the model after it.
        hint = "" if name else " (it is the function's name: pass name=)"
        self.name = check_tool_name(name or fn.__name__, hint=hint)
        doc = parse_docstring(inspect.getdoc(fn))
        self.description = description if description is not None else doc.summary
        self._param_docs = doc.params
        # The rest are the Tool's own attributes, checked by _setup.
        for key, value in options.items():
            setattr(self, key, value)
        self._ctx_param: str | None = None
        self._param_names: tuple[str, ...] = ()
        self._positional_only: tuple[str, ...] = ()
        self._params_model = self._build_params()
        self._setup()

    def _build_params(self) -> type[BaseModel] | None:
        sig = inspect.signature(self.fn)
        hints = _parameter_hints(self.fn)
        fields: dict[str, Any] = {}
        names: list[str] = []
        positional: list[str] = []
        for p in sig.parameters.values():
            if p.kind is p.POSITIONAL_ONLY:
                positional.append(p.name)
            ann = hints.get(p.name, Any)
            if _is_tool_context(ann):
                self._ctx_param = p.name
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(
                    f"tool {self.name!r}: *args/**kwargs cannot be described to a model"
                )
            default = ... if p.default is inspect.Parameter.empty else p.default
            described = self._param_docs.get(p.name)
            if described and not _has_description(ann, default) and not _is_injected(ann):
                ann = Annotated[ann, Field(description=described)]
            fields[p.name] = (ann, default)
            names.append(p.name)
        self._param_names = tuple(names)
        # Positional-only parameters (they come first) must not be passed by name.
        self._positional_only = tuple(positional)
        if self.type == "custom":
            if any(_is_injected(hints.get(n, Any)) for n in names):
                raise TypeError(f"custom tool {self.name!r}: its text parameter cannot be Injected")
            if len(names) != 1:
                raise TypeError(f"custom tool {self.name!r} must take exactly one text parameter")
            return None
        model: type[BaseModel] = create_model(
            f"{_camel(self.name)}Params", __base__=_ParamsBase, **fields
        )
        return model

    def _setup(self) -> None:
        # Params is a ClassVar on Tool; function tools each have their own model.
        self.Params = self._params_model  # type: ignore[misc]
        super()._setup()

    # Its output schema comes from the return annotation, worked out when first
    # asked for (an MCP server lists it): most tools are never served, and
    # pydantic's schema costs about as much as making the tool.
    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema of what the function returns, from its return
        annotation (None when pydantic cannot describe it); settable."""
        if not self._output_schema_known:
            self._output_schema = return_schema(self.fn)
            self._output_schema_known = True
        return self._output_schema

    @output_schema.setter
    def output_schema(self, schema: dict[str, Any] | None) -> None:
        check_output_schema(schema, f"tool {self.name!r}")
        self._output_schema = schema
        self._output_schema_known = True

    def _check_output_schema(self, owner: str) -> None:
        pass  # not read at set-up, which would work it out; the setter checks what is set

    def _target(self) -> AnyFunction:
        return self.fn

    def _target_wants_context(self) -> bool:
        return self._ctx_param is not None

    def invoke(self, params: Any, ctx: ToolContext) -> Any:
        if self.type == "custom":
            kwargs: dict[str, Any] = {self._param_names[0]: params}
        elif type(params) is self.Params:
            # Its fields are its __dict__ (extra="forbid"): one copy in C, not a
            # comprehension's Python call on every call.
            kwargs = params.__dict__.copy()
        else:
            kwargs = {n: getattr(params, n) for n in self._param_names}
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        if self._positional_only:
            args = [kwargs.pop(n) for n in self._positional_only]
            return self.fn(*args, **kwargs)
        return self.fn(**kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


STANDARD_INVOKES.add(FunctionTool.invoke)


def _parameter_hints(fn: AnyFunction) -> dict[str, Any]:
    """Resolved type hints of the parameters only.

    Each is resolved on its own: the return annotation, under `from __future__
    import annotations`, often names a class local to the defining function,
    and must not stop the parameters from resolving; the function's closure
    variables are offered to resolve them too.
    """
    annotations = dict(getattr(fn, "__annotations__", {}))
    annotations.pop("return", None)
    globalns, localns = namespaces(fn)
    hints: dict[str, Any] = {}
    for name, value in annotations.items():
        try:
            hints[name] = resolve_hint(value, name, globalns, localns)
        except NameError as e:
            # A ToolContext imported inside the defining function cannot be
            # found by name later; it is recognised by its name instead.
            if isinstance(value, str) and value.rsplit(".", 1)[-1] == "ToolContext":
                hints[name] = ToolContext
                continue
            raise TypeError(
                f"cannot resolve the type of parameter {name!r} of {fn.__qualname__}: {e}"
            ) from None
    return hints


def _is_tool_context(annotation: Any) -> bool:
    """`ToolContext`, also as `ToolContext | None` or `Annotated[ToolContext, ...]`."""
    if annotation is ToolContext:
        return True
    return any(_is_tool_context(a) for a in typing.get_args(annotation) if a is not type(None))


def _is_injected(annotation: Any) -> bool:
    """`Annotated[..., Injected]`."""
    return typing.get_origin(annotation) is typing.Annotated and any(
        is_injected_marker(m) for m in annotation.__metadata__
    )


def _has_description(annotation: Any, default: Any) -> bool:
    """Whether the parameter's own `Field(description=...)` describes it, in its
    annotation (`Annotated[..., Field(...)]`) or as its default: that wins over
    the docstring."""
    infos = [default] if isinstance(default, FieldInfo) else []
    if typing.get_origin(annotation) is typing.Annotated:
        infos += [m for m in annotation.__metadata__ if isinstance(m, FieldInfo)]
    return any(info.description is not None for info in infos)


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_"))


@overload
def tool(fn: AnyFunction, /) -> FunctionTool: ...


@overload
def tool(**options: Unpack[ToolOptions]) -> Callable[[AnyFunction], FunctionTool]: ...


def tool(
    fn: AnyFunction | None = None, /, **options: Unpack[ToolOptions]
) -> FunctionTool | Callable[[AnyFunction], FunctionTool]:
    """Make a tool from a function: `@tool` or `@tool(read_only=True, timeout=5)`.

    The options (`ToolOptions`) are the `Tool` attributes of the same names."""

    def make(f: AnyFunction) -> FunctionTool:
        return FunctionTool(f, **options)

    return make(fn) if fn is not None else make


def _label(fn: Any) -> str:
    """What an error names a tool's function by."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__
