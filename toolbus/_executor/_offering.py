"""Which tools an executor offers at a step of an agent run, and holding calls to that.

`offered(step)` is what the model is shown: the registry's tools that the
caller's token may call (`Tool.scopes`), enabled at the step
(`Tool.is_enabled`), then as the executor's `prepare` leaves them (dropped,
or described otherwise for this step). `offer(step)` also holds the calls
made inside it to those tools: a call of any other ends `TOOL_NOT_OFFERED`
(`tools/_offer.py`; `run_agent` offers each turn this way).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..tools import StepContext, Tool, ToolRegistry
from ..tools._offer import Offer, check_step, current_step, granted, offered, offering

__all__ = ["Offering", "Prepare", "check_prepare"]

log = logging.getLogger("toolbus")

# Executor(prepare=...): the tools to offer at a step, of those offered so far.
Prepare = Callable[[StepContext, list[Tool]], Sequence[Tool]]


def check_prepare(prepare: Prepare | None) -> Prepare | None:
    """`prepare=` if it is None or callable; else a TypeError."""
    if prepare is not None and not callable(prepare):
        raise TypeError(f"Executor: prepare must be a function of (step, tools), got {prepare!r}")
    return prepare


class Offering:
    """The part of `Executor` that says which tools it offers at a step."""

    registry: ToolRegistry
    _prepare: Prepare | None
    # (the registry's map, the grants, its tools' versions, the tools offered):
    # what `_unstepped` last found (None: nothing yet).
    _unstepped_memo: tuple[Any, frozenset[str] | None, list[int], list[Tool]] | None = None

    def offered(self, step: StepContext | None = None) -> list[Tool]:
        """The tools offered at `step` (None: the current one, that of an
        `offer` or `run_agent` turn around this, else of the current agent
        run): those the caller's token may call, enabled at the step, then as
        `prepare` leaves them. A `prepare` that raises, or gives back
        anything but tools offered to it (a `described` copy of one counts),
        fails closed: nothing it did not keep is offered (logged)."""
        at = step if step is not None else current_step()
        tools = self._unstepped()
        if tools is None:
            tools = offered(self.registry.list(), granted.get(), at)
        else:
            check_step(at)
        prepare = self._prepare
        if prepare is None or not tools:
            return tools
        try:
            kept: Any = prepare(at, list(tools))
            if inspect.iscoroutine(kept):  # an async prepare: the exports are sync
                kept.close()
                raise TypeError("prepare is async")
            chosen = list(kept)
        except BaseException as e:  # user code: it must take no listing or call down with it
            log.warning("Executor prepare failed (%s): no tools offered", type(e).__name__)
            return []
        by_name = {t.name: t for t in tools}
        # A tool offered to it, or a `described` copy of one: never another
        # tool under an offered name (the model would be shown what does not run).
        good = [
            t
            for t in chosen
            if isinstance(t, Tool)
            and t.name in by_name
            and (t is by_name[t.name] or getattr(t, "_described_from", None) is by_name[t.name])
        ]
        if len(good) != len(chosen):
            log.warning(
                "Executor prepare gave back %d item(s) that are not tools offered to it: left out",
                len(chosen) - len(good),
            )
        return list({t.name: t for t in good}.values())  # one per name, in its order

    def _unstepped(self) -> list[Tool] | None:
        """The registry's tools the caller's grants let it see, when no tool's
        `is_enabled` asks the step (each is True or False): the same at every
        step, so kept beside the registry's map, the grants and the tools'
        versions it was worked out from (an export offers the tools again
        for every call). None: some tool asks the step."""
        tools_map = self.registry._tools
        grants = granted.get()
        memo = self._unstepped_memo
        if (
            memo is not None
            and memo[0] is tools_map
            and memo[1] == grants
            and memo[2] == [t._version for t in tools_map.values()]
        ):
            return list(memo[3])
        tools = list(tools_map.values())
        # (Versions first: a tool changed while this looks is looked at again.)
        versions = [t._version for t in tools]
        if not all(_settled(t) for t in tools):
            return None
        chosen = offered(tools, grants, None)  # (asks no step: no tool's is_enabled does)
        self._unstepped_memo = (tools_map, grants, versions, chosen)
        return list(chosen)

    @contextmanager
    def offer(self, step: StepContext | None = None) -> Iterator[list[Tool]]:
        """Offer the tools of `offered(step)` (yielded, to export to the
        model) and hold the calls made inside the block to them: a call of
        any other tool ends `rejected`, `TOOL_NOT_OFFERED`. Calls the tools
        themselves make are not held to it."""
        at = step if step is not None else current_step()
        tools = self.offered(at)
        token = offering.set(Offer(at, frozenset(t.name for t in tools)))
        try:
            yield tools
        finally:
            offering.reset(token)


def _settled(tool: Tool) -> bool:
    """Whether what offers `tool` (its `is_enabled`, True or False, and its
    `scopes`, a tuple) are values of its own that only an attribute set on it
    changes, which bumps its version: not a property, a class's attribute or
    a list that could change under a memo without it."""
    own = getattr(tool, "__dict__", None)
    if own is None:
        return False
    for name in ("is_enabled", "scopes"):
        if name not in own or hasattr(type(getattr(type(tool), name, None)), "__set__"):
            return False
    flag = own["is_enabled"]
    return (flag is True or flag is False) and type(own["scopes"]) is tuple
