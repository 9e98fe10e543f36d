"""Telling the providers' formats apart, for the readers' errors.

A reader given another format's object (a Responses response to
`chat_tool_calls`, a Chat `tool_calls` list to the Anthropic reader) used to
find no calls in it and return `[]`: an agent loop then stopped as if the
model were done. `shape_of` says which format's object a dict recognisably
is, and `wrong_shape` makes the error that names the reader for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["Use", "foreign_to", "shape_of", "wrong_shape"]

Use = Literal["calls", "text", "turn"]
"""What a reader was asked for: the calls, the text, or the turn to append;
an error names the function that does the same for the format it was given."""

_READERS: dict[str, dict[str, str]] = {
    "chat": {
        "calls": "openai.chat_tool_calls",
        "text": "openai.chat_text",
        "turn": "openai.chat_assistant_message",
    },
    "responses": {
        "calls": "openai.responses_tool_calls",
        "text": "openai.responses_text",
        "turn": "openai.responses_output_items",
    },
    "messages": {
        "calls": "anthropic.tool_calls",
        "text": "anthropic.message_text",
        "turn": "anthropic.assistant_message",
    },
}

# shape: (what it is, the API whose readers take it)
_SHAPES: dict[str, tuple[str, str]] = {
    "chat_completion": ("a Chat Completions completion", "chat"),
    "chat_choice": ("a Chat Completions choice", "chat"),
    "chat_message": ("a Chat Completions message", "chat"),
    "chat_call": ("a Chat Completions tool call", "chat"),
    "responses_response": ("a Responses API response", "responses"),
    "responses_item": ("a Responses API output item", "responses"),
    "messages_message": ("an Anthropic Messages message", "messages"),
    "messages_tool_use": ("an Anthropic tool_use block", "messages"),
}

_STREAM_EVENTS = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)


def shape_of(data: Mapping[str, Any]) -> str | None:
    """Which provider format's object `data` recognisably is: a key of
    `_SHAPES`, `"stream"` for a stream chunk or event, None when it is none of
    them (or could be more than one, such as `{"role", "content": "text"}`)."""
    kind = data.get("type")
    if (
        data.get("object") == "chat.completion.chunk"
        or "delta" in data
        or kind in _STREAM_EVENTS
        or (isinstance(kind, str) and kind.startswith("response."))
    ):
        return "stream"
    if isinstance(data.get("choices"), list):
        return "chat_completion"
    if kind is None and isinstance(data.get("message"), Mapping):
        return "chat_choice"
    if data.get("object") == "response" or isinstance(data.get("output"), list):
        return "responses_response"
    if kind == "tool_use":
        return "messages_tool_use"
    parts = _part_types(data.get("content"))
    if kind == "message":
        # Anthropic's message and a Responses message item share the type;
        # their parts (text, tool_use... or output_text, refusal...) do not.
        if "stop_reason" in data or "model" in data or parts - _RESPONSES_PARTS:
            return "messages_message"
        return "responses_item" if parts else None
    if kind is None and "tool_use" in parts:
        return "messages_message"  # a message as sent back: role and blocks
    if kind in ("function_call", "custom_tool_call"):
        return "responses_item"
    call_kind = kind or ("custom" if "custom" in data else "function")
    if call_kind in ("function", "custom") and isinstance(data.get(call_kind), Mapping):
        return "chat_call"
    if kind is None and data.keys() & {"tool_calls", "function_call", "refusal"}:
        return "chat_message"
    return None


_RESPONSES_PARTS = frozenset(
    {"output_text", "refusal", "input_text", "input_image", "input_file", "input_audio"}
)


def _part_types(content: Any) -> set[str]:
    if not isinstance(content, list):
        return set()
    return {str(p.get("type")) for p in content if isinstance(p, Mapping) and "type" in p}


def wrong_shape(expected: str, shape: str, use: Use, *, in_list: bool = False) -> TypeError:
    """The error for a reader given another format's object (`shape`, from
    `shape_of`), naming what it got and the function that reads it."""
    if shape == "stream":
        got = "a list of stream chunks or events" if in_list else "a stream chunk or event"
        return TypeError(
            f"expected {expected}; got {got}: read the final object the SDK's stream helper"
            " reassembles (get_final_completion(), get_final_response(), get_final_message())"
        )
    what, api = _SHAPES[shape]
    got = f"a list holding {what}" if in_list else what
    return TypeError(
        f"expected {expected}; got {got}: read it with toolbus.providers.{_READERS[api][use]}"
    )


def foreign_to(api: str) -> frozenset[str]:
    """The shapes a reader of `api` ("chat", "responses", "messages") refuses:
    every other API's, and stream chunks."""
    return frozenset({"stream"} | {shape for shape, (_, a) in _SHAPES.items() if a != api})
