"""What every provider format shares.

- reading SDK objects and their plain-dict JSON alike (`plain`, `as_dict`);
- the text a model reads for a result (`result_text`);
- the tools to export (`tools_of`);
- JSON-schema rewriting for OpenAI's strict mode (`strict_schema`) and its
  inverse for arguments (`without_strict_nulls`).

Nothing here imports a provider SDK.

One piece, some 450 lines: what every format's readers and writers share (call ids,
arguments that must never raise, results' text, strict schemas), one
dependency for each format module rather than several it would all import.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from .. import _json
from ..formatting import DEFAULT_MAX_LENGTH, NO_OUTPUT, format_result_for_context
from ..models import ToolResult
from ..tools import Tool, ToolRegistry
from ..tools._offer import StepContext, enabled
from ..tools._schemas import CUSTOM_INPUT

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "NO_OUTPUT",
    "StrictSchemaError",
    "ToolSource",
    "as_dict",
    "custom_arguments",
    "plain",
    "result_text",
    "strict_schema",
    "tools_of",
    "without_strict_nulls",
]


ToolSource = ToolRegistry | Iterable[Tool]
"""Where exported tools come from: a registry, or any iterable of tools."""


# -- reading SDK objects and dicts ------------------------------------------------


def plain(obj: Any) -> Any:
    """`obj` as plain JSON-like data: mappings become dicts, lists and tuples
    lists, and SDK objects (pydantic models) dicts of the fields they were
    given, under their wire names, without SDK-only fields (`exclude=True`,
    `__api_exclude__`, such as `parsed_arguments`) at any depth: the form the
    SDK itself sends an object back in. Other values are made JSON-able.

    Walked with a stack of its own, not recursion: a model's arguments may
    nest deeper than Python's recursion limit allows, and it is the executor
    that rejects them, not the reader that raises. A container that holds
    itself raises `ValueError`.
    """
    root: list[Any] = [None]
    # (value, where its copy goes, under which key or index); an `_EXIT`
    # entry marks the end of a container's contents, for spotting cycles, and
    # holds the container so that its id is not reused before then.
    todo: list[tuple[Any, Any, Any]] = [(obj, root, 0)]
    inside: set[int] = set()
    while todo:
        value, into, key = todo.pop()
        if type(value) in _SCALARS:  # (most values: as to_jsonable_python gives them)
            into[key] = value
        elif value is _EXIT:
            inside.discard(key)
        elif isinstance(value, Mapping | list | tuple | BaseModel):
            if id(value) in inside:
                raise ValueError("circular reference: a container holds itself")
            copied, items = _copy_of(value)
            into[key] = copied
            inside.add(id(value))
            todo.append((_EXIT, value, id(value)))
            todo.extend((v, copied, k) for k, v in reversed(items))
        else:
            into[key] = to_jsonable_python(value)
    return root[0]


_EXIT = object()
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _copy_of(container: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    """An empty copy of a container for `plain` to fill, and what goes where in it."""
    if isinstance(container, list | tuple):
        return [None] * len(container), list(enumerate(container))
    if isinstance(container, Mapping):
        items = [(str(k), v) for k, v in container.items()]
    else:
        items = _model_fields(container)
    return dict.fromkeys(k for k, _ in items), items  # (keys in order; the last of a text wins)


def _model_fields(model: BaseModel) -> list[tuple[str, Any]]:
    excluded = getattr(model, "__api_exclude__", None)
    skip = set(excluded) if isinstance(excluded, set | frozenset) else set()
    out: list[tuple[str, Any]] = []
    for name, field in type(model).model_fields.items():
        if name in model.model_fields_set and name not in skip and not field.exclude:
            out.append((field.serialization_alias or field.alias or name, getattr(model, name)))
    out.extend((model.model_extra or {}).items())
    return out


def as_dict(obj: Any, what: str) -> dict[str, Any]:
    """`obj` (an SDK object or its JSON as a mapping) as a plain dict.

    Raises `TypeError` naming `what` when `obj` is neither.
    """
    data = plain(obj)
    if not isinstance(data, dict):
        raise TypeError(
            f"expected {what} (an SDK object or its JSON as a dict), got {type(obj).__name__}"
        )
    return data


# -- results as text --------------------------------------------------------------


def call_arguments(raw: Any) -> dict[str, Any] | str:
    """A call's arguments as the executor takes them: a dict or text stays as it
    is; anything else, a null among it, is handed on as JSON text, so the
    executor rejects it (`INVALID_ARGUMENTS`) instead of the tool running with
    its defaults. A reader calls this only for arguments the model gave: a call
    without the field has none."""
    if isinstance(raw, dict | str):
        return raw
    return json_text(raw)


def json_text(value: Any) -> str:
    """`value` as JSON text (integers of any size exact), never raising: a
    lone surrogate, which orjson refuses, as its escape; a structure nested
    past what can be written as a string saying so. For what the model sent,
    echoed or handed to the executor, which rejects what is off."""
    try:
        return _json.dumps(value, default=str).decode()
    except TypeError:
        pass
    try:
        return json.dumps(value, default=str, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return json.dumps("(not written: nested too deep)")


def custom_arguments(raw: Any) -> dict[str, Any] | str:
    """A free-text tool's input as the model sent it: its text, or anything
    else (a null among it) under `"input"`, which the executor refuses
    (`INVALID_ARGUMENTS`, naming what it got) instead of running the tool on
    text the model never wrote."""
    return raw if isinstance(raw, str) else {CUSTOM_INPUT: raw}


def fallback_call_id(index: int, name: str, raw: Any) -> str:
    """An id for a call that came without one: the same for every read of the
    same message (so the answer matches the echoed call), distinct across calls.
    `raw` is the call's arguments as `plain` gives them (no cycles)."""
    try:
        data = _json.dumps([index, name, raw], default=str)
    except TypeError:
        # Arguments JSON cannot hold (nesting past orjson's limit, a lone
        # surrogate) are the executor's to reject: the reader must not raise.
        data = _fingerprint([index, name, raw])
    digest = hashlib.sha1(data, usedforsecurity=False).hexdigest()
    return f"call_toolbus_{digest[:16]}"


