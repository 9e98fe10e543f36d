"""toolbus: execute an LLM agent's tool calls reliably, fast and observably.

Each tool runs in its own actors; a supervisor actor schedules batches and
enforces limits, deadlines and retries; every lifecycle step is a blinker signal
on `toolbus.bus`.
"""

# First: fills the seams through which the lower layers reach the upper ones
# (toolbus/_seams.py), before any of them can be used.
from . import _wiring  # noqa: F401  # isort: skip
from . import bus
from ._executor._handles import BatchHandle, CallHandle
from ._version import __version__ as __version__
from .agent_runs import agent_run, current_agent_run
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
    "BatchHandle",
    "BatchResult",
    "BatchSummary",
    "CallHandle",
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
    "agent_run",
    "bus",
    "current_agent_run",
    "format_result_for_context",
    "tool",
]
