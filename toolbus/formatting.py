"""Turn a result into text for the model's context.

This is the one place that decides the text a model reads for a result: the
provider writers (`toolbus.providers`: OpenAI, Anthropic, the agent loop) and
the MCP server's error results use `format_result_for_context(result,
include_metadata=False)`; with metadata (the default) a header with the tool,
status, duration and attempts comes first, for a context you assemble yourself.
"""

from __future__ import annotations

from typing import Any

import orjson

from . import _json
from ._options import positive_int
from ._text import encodable, text_of
from .models import ToolResult

__all__ = ["DEFAULT_MAX_LENGTH", "NO_OUTPUT", "format_result_for_context", "output_text"]

DEFAULT_MAX_LENGTH = 4000
"""Characters of a tool's output (or error text) the model reads before the note
saying it was cut."""

NO_OUTPUT = "(no output)"
"""What the model reads for a successful call that returned nothing (None or "")
and no attachments: never an empty text, which some APIs refuse."""

_STATUS_TEXT = {
    "ok": "Success",
    "error": "Failed",
    "timeout": "Timed out",
    "cancelled": "Cancelled",
    "rejected": "Rejected",
}


def check_max_length(value: object, owner: str) -> int:
    """`value` if it can be a `max_length` (an integer >= 1: the characters of
    a result's content the model reads); else TypeError or ValueError naming
    `owner`. Checked where it is given, before anything runs: a bad one found
    while a result is written loses a result whose call already ran."""
    return positive_int(value, "max_length", owner)


def output_text(output: Any) -> str:
    """A tool's output as text: strings as they are, anything else as indented
    JSON (integers of any size exact; a lone surrogate, which JSON's UTF-8
    cannot hold, as U+FFFD)."""
    if isinstance(output, str):
        return output
    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
    try:
        return _json.dumps(output, option=option, default=str).decode()
    except TypeError as e:
        if "surrogates" not in str(e):
            raise
    return _json.dumps(encodable(output, str), option=option, default=str).decode()


def format_result_for_context(
    result: ToolResult, max_length: int = DEFAULT_MAX_LENGTH, include_metadata: bool = True
) -> str:
    """Text the model reads for `result`, at most `max_length` characters of content.

    The body: for `ok`, the output (strings as they are, anything else as
    indented JSON), then one `[attachment: type title]` line per attachment, or
    `NO_OUTPUT` when there is neither; for any other status, `Error: <error
    text> (<ERROR_CODE>)`. Content (or error text) longer than `max_length` is
    cut and followed by a note saying how many characters were left out, so the
    model knows it saw a part.

    With `include_metadata` (the default), a header comes first: `Tool:`,
    `Status:`, `Duration:` (when measured), `Attempts:` (when more than one),
    then `---`. Without it, the body alone: exactly what the provider writers
    send (`toolbus.providers.result_text`).

    A lone surrogate (a file name decoded with `surrogateescape`, in an output
    or an error) is written as U+FFFD: no UTF-8 request can carry it.
    `max_length` must be an integer >= 1 (TypeError or ValueError otherwise).
    """
    if type(max_length) is not int or max_length < 1:
        max_length = check_max_length(max_length, "format_result_for_context")
    lines: list[str] = []
    if include_metadata:
        lines.append(f"Tool: {result.name}")
        lines.append(f"Status: {_STATUS_TEXT.get(result.status, result.status)}")
        if result.duration:
            ms = result.duration * 1000
            lines.append(f"Duration: {ms:.0f}ms" if ms >= 10 else f"Duration: {ms:.1f}ms")
        if result.attempts > 1:
            lines.append(f"Attempts: {result.attempts}")
        lines.append("---")
    if result.status == "ok":
        if result.output not in (None, ""):
            lines.append(_cut(output_text(result.output), max_length))
        elif not result.attachments:
            lines.append(NO_OUTPUT)
        for a in result.attachments:
            label = _cut(a.title or a.url or "", min(max_length, 200))
            lines.append(f"[attachment: {a.type} {label}]" if label else f"[attachment: {a.type}]")
    else:
        # Error texts can be as long as any output (a server's traceback): cut alike.
        text = f"Error: {_cut(result.error or 'unknown error', max_length)}"
        if result.error_code:
            text += f" ({result.error_code.value})"
        lines.append(text)
    # Here, not where results are made: the executor's path stays free of the
    # scan, and every text a model reads for a result comes through here.
    return text_of("\n".join(lines))


def _cut(text: str, max_length: int) -> str:
    """At most `max_length` characters of `text`, and a note saying how many were left out."""
    if len(text) <= max_length:
        return text
    omitted = len(text) - max_length
    return text[:max_length] + f"\n... (truncated, {omitted} characters omitted)"