def _fingerprint(value: Any) -> bytes:
    """`value`'s content as bytes, walked with a stack of its own (any depth)."""
    parts: list[bytes] = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, Mapping):
            parts.append(b"{%d:" % len(v))
            todo.extend(y for pair in reversed(list(v.items())) for y in reversed(pair))
        elif isinstance(v, list | tuple):
            parts.append(b"[%d:" % len(v))
            todo.extend(reversed(v))
        else:
            parts.append(repr(v).encode("utf-8", "surrogatepass") + b"\0")
    return b"".join(parts)


def result_text(result: ToolResult, max_length: int = DEFAULT_MAX_LENGTH) -> str:
    """The text a model reads for `result`; never empty:
    `format_result_for_context(result, max_length, include_metadata=False)`.

    A success is its output (strings as they are, anything else as JSON, cut
    after `max_length` characters with a note saying how much was left out,
    attachments listed); a success without output is `NO_OUTPUT`. Anything
    else reads `Error: <what went wrong> (<ERROR_CODE>)`, which tells the
    model what to fix. The executor has already scrubbed secrets from outputs
    and error texts; no metadata is included.
    """
    return format_result_for_context(result, max_length=max_length, include_metadata=False)


def tools_of(source: ToolSource, step: StepContext | None = None) -> list[Tool]:
    """The tools of a registry enabled at `step` (`Tool.is_enabled`; None: the
    current step), or of any iterable of tools as given (`Executor.offered`'s), in order."""
    if isinstance(source, ToolRegistry):
        tools = [t for t in source.list() if enabled(t, step)]
    else:
        tools = list(source)
    for t in tools:
        if not isinstance(t, Tool):
            raise TypeError(f"expected toolbus tools, got {type(t).__name__}")
    return tools


# -- OpenAI strict mode -------------------------------------------------------------


