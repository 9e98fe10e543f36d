"""Provider formats: read a model's tool calls, write results back, export tools.

- `toolbus.providers.openai`: OpenAI Chat Completions and the Responses API,
  including custom (free-text) tools and strict schemas;
- `toolbus.providers.anthropic`: Anthropic Messages (`tool_use` / `tool_result`);
- `run_agent` / `arun_agent`: the loop that calls the model, runs every tool
  call of a turn as one batch, appends the results and repeats.

Each reader accepts the SDKs' objects and their JSON as plain dicts. None of
these modules imports a provider SDK; install the `openai` or `anthropic` extra
for the clients. Failures (errors, timeouts, rejections) become text the model
can read, `Error: ... (ERROR_CODE)`, and Anthropic's `is_error`.
"""

from . import anthropic, openai
from ._common import DEFAULT_MAX_LENGTH, NO_OUTPUT, StrictSchemaError, result_text, strict_schema
from .agent import AgentResult, Api, arun_agent, run_agent

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "NO_OUTPUT",
    "AgentResult",
    "Api",
    "StrictSchemaError",
    "anthropic",
    "arun_agent",
    "openai",
    "result_text",
    "run_agent",
    "strict_schema",
]
