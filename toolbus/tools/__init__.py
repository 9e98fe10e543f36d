"""The tools layer: what a tool is, how functions become tools, and the registry."""

from .._errors import ArgumentError, InputRequired, ToolError, ToolFailure, error_text
from .._output import OutputError, normalize_output
from ._command import CommandTool
from ._context import ToolContext
from ._function import FunctionTool, ToolOptions, tool
from ._injected import Injected
from ._load import load_registry
from ._offer import StepContext
from ._peer import ElicitationAnswer, InputUnavailable, LogLevel
from ._plugins import PluginError, PluginWarning
from ._registry import DuplicateToolError, ToolRegistry
from ._sequence import SequenceTool, sequence
from ._tool import Tool, ToolType, parse_json_arguments

__all__ = [
    "ArgumentError",
    "CommandTool",
    "DuplicateToolError",
    "ElicitationAnswer",
    "FunctionTool",
    "Injected",
    "InputRequired",
    "InputUnavailable",
    "LogLevel",
    "OutputError",
    "PluginError",
    "PluginWarning",
    "SequenceTool",
    "StepContext",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFailure",
    "ToolOptions",
    "ToolRegistry",
    "ToolType",
    "error_text",
    "load_registry",
    "normalize_output",
    "parse_json_arguments",
    "sequence",
    "tool",
]
