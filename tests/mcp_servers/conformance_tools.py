"""The tools the official MCP conformance suite's server scenarios call, as a
toolbus registry (`@modelcontextprotocol/conformance`, tests/mcp/test_conformance.py).

Served with `toolbus mcp serve tests.mcp_servers.conformance_tools:registry
--http`: each is plain toolbus (a function, `ToolOutput` attachments, its
`ToolContext`), named and shaped as the scenarios ask.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

from toolbus import Attachment, Tool, ToolContext, ToolError, ToolOutput, ToolRegistry

registry = ToolRegistry()

# A 1x1 red PNG, and a WAV of one silent sample.
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="


@registry.tool(read_only=True)
def test_simple_text() -> str:
    """Returns a line of text."""
    return "This is a simple text response for testing."


@registry.tool(read_only=True)
def test_image_content() -> ToolOutput:
    """Returns an image."""
    return ToolOutput(attachments=(Attachment(type="image/png", data=PIXEL),))


@registry.tool(read_only=True)
def test_audio_content() -> ToolOutput:
    """Returns a sound."""
    return ToolOutput(attachments=(Attachment(type="audio/wav", data=WAV),))


def _text(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@registry.tool(read_only=True)
def test_embedded_resource() -> ToolOutput:
    """Returns a resource with its text."""
    embedded = Attachment(
        type="text/plain",
        url="test://embedded-resource",
        data=_text("This is an embedded resource content."),
    )
    return ToolOutput(attachments=(embedded,))


@registry.tool(read_only=True)
def test_multiple_content_types() -> ToolOutput:
    """Returns text, an image and a resource."""
    document = json.dumps({"test": "data", "value": 123})
    return ToolOutput(
        content="Multiple content types test:",
        attachments=(
            Attachment(type="image/png", data=PIXEL),
            Attachment(
                type="application/json", url="test://mixed-content-resource", data=_text(document)
            ),
        ),
    )


@registry.tool(read_only=True)
def test_tool_with_logging(ctx: ToolContext) -> str:
    """Logs three messages as it goes."""
    ctx.log("Tool execution started")
    time.sleep(0.05)  # tool under test: takes a while, as the scenario asks
    ctx.log("Tool processing data")
    time.sleep(0.05)
    ctx.log("Tool execution completed")
    return "Tool with logging executed successfully"


@registry.tool(read_only=True)
def test_tool_with_progress(ctx: ToolContext) -> str:
    """Reports its progress: 0, 50 and 100 of 100."""
    for done in (0, 50, 100):
        ctx.progress(f"{done}%", progress=done, total=100)
        if done < 100:
            time.sleep(0.05)  # tool under test: takes a while, as the scenario asks
    return "Tool with progress executed successfully"


@registry.tool(read_only=True)
def test_error_handling() -> str:
    """Always fails."""
    raise ToolError("This tool intentionally returns an error for testing")


@registry.tool(read_only=True)
def test_elicitation(message: str, ctx: ToolContext) -> str:
    """Asks the person for a name and an address."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = ctx.elicit(message, schema)
    return f"User response: action={answer.action}, content={json.dumps(answer.data)}"


@registry.tool(read_only=True)
def test_elicitation_sep1034_defaults(ctx: ToolContext) -> str:
    """Asks with a default for every kind of field (SEP-1034)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verified", "default": True},
        },
        "required": [],
    }
    answer = ctx.elicit("Please review and update the form fields with defaults", schema)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.data)}"


def _titled(prefix: str, title: str) -> list[dict[str, str]]:
    return [{"const": f"{prefix}{n}", "title": f"{title} {n}"} for n in (1, 2, 3)]


@registry.tool(read_only=True)
def test_elicitation_sep1330_enums(ctx: ToolContext) -> str:
    """Asks with each of the five kinds of choice (SEP-1330)."""
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": _titled("value", "Option")},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {"type": "array", "items": {"anyOf": _titled("value", "Choice")}},
        },
        "required": [],
    }
    answer = ctx.elicit("Choose your options", schema)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.data)}"


reconnected = threading.Event()
"""Set by a test serving this registry in process when the client comes back
for the rest of a call (`Last-Event-ID`)."""
ALONE = 1.0
"""Seconds `test_reconnection` runs where nobody sets `reconnected`."""


@registry.tool(read_only=True)
def test_reconnection() -> str:
    """Runs until its client came back for it after its stream was closed
    (the server's `poll_after`); where nobody can say so (another process),
    for `ALONE` seconds."""
    reconnected.wait(ALONE)
    return "Reconnection test completed"


SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


class SchemaTool(Tool):
    """A tool whose input schema is given as it is (JSON Schema 2020-12)."""

    name = "json_schema_2020_12_tool"
    description = "Tool with JSON Schema 2020-12 features"
    read_only = True
    parameters = SCHEMA_2020_12

    def run(self, params: dict[str, Any]) -> str:
        return f"hello {params.get('name', 'nobody')}"


registry.register(SchemaTool())
