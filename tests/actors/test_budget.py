"""The thread budget's look at its waiting runs (toolbus/actors/_budget.py), pure:
backends that count what the test says, runs that never start a thread."""

from __future__ import annotations

import contextvars
from typing import Any

from toolbus import ToolCall, tool
from toolbus.actors._budget import ThreadBudget
from toolbus.actors._ticket import Ticket
from toolbus.pipeline import Run
from toolbus.retry import RetryPolicy
from toolbus.tools import Tool


class Counts:
    """A backend's thread counts, set by the test; counts how often it is asked."""

    name = "counts"

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.stuck: dict[str, int] = {}
        self.asked = 0

    def busy(self, tool: Tool | None = None) -> int:
        self.asked += 1
        return sum(self.running.values()) if tool is None else self.running.get(tool.name, 0)

    def abandoned(self, tool: Tool | None = None) -> int:
        return sum(self.stuck.values()) if tool is None else self.stuck.get(tool.name, 0)


def _tool(name: str) -> Tool:
    @tool(name=name, read_only=True)
    def f() -> None:
        return None

    return f


def _park(budget: ThreadBudget, backend: Counts, t: Tool, n: int) -> list[Run]:
    runs = []
    for i in range(n):
        run = Run(
            ToolCall(id=f"{t.name}-{i}", name=t.name),
            t,
            context=contextvars.copy_context(),
            timeout=None,
            policy=RetryPolicy(),
        )
        run.ticket = Ticket()
        run.backend = backend  # type: ignore[assignment]
        budget.park(run)
        runs.append(run)
    return runs


def _budget(limit: int, per_tool: int) -> tuple[ThreadBudget, Counts]:
    budget = ThreadBudget(limit, per_tool)
    backend = Counts()
    budget.backends.append(backend)  # type: ignore[arg-type]
    return budget, backend


def test_a_look_asks_once_per_tool_not_once_per_waiting_run() -> None:
    """A queue of n runs cost a pass over all n, each asking the backends, per
    freed thread: quadratic for a burst of sync calls."""
    budget, backend = _budget(limit=10, per_tool=2)
    a, b = _tool("a"), _tool("b")
    backend.running = {"a": 2}  # a's two threads held: its runs wait
    _park(budget, backend, a, 200)
    (first_b,) = _park(budget, backend, b, 1)
    backend.asked = 0
    assert budget.next_ready() == (first_b, "start")  # behind 200 of a, b may start
    assert backend.asked < 10  # once per tool (a, b), not once per run (201)
    assert budget.next_ready() is None  # a's still wait, in order
    assert len(budget.waiting) == 200


def test_while_every_thread_is_held_a_look_costs_nothing() -> None:
    budget, backend = _budget(limit=2, per_tool=2)
    a = _tool("a")
    backend.running = {"a": 2}
    _park(budget, backend, a, 100)
    assert budget.next_ready() is None  # looked once: every run waits
    backend.asked = 0
    for _ in range(50):
        assert budget.next_ready() is None
    assert backend.asked == 50  # the totals alone, no run looked at
    backend.running = {"a": 1}  # a thread came free: the first one goes
    ready = budget.next_ready()
    assert ready is not None and ready[0].call.id == "a-0" and ready[1] == "start"


def test_a_run_that_ended_while_waiting_is_taken_out_though_every_thread_is_held() -> None:
    """A call that timed out or was cancelled while waiting for a thread stayed
    queued (held, with its arguments) until a thread came free."""
    budget, backend = _budget(limit=2, per_tool=2)
    a = _tool("a")
    backend.running = {"a": 2}
    runs = _park(budget, backend, a, 5)
    assert budget.next_ready() is None
    for run in runs[:3]:  # as `Completion` does when a parked run ends
        run.ticket.closed = True
        budget.waiting.dead += 1
    assert budget.next_ready() is None
    assert [r.call.id for r in budget.waiting] == ["a-3", "a-4"]
    assert budget.waiting.dead == 0


def test_stuck_threads_refuse_waiting_runs_even_while_every_thread_is_held() -> None:
    budget, backend = _budget(limit=4, per_tool=2)
    a = _tool("a")
    backend.running = {"b": 3}  # (another tool's threads)
    backend.stuck = {"a": 1}
    _park(budget, backend, a, 3)
    assert budget.next_ready() is None  # full (3 + 1 of 4), nobody refused yet
    backend.stuck = {"a": 2}  # a second of a's threads got stuck: a's runs never will start
    backend.running = {"b": 2}
    verdicts: list[Any] = []
    while (ready := budget.next_ready()) is not None:
        verdicts.append(ready[1])
    assert len(verdicts) == 3
    assert all("is unavailable: 2 of its calls are stuck" in v for v in verdicts)
