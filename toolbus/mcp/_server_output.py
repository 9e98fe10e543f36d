"""A served tool's structured output (its `outputSchema` and
`structuredContent`), and its attachments as content blocks.

MCP wants an object at the top of both. A tool whose output schema is an
object's is served with it as it is; any other (a number, a list, a model or
None) is wrapped, `{"result": <schema>}`, and so is each output. A result is
checked against the schema it is served with before it goes out: the spec
says a server's structured content MUST conform, and a client (the SDK's)
would refuse it otherwise, where an error result can say what was wrong.
"""

from __future__ import annotations

import base64
import binascii
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types as types
from referencing.exceptions import Unresolvable

from .._text import text_of
from ..models import Attachment
from ..tools import Tool

__all__ = [
    "ATTACHMENT_MARK",
    "ATTACHMENT_TITLE",
    "ATTACHMENT_URI",
    "ATTACHMENT_URL",
    "RESULT_KEY",
    "WRAPPED",
    "ServedOutput",
    "attachment_block",
    "attachment_data",
    "attachment_text",
    "served_output",
    "unwrapped_schema",
]

# The one property of a wrapped output schema, as the MCP SDKs name it.
RESULT_KEY = "result"
# The mark on a schema toolbus wrapped: a toolbus client unwraps its outputs
# (a wrapped string looks exactly like a tool that returns {"result": "..."}).
WRAPPED = "x-toolbus-wrapped"
# The URI of an embedded attachment that had none (an embedded resource needs
# one): a toolbus client reads it as no URL.
ATTACHMENT_URI = "toolbus://attachment/"
# The mark (`_meta`) on an attachment served as an embedded *text* resource,
# which other clients show as text: a toolbus client makes it an attachment
# again, where a text resource from any other server joins the output's text.
ATTACHMENT_MARK = "toolbus/attachment"
# Beside the mark, what a block has no field for: the attachment's title, and
# its URL where the block has none (an image) or one was made up.
ATTACHMENT_TITLE = "toolbus/title"
ATTACHMENT_URL = "toolbus/url"
_TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/javascript")


