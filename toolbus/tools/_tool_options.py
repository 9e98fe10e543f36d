"""The options a tool is made with, each list written once.

`ToolOptions` are those of `@tool`, `registry.tool` and `FunctionTool`: the
`Tool` attributes of the same names. A tool adopted from another library
takes the part of them that applies to it (`LangChainOptions`,
`PydanticAIOptions`, `OpenAIAgentsOptions`), an MCP connection's tools the
limits (`ToolLimits`). Each is taken as `**options: Unpack[...]`;
`toolbus._keywords` refuses any other keyword as Python would, and `adopt`
sets the shared ones on an adopted tool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from .._keywords import keywords_of
from ..retry import RetryPolicy
from ._offer import IsEnabled
from ._tool import TaskSupport, Tool, ToolType

if TYPE_CHECKING:
    from ._tool import BackendSpec

__all__ = [
    "ADOPTED",
    "LANGCHAIN_KEYWORDS",
    "OPENAI_AGENTS_KEYWORDS",
    "PYDANTIC_AI_KEYWORDS",
    "AdoptedOptions",
    "LangChainOptions",
    "OpenAIAgentsOptions",
    "PydanticAIOptions",
    "ToolLimits",
    "ToolOptions",
    "adopt",
]


class ToolLimits(TypedDict, total=False):
    """How long a call may take, how it is retried, how many run at once."""

    timeout: float | None
    call_timeout: float | None
    retry: RetryPolicy | None
    max_concurrency: int | None


class AdoptedOptions(ToolLimits, total=False):
    """The options every tool adopted from another library takes."""

    read_only: bool
    groups: Sequence[str]
    idempotent: bool
    scopes: Sequence[str]
    is_enabled: IsEnabled


class _Naming(TypedDict, total=False):
    name: str | None
    description: str | None


class _Placing(TypedDict, total=False):
    backend: BackendSpec


class LangChainOptions(AdoptedOptions, _Placing, total=False):
    """`ToolRegistry.add_langchain`'s and `LangChainTool`'s options."""


class PydanticAIOptions(_Naming, AdoptedOptions, total=False):
    """`add_pydantic_ai`'s and `PydanticAITool`'s options."""


class OpenAIAgentsOptions(PydanticAIOptions, total=False):
    """`add_openai_agents`'s and `OpenAIAgentsTool`'s options: the run context
    a tool that takes one is given, besides."""

    context: Any


class ToolOptions(_Naming, AdoptedOptions, _Placing, total=False):
    """The options of `@tool`, `registry.tool` and `FunctionTool`: the `Tool`
    attributes of the same names (see `Tool` for what each means and allows)."""

    type: ToolType
    resource_keys: Sequence[str]
    destructive: bool | None
    open_world: bool
    memory_limit_mb: int | None
    cpu_limit_s: float | None
    policies: Sequence[Any]
    external: bool
    task_support: TaskSupport


# The options `adopt` sets (an adopted tool's name and description are its own).
ADOPTED = keywords_of(AdoptedOptions)
# The keywords each adopted tool takes.
LANGCHAIN_KEYWORDS = keywords_of(LangChainOptions)
PYDANTIC_AI_KEYWORDS = keywords_of(PydanticAIOptions)
OPENAI_AGENTS_KEYWORDS = keywords_of(OpenAIAgentsOptions)


def adopt(tool: Tool, options: Mapping[str, Any], keys: frozenset[str] = ADOPTED) -> None:
    """Set each option of `keys` on `tool`: the one given, or `Tool`'s default
    (`Tool._setup` checks them)."""
    for key in keys:
        setattr(tool, key, options.get(key, getattr(Tool, key)))
    groups = tool.groups
    tool.groups = tuple(groups) if not isinstance(groups, str) else (groups,)
