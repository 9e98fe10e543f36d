"""`run_limit`: at most so many calls per agent run, and per tool within a run.

An agent run is identified as `toolbus.agent_runs` says (`run_agent` names
each of its runs; `execute*(agent_run=...)`; `with agent_run(...)`). Counted
as `quota` counts, at submission (`at_submission = True`), on the caller's
thread, in the batch's order, under the policy's lock: however many threads
submit a run's calls, no more than the limit are admitted, and in a batch the
first calls in order are the ones that run. A call that ends unanswered
(deferred for an approval, cancelled or shed before its first attempt) gives
its unit back, as a quota's does. Calls of no agent run are not counted.

Beyond a limit, `on_limit` says what happens: `"refuse"` ends that call
`rejected` (`QUOTA_EXCEEDED`) with words the model reads, and the run goes
on; `"halt"` halts the run (`Halt`): that call, every unfinished call of the
run and its later calls end `cancelled` with `ErrorCode.HALTED`, and
`run_agent` stops (`stop_reason="halted"`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from .._options import positive_int
from ..agent_runs import AGENT_RUN
from ..models import ErrorCode, ToolCall, ToolResult
from ._protocol import ADMIT, BasePolicy, Decision, Halt, Reject
from ._quota import _unanswered

if TYPE_CHECKING:
    from cachetools import LRUCache

    from ..tools import Tool

__all__ = ["RunLimit", "run_limit"]

OnLimit = Literal["refuse", "halt"]


class _Counts:
    """One run's admissions: in all, and per tool."""

    __slots__ = ("by_tool", "total")

    def __init__(self) -> None:
        self.total = 0
        self.by_tool: dict[str, int] = {}


class RunLimit(BasePolicy):
    """At most `max_calls` calls per agent run, and at most `per_tool` calls
    of each tool within a run (one number for every tool, or a number per
    tool name); beyond either, refuse the call or halt the run (`on_limit`).

    Promises: counted at admission, under a lock, so no run is admitted more
    than its limits whatever the threads submitting; the counts of the
    `runs_kept` runs last counted are kept (an older run, counted again,
    starts from nothing). `used(agent_run, tool=None)` reads a count.
    """

    at_submission = True

    def __init__(
        self,
        max_calls: int | None = None,
        *,
        per_tool: int | Mapping[str, int] | None = None,
        on_limit: OnLimit = "refuse",
        runs_kept: int = 10_000,
    ) -> None:
        if max_calls is None and per_tool is None:
            raise ValueError("run_limit: give max_calls, per_tool or both")
        self.max_calls = (
            None if max_calls is None else positive_int(max_calls, "max_calls", "run_limit")
        )
        self._per_tool_all: int | None = None
        self._per_tool: dict[str, int] = {}
        if isinstance(per_tool, Mapping):
            if not per_tool and max_calls is None:
                raise ValueError("run_limit: per_tool names no tool, and max_calls is not given")
            for name, cap in per_tool.items():
                if not isinstance(name, str) or not name:
                    raise TypeError(f"run_limit: per_tool's keys are tool names, got {name!r}")
                self._per_tool[name] = positive_int(cap, f"per_tool[{name!r}]", "run_limit")
        elif per_tool is not None:
            self._per_tool_all = positive_int(per_tool, "per_tool", "run_limit")
        if on_limit not in ("refuse", "halt"):
            raise ValueError(f"run_limit: on_limit must be 'refuse' or 'halt', got {on_limit!r}")
        self.on_limit: OnLimit = on_limit
        self.runs_kept = positive_int(runs_kept, "runs_kept", "run_limit")
        parts = [f"{self.max_calls} per run"] if self.max_calls is not None else []
        if per_tool is not None:
            parts.append("per tool")
        self.name = f"run_limit({', '.join(parts)}, {on_limit})"
        self._lock = threading.Lock()
        self._runs: LRUCache[str, _Counts] | None = None  # made at the first count
        # Admissions whose calls have not ended, by the call object asked
        # about (`on_result` gets the same one): (the call, its run, its tool),
        # the oldest first (one object may be submitted twice).
        self._open: dict[int, list[tuple[ToolCall, str, str]]] = {}

    def _cap(self, tool: str) -> int | None:
        return self._per_tool.get(tool, self._per_tool_all)

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        """Admit and count `call` if its run is within its limits; else refuse or halt."""
        run = AGENT_RUN.get()
        if run is None:
            return ADMIT
        name = tool.name
        cap = self._cap(name)
        with self._lock:
            if self._runs is None:
                from cachetools import LRUCache  # only once a run is counted

                self._runs = LRUCache(self.runs_kept)
            counts = self._runs.get(run)
            if counts is None:
                counts = self._runs[run] = _Counts()
            if self.max_calls is not None and counts.total >= self.max_calls:
                over = f"at most {_calls(self.max_calls)}"
            elif cap is not None and counts.by_tool.get(name, 0) >= cap:
                over = f"at most {_calls(cap, '')} of tool '{name}'"
            else:
                counts.total += 1
                counts.by_tool[name] = counts.by_tool.get(name, 0) + 1
                self._open.setdefault(id(call), []).append((call, run, name))
                return ADMIT
        if self.on_limit == "halt":
            return Halt(f"run_limit: {over} per run")
        return Reject(
            ErrorCode.QUOTA_EXCEEDED,
            f"Tool '{name}' was not called: this agent run may make {over}, all used. "
            "Do not call it again in this run.",
        )

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> None:
        """An admitted call ended: it stays counted unless it ended unanswered."""
        with self._lock:
            admitted = self._open.get(id(call))
            if not admitted:
                return
            # Told in the call's run: its own admission, when one object
            # was submitted in two runs; else the oldest.
            told_in = AGENT_RUN.get()
            at = next((i for i, e in enumerate(admitted) if e[1] == told_in), 0)
            _, run, name = admitted.pop(at)
            if not admitted:
                del self._open[id(call)]
            if not _unanswered(result) or self._runs is None:
                return
            counts = self._runs.get(run)
            if counts is not None:  # (not if the run was forgotten meanwhile)
                counts.total = max(0, counts.total - 1)
                counts.by_tool[name] = max(0, counts.by_tool.get(name, 0) - 1)

    def used(self, agent_run: str, tool: str | None = None) -> int:
        """Calls counted against `agent_run` (of `tool`, if given)."""
        with self._lock:
            counts = self._runs.get(agent_run) if self._runs is not None else None
            if counts is None:
                return 0
            return counts.total if tool is None else counts.by_tool.get(tool, 0)


def _calls(n: int, kind: str = "tool ") -> str:
    return f"{n} {kind}call" if n == 1 else f"{n} {kind}calls"


def run_limit(
    max_calls: int | None = None,
    *,
    per_tool: int | Mapping[str, int] | None = None,
    on_limit: OnLimit = "refuse",
    runs_kept: int = 10_000,
) -> RunLimit:
    """At most `max_calls` calls per agent run and `per_tool` calls of a tool
    within a run (a number for every tool, or `{"tool": n}`); beyond a limit,
    `on_limit="refuse"` ends the call `rejected` (`QUOTA_EXCEEDED`) and
    `"halt"` halts the run (`ErrorCode.HALTED`). Give it to the executor
    (every tool counted together) or to one tool."""
    return RunLimit(max_calls, per_tool=per_tool, on_limit=on_limit, runs_kept=runs_kept)
