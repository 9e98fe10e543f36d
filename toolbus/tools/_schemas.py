"""A tool's schemas and arguments, checked without echoing a value.

What the `Tool` base class uses to parse the model's JSON arguments and to
word a validation failure (never quoting the value: an argument may be a
secret), and to check a tool's `parameters` when it is made and its
`output_schema` whenever it is set (local `$ref`s resolved, so a dangling one
fails where it is configured, not at every call).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from pydantic import ValidationError

from .. import _json
from .._errors import ArgumentError

__all__ = [
    "ToolSchemaError",
    "check_output_schema",
    "format_validation_error",
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


def check_output_schema(schema: Any, owner: str) -> None:
    """TypeError or ValueError, naming `owner`, unless `schema` is None or a valid JSON schema."""
    if schema is not None:
        _checked(schema, owner, "output_schema")


def parameters_validator(schema: Any, owner: str) -> jsonschema.protocols.Validator:
    """The validator of a tool's `parameters`; TypeError or ValueError naming
    `owner` unless it is a valid JSON schema that an object of arguments can
    meet (toolbus always validates an object; a schema of a string, say, would
    reject every call)."""
    cls = _checked(schema, owner, "parameters")
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise ToolSchemaError(
            f"{owner}: parameters must describe an object (the arguments are a JSON "
            f"object), not type {kind!r}"
        )
    return cls(schema)


def _checked(schema: Any, owner: str, field: str) -> type[jsonschema.protocols.Validator]:
    """The validator class for `schema`, checked to be a valid JSON schema."""
    if not isinstance(schema, dict):
        raise TypeError(
            f"{owner}: {field} must be a JSON schema (a dict), got {type(schema).__name__}"
        )
    cls: type[jsonschema.protocols.Validator] = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        at = "/".join(str(p) for p in e.path)
        raise ToolSchemaError(
            f"{owner}: {field} is not a valid JSON schema: {e.message}"
            + (f" (at /{at})" if at else "")
        ) from None
    # check_schema does not follow "$ref"s: one that points nowhere would fail
    # every call (or every output's check) instead. Local ones ("#/...") are resolved here.
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable

    spec = cls.META_SCHEMA.get("$schema")
    try:
        resource = Resource.from_contents(schema, default_specification=_specification(spec))
        resolver = Registry().with_resource("", resource).resolver()
        for ref in _local_refs(schema):
            resolver.lookup(ref)
    except Unresolvable as e:
        raise ToolSchemaError(f"{owner}: {field} has a $ref that does not resolve: {e}") from None
    return cls


def _specification(uri: Any) -> Any:
    from referencing.jsonschema import DRAFT202012, specification_with

    return specification_with(uri, default=DRAFT202012) if isinstance(uri, str) else DRAFT202012


def _local_refs(schema: Any, depth: int = 0) -> list[str]:
    """The "#..." references in `schema` (a nested "$id" starts another
    document: its references are left to the validator)."""
    if depth > 100:
        return []
    refs: list[str] = []
    if isinstance(schema, dict):
        if depth and "$id" in schema:
            return []
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            refs.append(ref)
        for key, value in schema.items():
            if key not in ("const", "enum", "default", "examples"):
                refs.extend(_local_refs(value, depth + 1))
    elif isinstance(schema, list):
        for item in schema:
            refs.extend(_local_refs(item, depth + 1))
    return refs


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
        _check_depth(value)
    return value


def _check_depth(value: dict[str, Any]) -> None:
    try:
        _json.dumps(value)
    except TypeError as e:
        if "Recursion limit" in str(e):
            raise ArgumentError(TOO_DEEP) from None


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
    err = jsonschema.exceptions.best_match(cls(schema).iter_errors(value))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    return f"{where + ' ' if where else ''}{_schema_message(err)}"
