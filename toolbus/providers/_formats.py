"""The three provider formats the agent loop speaks: how to ask, what to read, what to append.

One class per API (OpenAI Chat Completions, the OpenAI Responses API,
Anthropic Messages), each a thin layer over the readers and writers of
`openai.py` and `anthropic.py`; `format_for` picks one by the client's type.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..models import ToolCall, ToolResult
from ..tools import Tool, ToolRegistry
from ..tools._offer import granted, missing_scopes
from . import anthropic as _anthropic
from . import openai as _openai
from ._common import ToolSource

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "FORMATS",
    "Format",
    "check_offerable",
    "format_for",
    "offerable",
]

log = logging.getLogger("toolbus.providers")

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` sent to Anthropic (which requires it) when the caller gives none."""


class Format(Protocol):
    api: str

    def method(self, client: Any) -> Callable[..., Any]: ...

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]: ...

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]: ...

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]: ...

    def turn(self, response: Any) -> list[Any]: ...

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]: ...

    def text(self, response: Any) -> str: ...


class _Chat:
    api = "chat"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]:
        return _openai.chat_tool_definitions(source, strict=strict)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "model": model,
            "messages": history,
            **({"tools": tools} if tools else {}),
            **options,
        }

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _openai.chat_tool_calls(response)

    def turn(self, response: Any) -> list[Any]:
        return [_openai.chat_assistant_message(response)]

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return _openai.chat_tool_messages(results, max_length=limit)

    def text(self, response: Any) -> str:
        return _openai.chat_text(response)


class _Responses:
    api = "responses"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]:
        return _openai.responses_tool_definitions(source, strict=strict)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        return {"model": model, "input": history, **({"tools": tools} if tools else {}), **options}

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _openai.responses_tool_calls(response)

    def turn(self, response: Any) -> list[Any]:
        return _openai.responses_output_items(response)

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return _openai.responses_tool_outputs(results, response, max_length=limit)

    def text(self, response: Any) -> str:
        return _openai.responses_text(response)


class _Messages:
    api = "messages"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.messages.create  # type: ignore[no-any-return]

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]:
        return _anthropic.tool_definitions(source)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        options = {"max_tokens": DEFAULT_MAX_TOKENS, **options}
        return {
            "model": model,
            "messages": history,
            **({"tools": tools} if tools else {}),
            **options,
        }

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _anthropic.tool_calls(response, registry=registry)

    def turn(self, response: Any) -> list[Any]:
        return [_anthropic.assistant_message(response)]

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return [_anthropic.tool_results_message(results, max_length=limit)]

    def text(self, response: Any) -> str:
        return _anthropic.message_text(response)


FORMATS: dict[str, Format] = {"chat": _Chat(), "responses": _Responses(), "messages": _Messages()}


def format_for(client: Any, api: str | None) -> Format:
    if api is None:
        packages = {cls.__module__.partition(".")[0] for cls in type(client).__mro__}
        if "anthropic" in packages:
            api = "messages"
        elif "openai" in packages:
            api = "chat"
        else:
            raise TypeError(
                f"cannot tell which API a {type(client).__name__} speaks;"
                " pass api='chat', 'responses' or 'messages'"
            )
    if api not in FORMATS:
        raise ValueError(f"unknown api {api!r}; expected 'chat', 'responses' or 'messages'")
    return FORMATS[api]


def check_offerable(fmt: Format, registry: ToolRegistry, strict: bool) -> None:
    """Raise, naming the tool, if a tool any turn of a run could offer is one
    the provider refuses (its name; with `strict`, its schema): checked before
    the first request, since found at a later turn it would stop the run after
    calls had run. A tool never enabled (`is_enabled=False`), or whose scopes
    the caller lacks, is never offered and not checked."""
    scopes = granted.get()
    tools = [t for t in registry.list() if t.is_enabled is not False]
    try:
        fmt.definitions([t for t in tools if not missing_scopes(t, scopes)], strict)
    except ValueError as e:  # (StrictSchemaError too: raised as what it is)
        raise type(e)(
            f"{e} (run_agent checks every tool a turn could offer, enabled now or "
            "not, before its first request)"
        ) from None


def offerable(
    fmt: Format, tools: Sequence[Tool], strict: bool, turn: int
) -> tuple[list[Any], list[Tool]]:
    """`tools`' definitions, and the tools they define: one the provider
    refuses (registered since the run began: `check_offerable` passed the
    others) is left out of this turn, with a warning naming it, so the run
    goes on, and what it already did is kept."""
    try:
        return fmt.definitions(tools, strict), list(tools)
    except ValueError:
        pass
    definitions: list[Any] = []
    kept: list[Tool] = []
    for tool in tools:
        try:
            definitions.extend(fmt.definitions([tool], strict))
        except ValueError as e:
            log.warning("run_agent: tool %r is left out of turn %d: %s", tool.name, turn, e)
        else:
            kept.append(tool)
    return definitions, kept