def attachment_text(mime: str, data: str) -> str | None:
    """An attachment's data as text, when its type is a text type and its
    base64 holds UTF-8 that `attachment_data` turns back into the same string;
    else None (it travels as a blob)."""
    kind = mime.split(";", 1)[0].strip().lower()
    if not (kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith(("+json", "+xml"))):
        return None
    try:
        text = base64.b64decode(data, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # (UnicodeDecodeError is a ValueError)
        return None
    return text if attachment_data(text) == data else None


def attachment_data(text: str) -> str:
    """The base64 data of an attachment that travelled as text."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


@dataclass(frozen=True)
class ServedOutput:
    """How a tool's output is served: the schema clients see, and whether each
    output is wrapped as `{"result": output}`."""

    source: dict[str, Any]  # the tool's own output_schema, to notice a change
    schema: dict[str, Any]
    wrapped: bool
    validator: jsonschema.protocols.Validator

    def structured(self, output: Any) -> tuple[dict[str, Any] | None, str | None]:
        """`(structured content, None)`, or `(None, why)` when `output` does not
        match the schema (the why names where, never the value: it may be a secret)."""
        value = {RESULT_KEY: output} if self.wrapped else output
        try:
            error = next(iter(self.validator.iter_errors(value)), None)
        except Unresolvable as e:  # a "$ref" the schema does not hold: an error result
            return None, f"the output schema cannot be used ({type(e).__name__}: {e})"
        if error is None:
            return value, None
        path = list(error.absolute_path)
        if self.wrapped and path[:1] == [RESULT_KEY]:
            path = path[1:]
        where = ".".join(str(p) for p in path) or "output"
        return None, f"{where}: {_rule(error)}"


def _rule(error: jsonschema.ValidationError) -> str:
    if error.validator == "type":
        return f"should be of type {error.validator_value}"
    if error.validator == "required":
        given = error.instance if isinstance(error.instance, dict) else {}
        required = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [k for k in required if k not in given]
        return f"lacks {', '.join(repr(k) for k in missing)}"
    return f"fails the schema's '{error.validator}' rule"


_cache: weakref.WeakKeyDictionary[Tool, ServedOutput] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def served_output(tool: Tool) -> ServedOutput | None:
    """How `tool`'s output is served, or None when it has no output schema.

    Made once per tool (and again if its `output_schema` is replaced).
    """
    source = tool.output_schema
    if source is None:
        return None
    with _lock:
        served = _cache.get(tool)
    if served is not None and served.source is source:
        return served
    if source.get("type") == "object":
        schema = source
    else:
        # Definitions stay at the top: the schema's "$ref"s point at "#/$defs/...".
        inner = {k: v for k, v in source.items() if k not in ("$defs", "$schema")}
        schema = {
            "type": "object",
            "properties": {RESULT_KEY: inner},
            "required": [RESULT_KEY],
            WRAPPED: True,
        }
        for key in ("$schema", "$defs"):
            if key in source:
                schema[key] = source[key]
    validator = jsonschema.validators.validator_for(schema)(schema)
    served = ServedOutput(source, schema, schema is not source, validator)
    with _lock:
        _cache[tool] = served
    return served


def unwrapped_schema(schema: dict[str, Any], *, marked_only: bool) -> dict[str, Any] | None:
    """The schema inside a wrapped output schema (`{"result": <schema>}`, its
    `$defs` kept beside it), or None if `schema` is not one: with
    `marked_only`, only one toolbus marked (`WRAPPED`)."""
    if marked_only and schema.get(WRAPPED) is not True:
        return None
    properties = schema.get("properties")
    if (
        schema.get("type") != "object"
        or not isinstance(properties, dict)
        or set(properties) != {RESULT_KEY}
        or schema.get("required") != [RESULT_KEY]
        or not isinstance(properties[RESULT_KEY], dict)
    ):
        return None
    inner = dict(properties[RESULT_KEY])
    for key in ("$schema", "$defs"):
        if key in schema:
            inner[key] = schema[key]
    return inner


def _contents(
    uri: str, mime: str, data: str, n: int
) -> types.TextResourceContents | types.BlobResourceContents:
    """Text for a text type whose data is UTF-8 (what clients show as text),
    else the base64 blob as it came."""
    mime_type = mime if "/" in mime else None
    text = attachment_text(mime, data)

    def at(where: str) -> types.TextResourceContents | types.BlobResourceContents:
        if text is not None:
            return types.TextResourceContents(uri=where, mime_type=mime_type, text=text)
        return types.BlobResourceContents(uri=where, mime_type=mime_type, blob=data)

    try:
        return at(uri)
    except ValueError:  # a URL that is no URI: the data still travels
        return at(f"{ATTACHMENT_URI}{n}")


def attachment_block(attachment: Attachment, n: int) -> types.ContentBlock:
    """The content block of the `n`th attachment: an image or audio, an
    embedded resource for any other data (its bytes travel with it, a link
    would drop them), a link for a URL alone, or a line of text."""
    # Every string writable (`text_of`), as in the rest of a result.
    mime = text_of(attachment.type)
    data = text_of(attachment.data) if attachment.data is not None else None
    title = text_of(attachment.title) if attachment.title else None
    url = text_of(attachment.url) if attachment.url is not None else None
    if data is not None:
        # What the block has no field for travels in its `_meta`, for a
        # toolbus client to make the same attachment again.
        meta: dict[str, Any] = {ATTACHMENT_MARK: True}
        if title is not None:
            meta[ATTACHMENT_TITLE] = title
        if mime.startswith(("image/", "audio/")):
            if url is not None:
                meta[ATTACHMENT_URL] = url
            kind = types.ImageContent if mime.startswith("image/") else types.AudioContent
            return kind(data=data, mime_type=mime, meta=meta)
        contents = _contents(url or f"{ATTACHMENT_URI}{n}", mime, data, n)
        if url is not None and str(contents.uri) != url:
            meta[ATTACHMENT_URL] = url  # (no URI: one was made up)
        return types.EmbeddedResource(type="resource", resource=contents, meta=meta)
    if url is not None:
        return types.ResourceLink(
            uri=url,
            name=title or url,
            mime_type=mime if "/" in mime else None,
        )
    label = f" {title}" if title else ""
    return types.TextContent(text=f"[attachment: {mime}{label}]")
