"""Injected parameters: values the application supplies and the model never sets.

    @registry.tool
    def search(query: str, api_key: Annotated[str, Injected]) -> list[str]: ...

    executor = Executor(registry, inject={"api_key": lambda call: vault.get("search")})

An injected parameter is left out of the schema every export shows the model
(OpenAI, Anthropic, MCP); a model that sends it anyway is refused on the raw
arguments; its value comes from `Executor(inject=...)` or a pre-call hook; and
it is masked in everything toolbus publishes, whatever its name. The pipeline
applies these rules (`pipeline/_admission.py`); this module only knows
which parameters are injected and what the model is shown.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from typing import Any, final

from pydantic import AliasChoices, AliasPath, BaseModel
from pydantic.fields import FieldInfo

__all__ = [
    "Injected",
    "argument_names",
    "injected_argument_names",
    "injected_fields",
    "injected_parameters",
    "is_injected_marker",
    "schema_name",
    "without_properties",
]


@final
class Injected:
    """Marks a parameter the model never sets: `Annotated[str, Injected]`.

    Its value comes from `Executor(inject={"name": fn})` (or
    `{"tool.name": fn}` for one tool), where `fn(call)` may be sync or async
    and runs with the caller's contextvars, or from a pre-call hook. It is left
    out of every exported schema, a model-supplied value is rejected, and the
    value is masked in events, logs and results whatever the parameter's name.
    """

    def __init__(self) -> None:
        raise TypeError("Injected is a marker: write Annotated[str, Injected]")


def is_injected_marker(value: object) -> bool:
    """True for `Injected` as `Annotated` metadata."""
    return value is Injected


def injected_fields(model: type[BaseModel]) -> list[str]:
    """The argument names (aliases where set) of `model`'s fields marked `Injected`:
    the names its JSON schema gives them."""
    return [
        schema_name(name, field)
        for name, field in model.model_fields.items()
        if any(is_injected_marker(m) for m in field.metadata)
    ]


def injected_parameters(fn: Any) -> tuple[str, ...]:
    """The parameters of function `fn` annotated `Annotated[..., Injected]`
    (none if its annotations cannot be resolved)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        return ()
    return tuple(
        name
        for name, annotation in hints.items()
        if name != "return"
        and typing.get_origin(annotation) is typing.Annotated
        and any(is_injected_marker(m) for m in annotation.__metadata__)
    )


def injected_argument_names(model: type[BaseModel]) -> list[str]:
    """Every argument name that reaches one of `model`'s fields marked `Injected`
    (see `argument_names`): the model must set none of them."""
    out: list[str] = []
    for name, field in model.model_fields.items():
        if any(is_injected_marker(m) for m in field.metadata):
            out.extend(argument_names(name, field))
    return out


def schema_name(name: str, field: FieldInfo) -> str:
    """The name pydantic's JSON schema (and validation by alias) gives field `name`."""
    alias = field.validation_alias
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices) and alias.choices and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return field.alias or name


def argument_names(name: str, field: FieldInfo) -> tuple[str, ...]:
    """Every argument name pydantic may read field `name` from: its validation
    aliases (an `AliasPath`'s first key), its alias and its Python name (read
    with `populate_by_name`; counted whatever the model's config says)."""
    out: list[str] = []
    alias = field.validation_alias
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias] if alias else []
    for choice in choices:
        if isinstance(choice, str):
            out.append(choice)
        elif isinstance(choice, AliasPath) and choice.path and isinstance(choice.path[0], str):
            out.append(choice.path[0])
    if field.alias:
        out.append(field.alias)
    out.append(name)
    return tuple(dict.fromkeys(out))


def without_properties(schema: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """A copy of an object schema without the properties `names` (nor their
    `required` entries); `schema` itself is not changed."""
    drop = set(names)
    out = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        out["properties"] = {k: v for k, v in properties.items() if k not in drop}
    required = schema.get("required")
    if isinstance(required, list):
        kept = [r for r in required if r not in drop]
        if kept:
            out["required"] = kept
        else:
            out.pop("required")
    for key in ("$defs", "definitions"):
        defs = out.get(key)
        if isinstance(defs, Mapping):
            # Definitions only the dropped properties used would still describe them.
            used = _used_definitions(out, key, defs)
            if used:
                out[key] = {k: v for k, v in defs.items() if k in used}
            else:
                out.pop(key)
    return out


def _used_definitions(schema: Mapping[str, Any], key: str, defs: Mapping[str, Any]) -> set[str]:
    prefix = f"#/{key}/"
    used: set[str] = set()
    todo = [{k: v for k, v in schema.items() if k != key}]
    while todo:
        for ref in _refs(todo.pop()):
            name = ref[len(prefix) :].split("/", 1)[0] if ref.startswith(prefix) else None
            if name is not None and name in defs and name not in used:
                used.add(name)
                todo.append(defs[name])
    return used


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
