"""Fills the seams (`toolbus/_seams.py`): what the lower layers reach through them.

Imported first by `toolbus/__init__.py`, so every seam is filled before any
toolbus code runs. The integrations and the MCP and provider formats are
imported when first used, as before: they import optional frameworks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from . import _seams
from .backends import check_tool_backend
from .config._apply import executor_options
from .tools import Tool
from .tools._artifact_reader import reader_tool

__all__: list[str] = []


def _anthropic_definitions(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    from .providers.anthropic import tool_definitions

    return cast("list[dict[str, Any]]", tool_definitions(tools))


def _mcp_definition(tool: Tool) -> dict[str, Any]:
    from .mcp import mcp_tool

    definition: dict[str, Any] = mcp_tool(tool).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    return definition


def _langchain_tool(tool: Any, /, **options: Any) -> Tool:
    from .integrations.langchain import LangChainTool

    return LangChainTool(tool, **options)


def _pydantic_ai_tool(tool_or_function: Any, /, **options: Any) -> Tool:
    from .integrations.pydantic_ai import from_pydantic_ai

    return from_pydantic_ai(tool_or_function, **options)


def _openai_agents_tool(function_tool: Any, /, **options: Any) -> Tool:
    from .integrations.openai_agents import from_openai_agents

    return from_openai_agents(function_tool, **options)


_seams.check_backend.fill(check_tool_backend)
_seams.config_reader.fill(executor_options)
_seams.spill_reader.fill(reader_tool)
_seams.anthropic_definitions.fill(_anthropic_definitions)
_seams.mcp_definition.fill(_mcp_definition)
_seams.langchain_tool.fill(_langchain_tool)
_seams.pydantic_ai_tool.fill(_pydantic_ai_tool)
_seams.openai_agents_tool.fill(_openai_agents_tool)