class StrictSchemaError(ValueError):
    """A schema that OpenAI's strict mode cannot express without changing its meaning."""


_NULL = {"type": "null"}


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `schema` that OpenAI accepts with `strict: true` and that means
    the same to the model; `schema` itself is not changed.

    At every depth (properties, items, prefixItems, anyOf, allOf, `$defs`,
    `definitions`): each object lists all its properties as required and gets
    `additionalProperties: false`; a property that was optional becomes
    nullable (null standing for "not given"), with a non-null default moved
    into its description; `default` and `discriminator` are removed, `oneOf`
    becomes `anyOf`, a lone `allOf` is merged, and a `$ref` with sibling
    keywords is inlined. Use `without_strict_nulls` on the arguments the model
    sends back, so that the nulls reach no tool.

    Raises `StrictSchemaError` for objects with free-form keys
    (`additionalProperties` true or a schema, `patternProperties`) and for
    `$ref`s that are not local JSON pointers.
    """
    root = copy.deepcopy(dict(schema))
    return _strict(root, root, "")


def _strict(
    node: Mapping[str, Any],
    root: Mapping[str, Any],
    path: str,
    inside: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """`node` made strict; `inside`: the `$ref`s whose schema this is part of."""
    out = _without(node, "default", "discriminator")
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        out = _without({**all_of[0], **_without(out, "allOf")}, "default", "discriminator")
    ref = out.get("$ref")
    if isinstance(ref, str) and len(out) > 1:
        if ref in inside:
            # A schema that refers to itself with a sibling (a description):
            # inlined, it would go on without end; strict mode takes no
            # sibling beside a $ref, but takes one beside an anyOf.
            out = {"anyOf": [{"$ref": ref}], **_without(out, "$ref")}
        else:
            target = _without(_resolve(ref, root, path), "default", "discriminator")
            out = {**target, **_without(out, "$ref")}
            inside |= {ref}
    if "oneOf" in out:
        out["anyOf"] = [*out.get("anyOf", ()), *out.pop("oneOf")]
    for key in ("$defs", "definitions"):
        if isinstance(out.get(key), Mapping):
            out[key] = {
                n: _strict(s, root, f"{path}/{key}/{n}", inside | {f"#{path}/{key}/{n}"})
                for n, s in out[key].items()
            }
    for key in ("anyOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [
                _strict(s, root, f"{path}/{key}/{i}", inside) for i, s in enumerate(out[key])
            ]
    items = out.get("items")
    if isinstance(items, Mapping):
        out["items"] = _strict(items, root, f"{path}/items", inside)
    elif isinstance(items, list):
        out["items"] = [_strict(s, root, f"{path}/items/{i}", inside) for i, s in enumerate(items)]
    if _is_object(out):
        _close_object(out, root, path, inside)
    return out


def _close_object(
    out: dict[str, Any], root: Mapping[str, Any], path: str, inside: frozenset[str]
) -> None:
    extra = out.get("additionalProperties")
    if (extra is not None and extra is not False) or "patternProperties" in out:
        raise StrictSchemaError(
            f"{path or '/'}: an object with free-form keys cannot be made strict"
            " (OpenAI's strict mode requires additionalProperties: false)"
        )
    properties = out.get("properties") or {}
    required = set(out.get("required") or ())
    closed: dict[str, Any] = {}
    for name, sub in properties.items():
        strict = _strict(sub, root, f"{path}/properties/{name}", inside)
        if name not in required:
            strict = _optional(strict, sub, root)
        closed[name] = strict
    out["properties"] = closed
    out["required"] = list(closed)
    out["additionalProperties"] = False


def _optional(strict: dict[str, Any], original: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """A strict property schema that also accepts null, which stands for "not given"."""
    if _accepts_null(strict, root):
        result = strict
    elif isinstance(strict.get("type"), str) and not ({"enum", "const", "$ref"} & strict.keys()):
        result = {**strict, "type": [strict["type"], "null"]}
    elif isinstance(strict.get("anyOf"), list) and strict.keys() <= {"anyOf", "description"}:
        result = {**strict, "anyOf": [*strict["anyOf"], _NULL]}  # (a $ref to itself, say)
    else:
        result = {"anyOf": [strict, _NULL]}
        for key in ("title", "description"):
            if key in strict:
                result[key] = strict[key]
    default = original.get("default")
    if default is not None:
        note = f"(default: {_json.dumps(default, default=str).decode()})"
        result["description"] = f"{result.get('description', '')} {note}".strip()
    return result


def _without(node: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k not in keys}


def _is_object(node: Mapping[str, Any]) -> bool:
    t = node.get("type")
    return t == "object" or (isinstance(t, list) and "object" in t) or "properties" in node


def _accepts_null(node: Any, root: Mapping[str, Any]) -> bool:
    if not isinstance(node, Mapping):
        return False
    node = _resolve_if_ref(node, root, "")
    if not node.keys() - {"title", "description"}:
        return True  # an empty schema accepts anything
    t = node.get("type")
    if t == "null" or (isinstance(t, list) and "null" in t):
        return True
    if None in (node.get("enum") or ()) or ("const" in node and node["const"] is None):
        return True
    branches = [*(node.get("anyOf") or ()), *(node.get("oneOf") or ())]
    return any(_accepts_null(b, root) for b in branches)


def _resolve(ref: str, root: Mapping[str, Any], path: str) -> dict[str, Any]:
    if not ref.startswith("#"):
        raise StrictSchemaError(f"{path or '/'}: only local $refs can be made strict, got {ref!r}")
    node: Any = root
    for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else ():
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or key not in node:
            raise StrictSchemaError(f"{path or '/'}: $ref {ref!r} points nowhere")
        node = node[key]
    if not isinstance(node, Mapping):
        raise StrictSchemaError(f"{path or '/'}: $ref {ref!r} is not a schema")
    return dict(node)


def _resolve_if_ref(node: Mapping[str, Any], root: Mapping[str, Any], path: str) -> dict[str, Any]:
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return dict(node)
    try:
        target = _resolve(ref, root, path)
    except StrictSchemaError:
        return dict(node)
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def without_strict_nulls(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """`value` without the nulls that strict mode makes a model send for
    optional fields, judged against the tool's own (non-strict) `schema`.

    A null under a property that `schema` does not require and that does not
    accept null is removed, at any depth (nested objects, array items, local
    `$ref`s, the branch of an anyOf/oneOf that has the value's keys). Other
    values are kept; containers are copied, `value` is not changed. `root` is
    the schema that `$ref`s point into (usually `schema` itself).
    """
    node = _resolve_if_ref(schema, root, "")
    if isinstance(value, dict):
        branch = _object_branch(node, value, root)
        if branch is None:
            return value
        properties = branch.get("properties") or {}
        required = set(branch.get("required") or ())
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = properties.get(key)
            if not isinstance(sub, Mapping):
                out[key] = item
            elif item is None and key not in required and not _accepts_null(sub, root):
                continue
            else:
                out[key] = without_strict_nulls(item, sub, root)
        return out
    if isinstance(value, list):
        items = _items_schema(node, root)
        if items is None:
            return value
        return [without_strict_nulls(v, items, root) for v in value]
    return value


def _branches(node: Mapping[str, Any], root: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = [dict(node)]
    for key in ("anyOf", "oneOf", "allOf"):
        for b in node.get(key) or ():
            if isinstance(b, Mapping):
                found.append(_resolve_if_ref(b, root, ""))
    return found


def _object_branch(
    node: Mapping[str, Any], value: Mapping[str, Any], root: Mapping[str, Any]
) -> dict[str, Any] | None:
    objects = [b for b in _branches(node, root) if isinstance(b.get("properties"), Mapping)]
    for b in objects:
        if value.keys() <= b["properties"].keys():
            return b
    return objects[0] if objects else None


def _items_schema(node: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any] | None:
    for b in _branches(node, root):
        if isinstance(b.get("items"), Mapping):
            return dict(b["items"])
    return None
