"""An executor's options checked, and what it opens: its journal, its capacity
groups, the values it injects, the tools its policies bring; and the message
for a tool the model invented."""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._options import positive_int, positive_number
from .journal import Journal, JournalRecord, Retention
from .journal._session import Session
from .models import ToolCall
from .policies._set import PolicySet
from .tools import Tool, ToolRegistry

DEFAULT_JOURNAL_TIMEOUT = 5.0  # seconds: Executor(journal_timeout=...)


def open_journal(
    journal: str | os.PathLike[str] | Journal | None, retention: Any, timeout: Any
) -> tuple[Journal | None, bool, Session | None, list[JournalRecord]]:
    """Executor(journal=..., journal_retention=..., journal_timeout=...): the
    journal, whether the executor made it (and so closes it), the executor's
    session on it, and the calls in doubt now. Nothing is left open on failure."""
    if journal is None:
        if retention is not None:
            raise ValueError("Executor: journal_retention= needs journal= (a path or a Journal)")
        if timeout is not None:
            raise ValueError("Executor: journal_timeout= needs journal= (a path or a Journal)")
        return None, False, None, []
    wait = (
        DEFAULT_JOURNAL_TIMEOUT
        if timeout is None
        else positive_number(timeout, "journal_timeout", "Executor")
    )
    if isinstance(journal, Journal):
        if retention is not None:
            raise ValueError(
                "Executor: journal_retention= applies to a journal made from a path; "
                "give a Journal its own: Journal(path, retention=...)"
            )
        owned = False
    elif isinstance(journal, str | os.PathLike):
        checked = Retention.coerce(retention, "journal_retention", "Executor")
        journal = Journal(journal, create=True, retention=checked, timeout=wait)
        owned = True
    else:
        raise TypeError(
            f"Executor: journal must be a path or a toolbus.Journal, got {type(journal).__name__}"
        )
    session: Session | None = None
    try:
        session = journal._open_session(wait)
        found = journal.in_doubt()
    except BaseException:
        # Briefly: a journal that did not answer in time will not now either.
        close_journal(journal, owned, session, min(wait, 1.0))
        raise
    return journal, owned, session, found


def close_journal(
    journal: Journal | None, owned: bool, session: Session | None, timeout: float
) -> None:
    """Close the executor's session (its calls' outcomes on disk, its owner
    lock let go) and the journal if the executor made it; within `timeout`."""
    deadline = time.monotonic() + timeout
    if session is not None:
        session.close(timeout)
    if owned and journal is not None:
        journal.close(max(0.0, deadline - time.monotonic()))


def add_policy_tools(registry: ToolRegistry, policies: PolicySet) -> None:
    """Register the tools the executor's policies bring (a spill's read_artifact)."""
    for t in policies.all_tools():
        known = registry.get(t.name)
        if known is t:
            continue
        if known is not None:
            raise ValueError(
                f"Executor: a policy brings a tool named {t.name!r}, and the registry "
                "has another tool by that name"
            )
        registry.register(t)


def check_groups(groups: Mapping[str, int] | None) -> dict[str, int]:
    """Executor(groups=...): names to limits, each a positive int."""
    if groups is None:
        return {}
    if not isinstance(groups, Mapping):
        raise TypeError(f"Executor: groups must map names to limits, got {type(groups).__name__}")
    checked: dict[str, int] = {}
    for name, limit in groups.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"Executor: group names must be non-empty strings, got {name!r}")
        checked[name] = positive_int(limit, f"groups[{name!r}]", "Executor")
    return checked


def learn_groups(groups: dict[str, int], tools: Sequence[Tool]) -> None:
    """Add to `groups` (Executor(groups=...), checked) the groups the tools define
    themselves (`Tool.group_limits`); two limits for one name are a `ValueError`."""
    defined_by = dict.fromkeys(groups, "Executor(groups=...)")
    for t in tools:
        for name, limit in t.group_limits.items():
            known = groups.get(name)
            if known is None:
                groups[name] = limit
                defined_by[name] = f"tool {t.name!r}"
            elif known != limit:
                raise ValueError(
                    f"tool {t.name!r} defines capacity group {name!r} with limit {limit}, "
                    f"and {defined_by[name]} with limit {known}"
                )


def check_inject(
    inject: Mapping[str, Callable[[ToolCall], Any]] | None, registry: ToolRegistry
) -> dict[str, Callable[[ToolCall], Any]]:
    """Executor(inject=...): "param" or "tool.param" to a callable of the call.

    A "tool.param" key for a registered tool must name one of its injected
    parameters (a typo would otherwise leave the parameter without a value)."""
    if inject is None:
        return {}
    if not isinstance(inject, Mapping):
        raise TypeError(
            f"Executor: inject must map parameter names to callables, got {type(inject).__name__}"
        )
    checked: dict[str, Callable[[ToolCall], Any]] = {}
    for key, fn in inject.items():
        if not isinstance(key, str) or not key or key.endswith("."):
            raise TypeError(f"Executor: inject keys are 'param' or 'tool.param', got {key!r}")
        if not callable(fn):
            raise TypeError(f"Executor: inject[{key!r}] must be callable, got {type(fn).__name__}")
        if "." in key:
            tool_name, param = key.rsplit(".", 1)
            t = registry.get(tool_name)
            if t is not None and param not in t.injected:
                raise ValueError(
                    f"Executor: inject[{key!r}]: tool {tool_name!r} has no injected parameter "
                    f"{param!r} (injected: {', '.join(t.injected) or 'none'}; mark it "
                    "Annotated[..., Injected])"
                )
        checked[key] = fn
    return checked


# An unknown tool's error lists at most this many of the registry's tool names.
MAX_LISTED_TOOLS = 20
# ... and echoes at most this many characters of the name the model invented.
_MAX_NAME_ECHO = 100


def unknown_tool_message(name: str, known: list[str]) -> str:
    """The error a model reads for a tool it invented: close matches first, then
    the available names (at most `MAX_LISTED_TOOLS`, in registration order), so
    it can recover on its next turn, as LangGraph's `ToolNode` does."""
    shown = name if len(name) <= _MAX_NAME_ECHO else name[: _MAX_NAME_ECHO - 1] + "…"
    if not known:
        return f"Unknown tool '{shown}': no tools are available"
    text = f"Unknown tool '{shown}'."
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        text += " Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    listed = ", ".join(known[:MAX_LISTED_TOOLS])
    more = len(known) - MAX_LISTED_TOOLS
    return text + f" Available tools: {listed}" + (f" (and {more} more)" if more > 0 else "")
