"""Helpers for tests that run a blocking call in a thread and check, bounded,
whether it ended: a hang is asserted as "no result within N seconds"."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from toolbus import ToolRegistry


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `fn` in a daemon thread; its return value lands in the dict under "r"."""
    out: dict[str, Any] = {}
    th = threading.Thread(target=lambda: out.setdefault("r", fn()), daemon=True)
    th.start()
    return th, out


def finished(th: threading.Thread, out: dict[str, Any], timeout: float = 30.0) -> bool:
    """Whether `in_thread`'s call returned within `timeout` seconds (a hang
    guard: it returns as soon as the call does, so the bound is loose)."""
    th.join(timeout)
    return "r" in out


def ok_registry() -> ToolRegistry:
    """One read-only tool, `ok(i)`, that returns `i`."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(i: int) -> int:
        return i

    return reg
