"""A tool's schemas and arguments, checked without echoing a value.

What the `Tool` base class uses to parse the model's JSON arguments and to
word a validation failure (never quoting the value: an argument may be a
secret), and to check a tool's `parameters` when it is made and its
`output_schema` whenever it is set: every `$ref` resolved within the schema
and its depth bounded, so that one pointing nowhere or elsewhere, or a schema
too deep for jsonschema's recursion, fails where it is configured, naming the
tool, not at every call; and a free-text tool's input given as an object.

One piece, some 430 lines: parsing arguments, checking schemas and wording their
failures share the rules (depth, `$ref`s, what is quoted), kept together.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jsonschema
import orjson
from pydantic import ValidationError

from .. import _json
from .._errors import ArgumentError

__all__ = [
    "CUSTOM_INPUT",
    "MAX_RECURSIVE_DEPTH",
    "MAX_SCHEMA_DEPTH",
    "TOO_DEEP",
    "ParametersCheck",
    "ToolSchemaError",
    "arguments_problem",
    "check_nesting",
    "check_output_schema",
    "format_validation_error",
    "free_text_input",
    "nests_deeper",
    "parameters_validator",
    "parse_json_arguments",
]


def format_validation_error(tool: str, error: ValidationError) -> str:
    """Readable, input-free text for a pydantic error: values are never echoed,
    because an argument may be a secret."""
    parts = []
    for e in error.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "arguments"
        msg = e["msg"]
        # Some messages quote the value they rejected (a union's tag, for one).
        # Only quoted inputs are hidden, and never a value the rule itself
        # names (a limit, an expected tag): the model needs those to fix its call.
        ctx = e.get("ctx") or {}
        rule_values = {str(v) for k, v in ctx.items() if k not in _INPUT_CTX_KEYS}
        for value in _leaves(e.get("input")):
            if value and value not in rule_values:
                msg = msg.replace(f"'{value}'", "'<value>'").replace(f'"{value}"', '"<value>"')
        parts.append(f"{loc}: {msg}")
    return f"Invalid arguments for '{tool}': " + "; ".join(parts)


# Keys of a pydantic error's ctx that hold the rejected input, not the rule.
_INPUT_CTX_KEYS = frozenset({"tag"})


def _leaves(value: Any) -> list[str]:
    """The text of every scalar in a (possibly nested) input value."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _leaves(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _leaves(v)]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return [str(value)]
    return []


class ToolSchemaError(jsonschema.SchemaError, ValueError):
    """A tool's `parameters` or `output_schema` that is no usable JSON schema.

    A ValueError, as every bad option of a tool is; and a `jsonschema.SchemaError`,
    which an invalid `parameters` raised before it named the tool.
    """


MAX_SCHEMA_DEPTH = 128
"""The most levels of objects and arrays a tool's `parameters` or
`output_schema` may nest. jsonschema checks a schema, and values against it,
by recursion, several Python frames a level: far deeper, it runs out of
Python's stack (as one this deep may, checked in a deep stack or nesting
`not` in `not`: refused then as too deep to check, naming the tool)."""

MAX_RECURSIVE_DEPTH = 64
"""The most levels of objects and arrays arguments may nest for a tool whose
`parameters` refer to themselves (a `$ref` to an enclosing schema): what the
schema's depth bounds for any other tool, this one bounds, so that checking
them stays within Python's stack (254 levels, the rule for any arguments,
would not)."""


class ParametersCheck(NamedTuple):
    """What `parameters_validator` makes of a tool's `parameters`."""

    validator: jsonschema.protocols.Validator
    nesting: int | None
    """The most levels arguments may nest (`MAX_RECURSIVE_DEPTH`) for a
    schema that refers to itself; None for any other (the schema bounds it)."""


def check_output_schema(schema: Any, owner: str) -> None:
    """TypeError or ValueError, naming `owner`, unless `schema` is None or a valid JSON schema."""
    if schema is not None:
        _checked(schema, owner, "output_schema")


