"""Configuration files: the executor's options and each tool's, in TOML.

    # toolbus.toml (or [tool.toolbus] in pyproject.toml)
    max_parallel = 4
    timeout = 30

    [tools."web_search"]
    rate_limit = "10/minute"
    timeout = 30

    [tools."code_exec"]
    enabled = false

`Executor.from_config(registry)` reads it; `load_config` and `apply_config`
are its two steps, for code that makes its executor itself. The format, and what
each key means: docs/config.md.
"""

from .._executor._from_config import install_config_reader
from ._apply import apply_config, executor_options, load_config
from ._errors import ConfigError
from ._file import PYPROJECT_TOML, TOOLBUS_TOML, find_config
from ._settings import EXECUTOR_KEYS, TOOL_KEYS, Config, ToolSettings

__all__ = [
    "EXECUTOR_KEYS",
    "PYPROJECT_TOML",
    "TOOLBUS_TOML",
    "TOOL_KEYS",
    "Config",
    "ConfigError",
    "ToolSettings",
    "apply_config",
    "find_config",
    "load_config",
]

# Executor.from_config reads files through this seam: the executor sits below
# this layer and never imports it (see toolbus/_executor/_from_config.py).
install_config_reader(executor_options)
