"""Seams: where a lower layer reaches a higher one without importing it.

The layers import downward only (docs/architecture.md, "Layers"). A few jobs
of a lower layer need code from above it: the registry's `add_langchain` needs
the LangChain integration, a new tool's `backend=` is checked by the backends
layer, a spill policy brings a tool of its own. Each such need is a `Seam`
here: a named slot that the lower layer calls and the upper layer fills.

`toolbus/_wiring.py` fills every seam, and `toolbus/__init__.py` imports it
before anything else. Python runs a package's `__init__` before any of its
modules, so no toolbus code can call a seam before it is filled; an unfilled
one raises saying who should have filled it, never passes silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ._executor._from_config import ConfigReader
    from .policies import Spill
    from .tools import Tool

__all__ = [
    "Seam",
    "anthropic_definitions",
    "check_backend",
    "config_reader",
    "langchain_tool",
    "mcp_definition",
    "openai_agents_tool",
    "pydantic_ai_tool",
    "spill_reader",
]

F = TypeVar("F", bound=Callable[..., Any])


class Seam(Generic[F]):
    """One function a lower layer calls and a higher layer provides."""

    __slots__ = ("_fn", "filled_by", "name")

    def __init__(self, name: str, filled_by: str) -> None:
        self.name = name
        self.filled_by = filled_by
        self._fn: F | None = None

    def fill(self, fn: F) -> None:
        """Provide the function; a later fill replaces it (a test's stand-in)."""
        self._fn = fn

    @property
    def call(self) -> F:
        """The function provided; RuntimeError if none was."""
        fn = self._fn
        if fn is None:
            raise RuntimeError(
                f"toolbus: the seam {self.name!r} is not filled ({self.filled_by} fills it "
                "when `toolbus` is imported)"
            )
        return fn

    def __repr__(self) -> str:
        return f"<Seam {self.name} ({'filled' if self._fn else 'empty'})>"


# tools -> backends: refuse a tool whose `backend=` cannot run it, when it is
# made or reconfigured (`Tool.__init__`, `tools._registry.reconfigured`).
check_backend: Seam[Callable[[Tool], None]] = Seam(
    "check_backend", "toolbus.backends.check_tool_backend"
)

# policies -> tools: the `read_artifact` tool a `spill` policy brings along.
spill_reader: Seam[Callable[[Spill], Tool]] = Seam(
    "spill_reader", "toolbus.tools._artifact_reader.reader_tool"
)

# tools -> providers, mcp: `ToolRegistry.to_anthropic` and `to_mcp`.
anthropic_definitions: Seam[Callable[[Iterable[Tool]], list[dict[str, Any]]]] = Seam(
    "anthropic_definitions", "toolbus.providers.anthropic.tool_definitions"
)
mcp_definition: Seam[Callable[[Tool], dict[str, Any]]] = Seam(
    "mcp_definition", "toolbus.mcp.mcp_tool"
)

# tools -> integrations: `ToolRegistry.add_langchain`, `add_pydantic_ai`,
# `add_openai_agents`. Each integration imports its framework when it is
# imported itself, so these import it when first called.
langchain_tool: Seam[Callable[..., Tool]] = Seam(
    "langchain_tool", "toolbus.integrations.langchain.LangChainTool"
)
pydantic_ai_tool: Seam[Callable[..., Tool]] = Seam(
    "pydantic_ai_tool", "toolbus.integrations.pydantic_ai.from_pydantic_ai"
)
openai_agents_tool: Seam[Callable[..., Tool]] = Seam(
    "openai_agents_tool", "toolbus.integrations.openai_agents.from_openai_agents"
)

# executor -> config: `Executor.from_config` reads a file's options.
config_reader: Seam[ConfigReader] = Seam("config_reader", "toolbus.config._apply.executor_options")