def parameters_validator(schema: Any, owner: str) -> ParametersCheck:
    """The validator of a tool's `parameters`; TypeError or ValueError naming
    `owner` unless it is a valid JSON schema that an object of arguments can
    meet (toolbus always validates an object; a schema of a string, say, would
    reject every call)."""
    cls, recursive = _checked(schema, owner, "parameters")
    kind = schema.get("type", "object")
    if kind != "object":
        # A list of types, ["object", "null"] say, is valid JSON Schema, but no
        # MCP client or model provider takes it for a tool's parameters (an MCP
        # inputSchema's type is "object"): the tool could not be served.
        raise ToolSchemaError(
            f"{owner}: parameters must describe an object (the arguments are a JSON "
            f'object): its "type" must be "object" or absent, not {kind!r}'
        )
    return ParametersCheck(cls(schema), MAX_RECURSIVE_DEPTH if recursive else None)


def _checked(
    schema: Any, owner: str, field: str
) -> tuple[type[jsonschema.protocols.Validator], bool]:
    """The validator class for `schema`, checked to be a valid JSON schema
    whose `$ref`s resolve within it, and whether it refers to itself."""
    if not isinstance(schema, dict):
        raise TypeError(
            f"{owner}: {field} must be a JSON schema (a dict), got {type(schema).__name__}"
        )
    if nests_deeper(schema, MAX_SCHEMA_DEPTH):
        raise ToolSchemaError(
            f"{owner}: {field} nests more than {MAX_SCHEMA_DEPTH} levels of objects and "
            "arrays, too deep to check values against (put repeated parts under "
            '"$defs" and refer to them with "$ref")'
        )
    cls: type[jsonschema.protocols.Validator] = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
        # check_schema does not follow "$ref"s: one that points nowhere would
        # fail every call (or every output's check) instead.
        recursive = _references(schema, cls, owner, field)
    except ToolSchemaError:
        raise
    except jsonschema.SchemaError as e:
        at = "/".join(str(p) for p in e.path)
        raise ToolSchemaError(
            f"{owner}: {field} is not a valid JSON schema: {e.message}"
            + (f" (at /{at})" if at else "")
        ) from None
    except RecursionError:  # (made in a deep stack: its checks ran out of it)
        raise ToolSchemaError(f"{owner}: {field} nests too deeply to be checked") from None
    return cls, recursive


def _references(
    schema: dict[str, Any], cls: type[jsonschema.protocols.Validator], owner: str, field: str
) -> bool:
    """Whether `schema` refers to itself; `ToolSchemaError` for a `$ref` that
    points nowhere in it, or to another document (never fetched: what it
    points to is not known here, and fetching it when a call is checked
    would be a request to wherever the schema says).

    Walked as jsonschema reads it: by keyword (`properties`' values are
    schemas, its keys names, and a `const` or `default` holds data), each
    `$id` setting the base its `$ref`s resolve against, and a `$ref`'s target
    walked too (it is a schema wherever it is).
    """
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]
    from referencing import Resource
    from referencing.exceptions import Unresolvable

    spec = _specification(cls.META_SCHEMA.get("$schema"))
    root = Resource.from_contents(schema, default_specification=spec)
    # (a schema's own $schema or $ref may name a metaschema: known, not fetched)
    todo: list[tuple[Any, Any, str]] = [(REGISTRY.resolver_with_root(root), root, "")]
    refs: list[tuple[Any, str, str, int]] = []
    edges: dict[int, list[int]] = {}
    recursive = False
    while todo or refs:
        if not todo:  # the tree first: its paths are the ones errors name
            resolver, ref, where, at = refs.pop()
            try:
                resolved = resolver.lookup(ref)
            except Unresolvable as e:
                raise ToolSchemaError(_unresolved(owner, field, ref, where, e)) from None
            edges[at].append(id(resolved.contents))
            target = Resource.from_contents(resolved.contents, default_specification=spec)
            todo.append((resolved.resolver, target, ref))
            continue
        resolver, resource, where = todo.pop()
        node = resource.contents
        if not isinstance(node, dict) or id(node) in edges:
            continue
        resolver = resolver.in_subresource(resource)
        children = edges[id(node)] = []
        reference = node.get("$ref")
        if isinstance(reference, str):
            refs.append((resolver, reference, where, id(node)))
        if "$dynamicRef" in node or "$recursiveRef" in node:
            recursive = True  # resolved by the run's scope: taken to recur
        subresources = list(resource.subresources())
        paths = _paths(node, {id(r.contents) for r in subresources})
        for sub in subresources:
            children.append(id(sub.contents))
            todo.append((resolver, sub, where + paths.get(id(sub.contents), "")))
    return recursive or _has_cycle(edges)


