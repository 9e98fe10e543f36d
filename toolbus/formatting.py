"""Turn a result into text for the model's context (seed 004's formatResultForContext)."""

from __future__ import annotations

from typing import Any

import orjson

from .models import ToolResult

__all__ = ["format_result_for_context", "output_text"]

_STATUS_TEXT = {
    "ok": "Success",
    "error": "Failed",
    "timeout": "Timed out",
    "cancelled": "Cancelled",
    "rejected": "Rejected",
}


def output_text(output: Any) -> str:
    """A tool's output as text: strings as they are, anything else as indented JSON."""
    if isinstance(output, str):
        return output
    return orjson.dumps(
        output, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str
    ).decode()


def format_result_for_context(
    result: ToolResult, max_length: int = 4000, include_metadata: bool = True
) -> str:
    """Text the model reads for `result`, at most `max_length` characters of content.

    Content longer than `max_length` is cut and followed by a note saying how many
    characters were left out, so the model knows it saw a part.
    """
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
        content = output_text(result.output)
        if len(content) > max_length:
            omitted = len(content) - max_length
            content = content[:max_length] + f"\n... (truncated, {omitted} characters omitted)"
        lines.append(content)
        for a in result.attachments:
            label = a.title or a.url
            lines.append(f"[attachment: {a.type} {label}]" if label else f"[attachment: {a.type}]")
    else:
        text = f"Error: {result.error or 'unknown error'}"
        if result.error_code:
            text += f" ({result.error_code.value})"
        lines.append(text)
    return "\n".join(lines)
