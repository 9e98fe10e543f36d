"""The tools layer: what a tool is, how functions become tools, and the registry."""

from ._context import ToolContext
from ._errors import ArgumentError, ToolError, error_text
from ._function import FunctionTool, tool
from ._injected import Injected
from ._output import OutputError, normalize_output
from ._registry import DuplicateToolError, ToolRegistry
from ._tool import Tool, ToolType, parse_json_arguments

__all__ = [
    "ArgumentError",
    "DuplicateToolError",
    "FunctionTool",
    "Injected",
    "OutputError",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolType",
    "error_text",
    "normalize_output",
    "parse_json_arguments",
    "tool",
]