def _paths(node: dict[str, Any], wanted: set[int]) -> dict[int, str]:
    """Where in `node` (a JSON pointer from it) each subschema of `wanted` is."""
    found: dict[int, str] = {}
    for key, value in node.items():
        if id(value) in wanted:
            found[id(value)] = "/" + _escaped(key)
        elif isinstance(value, dict | list):
            pairs = value.items() if isinstance(value, dict) else enumerate(value)
            for name, sub in pairs:
                if id(sub) in wanted:
                    found[id(sub)] = f"/{_escaped(key)}/{_escaped(name)}"
    return found


def _escaped(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _unresolved(owner: str, field: str, ref: str, where: str, error: Exception) -> str:
    from referencing.exceptions import InvalidAnchor, NoSuchAnchor, PointerToNowhere

    at = f" (at {where or '/'})" if not where.startswith("#") else f" (in {where})"
    if isinstance(error, PointerToNowhere | NoSuchAnchor | InvalidAnchor):
        return f"{owner}: {field} has a $ref {ref!r}{at} that points nowhere in it"
    return (
        f"{owner}: {field} has a $ref {ref!r}{at} to another document, which toolbus "
        'does not fetch: put what it points to under "$defs" and refer to it as '
        '"#/$defs/..."'
    )


def _has_cycle(edges: dict[int, list[int]]) -> bool:
    """Whether the graph of subschemas and `$ref`s has a cycle (the tree alone has none)."""
    state: dict[int, bool] = {}  # False: on the current path; True: done
    for start, first in edges.items():
        if start in state:
            continue
        stack = [(start, iter(first))]
        state[start] = False
        while stack:
            node, following = stack[-1]
            step = next(following, None)
            if step is None:
                state[node] = True
                stack.pop()
            elif step not in state:
                state[step] = False
                stack.append((step, iter(edges.get(step, ()))))
            elif state[step] is False:
                return True
    return False


def _specification(uri: Any) -> Any:
    from referencing.jsonschema import DRAFT202012, specification_with

    return specification_with(uri, default=DRAFT202012) if isinstance(uri, str) else DRAFT202012


def nests_deeper(value: Any, levels: int) -> bool:
    """Whether `value` nests more than `levels` levels of objects and arrays
    (itself the first); walked without recursion, stopping at the first too deep."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if level > levels:
            return True
        inner = item.values() if isinstance(item, dict) else item
        todo.extend((v, level + 1) for v in inner if isinstance(v, dict | list | tuple))
    return False


TOO_DEEP = f"Arguments nest too deeply (more than {_json.MAX_DEPTH} levels of objects and arrays)"
"""Why arguments are refused that nest deeper than JSON is written (`MAX_DEPTH`)."""

# Text shorter than this cannot nest past `MAX_DEPTH`: each level opens and closes.
_DEEP_ENOUGH = 2 * (_json.MAX_DEPTH + 1)


def parse_json_arguments(text: str) -> dict[str, Any]:
    """The model's raw JSON arguments as a dict; `ArgumentError` when they are
    not, or when they nest deeper than `MAX_DEPTH` levels (as arguments given
    as a dict are refused: orjson reads 1,024 levels, but writes 254)."""
    if not text.strip():
        return {}
    try:
        value = _json.loads(text)
    except _json.JSONDecodeError as e:
        if e.msg.startswith("depth limit"):  # orjson's, past 1,024 levels
            raise ArgumentError(TOO_DEEP) from None
        raise ArgumentError(f"Arguments are not valid JSON ({e.msg} at position {e.pos})") from None
    except RecursionError:  # the stdlib's, rereading long integers ~1,000 levels deep
        raise ArgumentError(TOO_DEEP) from None
    if not isinstance(value, dict):
        raise ArgumentError(f"Arguments must be a JSON object, got {type(value).__name__}")
    # Counted only in text long enough to nest that deep, and written (the
    # limit a dict meets) only where it has that many brackets: usual
    # arguments pay one comparison.
    if len(text) >= _DEEP_ENOUGH and text.count("[") + text.count("{") > _json.MAX_DEPTH:
        check_nesting(value)
    return value


def check_nesting(value: dict[str, Any]) -> None:
    """`ArgumentError` (`TOO_DEEP`) for arguments that nest past `MAX_DEPTH`
    levels: what an executor refuses a dict for, measuring it (by writing it,
    as orjson counts), and the same arguments as text, once parsed."""
    try:
        _json.dumps(value)
    except TypeError as e:
        if "Recursion limit" in str(e):
            raise ArgumentError(TOO_DEEP) from None


def arguments_problem(
    validator: jsonschema.protocols.Validator, arguments: Any, nesting: int | None
) -> str | None:
    """Why `arguments` fail a tool's `parameters` (`validator`), at most five
    of the reasons, each where and which rule, never a value; None if they fit.
    `nesting`: the most levels they may nest (`ParametersCheck.nesting`)."""
    if nesting is not None and nests_deeper(arguments, nesting):
        return (
            f"Arguments nest too deeply for this tool's schema, which refers to itself "
            f"(more than {nesting} levels of objects and arrays)"
        )
    try:
        errors = sorted(validator.iter_errors(arguments), key=str)
    except RecursionError:  # (checked in a deep stack: what is left of it was too little)
        return "Arguments nest too deeply to be checked against this tool's schema"
    if not errors:
        return None
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.absolute_path) or "arguments"
        parts.append(f"{loc}: {_schema_message(err)}")
    return "; ".join(parts)


CUSTOM_INPUT = "input"
"""The one key of a free-text tool's input given as an object (as Anthropic
and MCP clients are offered it): `{"input": <text>}`."""


def free_text_input(name: str, arguments: dict[str, Any]) -> str:
    """The text of a free-text tool's input given as an object: `{"input":
    <text>}` and nothing else; `ArgumentError` naming what is off (never the
    text the model did not write: a null, a number, the object as JSON)."""
    text = arguments.get(CUSTOM_INPUT)
    others = sorted(str(k) for k in arguments if k != CUSTOM_INPUT)
    if isinstance(text, str) and not others:
        return text
    if CUSTOM_INPUT not in arguments:
        problem = f"'{CUSTOM_INPUT}' is missing"
    elif not isinstance(text, str):
        kind = "null" if text is None else type(text).__name__
        problem = f"'{CUSTOM_INPUT}' is {kind}, not text"
    else:
        problem = f"unexpected keys {', '.join(repr(k) for k in others[:5])}"
    raise ArgumentError(
        f"Invalid arguments for '{name}': a free-text tool takes its input as text, "
        f'or as {{"{CUSTOM_INPUT}": <text>}} alone ({problem})'
    )


def _check_utf8(text: str) -> None:
    """`ArgumentError` for text that cannot be UTF-8: undecodable bytes carried
    as lone surrogates (`errors="surrogateescape"`)."""
    try:
        text.encode()
    except UnicodeEncodeError as e:
        raise ArgumentError(f"Input is not valid UTF-8 text (at position {e.start})") from None


def _schema_message(err: jsonschema.ValidationError) -> str:
    # jsonschema's messages start with the offending value; give the rule instead,
    # since the value may be a secret.
    if err.validator == "required":
        return str(err.message).split(" is a required property")[0].strip("'") + " is required"
    if err.validator == "additionalProperties":
        return "unexpected properties"
    if err.validator == "type":
        return f"should be of type {err.validator_value}"
    if err.validator == "enum":
        return f"should be one of {err.validator_value}"
    return f"fails '{err.validator}' rule"


def output_problem(schema: dict[str, Any] | None, output: Any) -> str | None:
    """Why `output` (as JSON) does not fit `schema` (a tool's `output_schema`),
    or None: it fits, or there is no schema. Says where and which rule, never
    the value (it may be a secret)."""
    if schema is None:
        return None
    try:
        value = orjson.loads(_json.dumps(output))
    except (TypeError, ValueError) as e:
        if _json.SURROGATES not in str(e):
            return "it is not JSON"
        # A lone surrogate (a file name decoded with `surrogateescape`): JSON
        # to the schema, as in a tool's own output (`normalize_output`).
        try:
            value = _json.reread(output)
        except (TypeError, ValueError, RecursionError):
            return "it is not JSON"
    cls = jsonschema.validators.validator_for(schema)
    try:
        err = jsonschema.exceptions.best_match(cls(schema).iter_errors(value))
    except RecursionError:  # a schema that refers to itself, and an output as deep
        return "it nests too deeply to be checked against the schema"
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    return f"{where + ' ' if where else ''}{_schema_message(err)}"
