"""The baselines toolbus is measured against, in the same run.

- a direct function call (the floor);
- a bare `ThreadPoolExecutor` submit+result round trip (the goal's yardstick);
- a minimal queue handoff to a worker thread and back (two `SimpleQueue`s);
- pykka's own `ask` round trip (the actor library toolbus is built on);
- LangGraph's `ToolNode.invoke` with 1 and with 10 tool calls (a peer; optional,
  `pip install -e '.[bench]'`), and toolbus's drop-in for it, `ToolbusNode.invoke`,
  on the same message and tool.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pykka

from ._common import noop
from ._harness import Case, block, per_op

SKIPPED_LANGGRAPH = "skipped (install .[bench])"


class _Echo(pykka.ThreadingActor):
    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        return message


class Baselines:
    """Owns the pools, threads and actors the baselines need; `close()` stops them."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bench-tpe")
        self._inbox: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="bench-queue", daemon=True)
        self._thread.start()
        self._actor = _Echo.start()

    def _serve(self) -> None:
        while (item := self._inbox.get()) is not None:
            self._outbox.put(noop(item))

    # -- cases ------------------------------------------------------------------

    def direct(self) -> Case:
        """A plain call; timed in blocks (a per-call clock would cost more than the call)."""
        return Case("direct call", block(noop), min_ops=10_000)

    def thread_pool(self) -> Case:
        pool = self._pool
        return Case(
            "ThreadPoolExecutor submit+result",
            per_op(lambda i: pool.submit(noop, i).result()),
            per_op=True,
        )

    def queue_handoff(self) -> Case:
        put, get = self._inbox.put, self._outbox.get

        def handoff(i: int) -> int:
            put(i)
            return get()

        return Case("queue handoff to a thread and back", per_op(handoff), per_op=True)

    def pykka_ask(self) -> Case:
        return Case("pykka ask round trip", per_op(self._actor.ask), per_op=True)

    def close(self) -> None:
        self._inbox.put(None)
        self._pool.shutdown()
        self._actor.stop()


def _lg_noop_state(calls: int) -> tuple[Any, dict[str, Any]]:
    """A LangChain noop tool and a state whose AIMessage carries `calls` calls of it."""
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    @tool
    def lg_noop(i: int) -> int:
        """Return i."""
        return i

    message = AIMessage(
        content="",
        tool_calls=[
            {"name": "lg_noop", "args": {"i": k}, "id": f"call_{k}", "type": "tool_call"}
            for k in range(calls)
        ],
    )
    return lg_noop, {"messages": [message]}


def toolnode(calls: int) -> tuple[Callable[[int], object] | None, str]:
    """`ToolNode.invoke` on an AIMessage carrying `calls` noop tool calls, or why not.

    Invoked directly, outside a graph: a `Runtime` goes in the config the way a
    graph would put it there (recent langgraph versions require one).
    """
    try:
        from langgraph.prebuilt import ToolNode

        lg_noop, state = _lg_noop_state(calls)
    except ImportError:
        return None, SKIPPED_LANGGRAPH

    node = ToolNode([lg_noop])
    config = _runtime_config()

    def invoke(i: int) -> object:
        return node.invoke(state, config)

    try:
        out: Any = invoke(0)
        assert len(out["messages"]) == calls, out
    except Exception as e:  # a langgraph version this does not know how to drive
        return None, f"skipped ({type(e).__name__}: {e})"
    return invoke, ""


def toolbus_node(
    calls: int, *, read_only: bool = False
) -> tuple[Callable[[int], object] | None, Callable[[], None], str]:
    """`ToolbusNode.invoke` on the same message and the same LangChain tool as
    `toolnode(calls)` (outside a graph too); with the function that closes its
    executor; or why not. The tool is mutating, as toolbus takes an unmarked
    LangChain tool, unless `read_only`."""
    try:
        from toolbus.integrations.langgraph import ToolbusNode

        lg_noop, state = _lg_noop_state(calls)
    except ImportError:
        return None, lambda: None, SKIPPED_LANGGRAPH

    node = ToolbusNode([lg_noop], read_only=read_only, max_parallel=16, timeout=30)

    def invoke(i: int) -> object:
        return node.invoke(state)

    try:
        out: Any = invoke(0)
        assert [m.content for m in out["messages"]] == [str(k) for k in range(calls)], out
    except Exception as e:
        node.close()
        return None, lambda: None, f"skipped ({type(e).__name__}: {e})"
    return invoke, node.close, ""


def _runtime_config() -> Any:
    try:
        from langgraph._internal._constants import CONFIG_KEY_RUNTIME
        from langgraph.runtime import Runtime
    except ImportError:  # older langgraph: ToolNode runs without one
        return None
    return {"configurable": {CONFIG_KEY_RUNTIME: Runtime()}}
