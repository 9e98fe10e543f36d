"""What an executor is configured with, as plain JSON data for the views and `/status`."""

from __future__ import annotations

import math
from typing import Any

from ..executor import Executor
from ..tools import Tool

__all__ = ["describe_executor", "executor_name"]


def executor_name(executor: Executor) -> str:
    """The executor's name (`Executor(name=...)`; by default `executor-N`)."""
    return executor.name


def _seconds(value: float | None) -> float | None:
    return None if value is None or value == math.inf else float(value)


def _backend(tool: Tool) -> str | None:
    backend = tool.backend
    if backend is None or isinstance(backend, str):
        return backend
    return str(getattr(backend, "name", type(backend).__name__))


def describe_executor(executor: Executor) -> dict[str, Any]:
    """Name, limits, default timeout and retry policy, and each tool's options.

    Only configuration: no arguments, no outputs, no secrets (`secret_keys`
    and injected values are left out; injected parameter names are shown).
    """
    policy = executor.retry_policy
    return {
        "name": executor_name(executor),
        "max_parallel": executor.parallel_limit,
        "timeout": _seconds(executor.timeout),
        "retry": {
            "max_retries": policy.max_retries,
            "backoff_base": policy.backoff_base,
            "backoff_factor": policy.backoff_factor,
            "max_backoff": policy.max_backoff,
        },
        "closed": executor.closed,
        "tools": [
            {
                "name": t.name,
                "type": t.type,
                "read_only": t.read_only,
                "idempotent": t.idempotent,
                "timeout": _seconds(t.timeout),
                "max_concurrency": t.max_concurrency,
                "max_retries": t.retry.max_retries if t.retry is not None else None,
                "backend": _backend(t),
                "injected": list(t.injected),
            }
            for t in sorted(executor.registry.list(), key=lambda t: t.name)
        ],
    }
