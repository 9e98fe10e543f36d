"""An MCP tool result as a toolbus output, checked against the tool's `outputSchema`.

A tool that declares an `outputSchema` promises structured content that
matches it (MCP 2025-06-18). A result that breaks the promise is an error the
model can read, naming the field, and never an output: code downstream relies
on the shape. The message quotes the schema's rule, never the value, which may
be anything the server sent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import jsonschema
import mcp_types as types
from jsonschema.exceptions import ValidationError, best_match

from ..models import Attachment, ToolOutput
from ..tools import ToolError
from ._errors import MCPOutputError

__all__ = ["OutputCheck", "sdk_output_error", "tool_output"]

log = logging.getLogger("toolbus.mcp")

# The SDK's own check raises RuntimeErrors with these texts (mcp 2.3,
# ClientSession.validate_tool_result); they become MCPOutputError here.
_SDK_MISMATCH = "Invalid structured content returned by tool"
_SDK_MISSING = "has an output schema but did not return structured content"
_SDK_BAD_SCHEMA = "Invalid schema for tool"
_RULE_TEXT_CAP = 200


def tool_output(result: types.CallToolResult, *, server: str) -> ToolOutput:
    """The toolbus output of an MCP tool result; raise `ToolError` for an error result.

    Structured content, when the server sent it, is the output; otherwise the
    text blocks, joined. Images, audio, blobs and resource links become
    attachments (`type` is the MIME type, `data` base64); embedded text
    resources are added to the text.
    """
    texts: list[str] = []
    attachments: list[Attachment] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            attachments.append(Attachment(type=block.mime_type, data=block.data))
        elif isinstance(block, types.ResourceLink):
            attachments.append(
                Attachment(
                    type=block.mime_type or "resource",
                    url=str(block.uri),
                    title=block.title or block.name,
                )
            )
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                texts.append(res.text)
            else:
                attachments.append(
                    Attachment(
                        type=res.mime_type or "application/octet-stream",
                        url=str(res.uri),
                        data=res.blob,
                    )
                )
        else:
            log.debug("MCP server '%s' sent a %s block; ignored", server, type(block).__name__)
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(text or f"the MCP server '{server}' reported an error without a message")
    content = result.structured_content if result.structured_content is not None else text
    return ToolOutput(
        content=content, attachments=tuple(attachments), metadata={"mcp_server": server}
    )


class OutputCheck:
    """Checks results against one tool's `outputSchema` (compiled once)."""

    def __init__(self, schema: dict[str, Any], *, server: str) -> None:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)  # SchemaError: the caller decides
        self._validator = cls(schema)
        self._server = server

    def check(self, result: types.CallToolResult) -> None:
        """Raise `MCPOutputError` unless `result` (not an error) matches the schema."""
        if result.is_error:
            return  # an error result carries no promise
        content = result.structured_content
        if content is None:
            raise MCPOutputError(_text(self._server, "it sent no structuredContent"))
        error = best_match(self._validator.iter_errors(content))
        if error is not None:
            raise MCPOutputError(_text(self._server, mismatch(error)))


def sdk_output_error(error: RuntimeError, *, server: str, tool: str) -> MCPOutputError | None:
    """The `MCPOutputError` for the SDK's own outputSchema check failing, or None
    when `error` is something else."""
    text = str(error)
    cause = error.__cause__
    if text.startswith(_SDK_MISMATCH):
        detail = mismatch(cause) if isinstance(cause, ValidationError) else "it does not match"
    elif _SDK_MISSING in text:
        detail = "it sent no structuredContent"
    elif text.startswith(_SDK_BAD_SCHEMA):
        return MCPOutputError(
            f"MCP server '{server}' declares an outputSchema for '{tool}' that is not "
            f"usable JSON Schema: {_cap(str(cause or text))}"
        )
    else:
        return None
    return MCPOutputError(_text(server, detail))


def mismatch(error: ValidationError) -> str:
    """What is wrong, naming the field and the rule (not the value)."""
    path: list[str | int] = list(error.absolute_path)
    rule, value, instance = error.validator, error.validator_value, error.instance
    if rule == "required" and isinstance(instance, dict) and isinstance(value, Iterable):
        missing = [n for n in value if n not in instance]
        if missing:
            return f"{_field([*path, missing[0]])} is missing (required)"
    if rule == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(str(k) for k in instance if k not in known)
        if extra:
            return f"{_field([*path, extra[0]])} is not allowed (no additional properties)"
    if rule == "type" and isinstance(value, str | list):
        kinds = [value] if isinstance(value, str) else value
        return f"{_field(path)} should be of type {' or '.join(map(str, kinds))}"
    return f"{_field(path)} does not satisfy {rule!r}: {_cap(repr(value))}"


def _field(path: list[str | int]) -> str:
    if not path:
        return "the structured content"
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"field '{text}'"


def _text(server: str, detail: str) -> str:
    return (
        f"MCP server '{server}' returned structured content that does not match "
        f"the tool's outputSchema: {detail}"
    )


def _cap(text: str) -> str:
    return text if len(text) <= _RULE_TEXT_CAP else text[: _RULE_TEXT_CAP - 3] + "..."
