"""toolbus: execute an LLM agent's tool calls reliably, fast and observably.

Each tool runs in its own actors; a supervisor actor schedules batches and
enforces limits, deadlines and retries; every lifecycle step is a blinker signal
on `toolbus.bus`.
"""

from . import bus
from .config import ConfigError
from .executor import Executor, ExecutorStats
from .formatting import format_result_for_context
from .journal import Journal
from .models import (
    Attachment,
    BatchResult,
    BatchSummary,
    ErrorCode,
    Status,
    ToolCall,
    ToolOutput,
    ToolResult,
)
from .retry import AttemptFailure, RetryDecision, RetryPolicy
from .tools import (
    CommandTool,
    DuplicateToolError,
    FunctionTool,
    Injected,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    tool,
)

__all__ = [
    "Attachment",
    "AttemptFailure",
    "BatchResult",
    "BatchSummary",
    "CommandTool",
    "ConfigError",
    "DuplicateToolError",
    "ErrorCode",
    "Executor",
    "ExecutorStats",
    "FunctionTool",
    "Injected",
    "Journal",
    "RetryDecision",
    "RetryPolicy",
    "Status",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "bus",
    "format_result_for_context",
    "tool",
]

__version__ = "0.1.0"
