"""An agent process for the tests of tasks across a crash
(tests/mcp/test_task_restart.py): it calls `deploy` on a toolbus server over
HTTP, with a journal, and prints the result as JSON.

    python -m tests.mcp_servers.task_agent URL JOURNAL GATE [never-rerun]

The call's id is fixed, so the same call made again after a crash is the
call in doubt. The test kills the first process mid-call.
"""

from __future__ import annotations

import sys

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.in_doubt import never_rerun
from toolbus.mcp import connect_http


def main() -> None:
    url, journal, gate, *mode = sys.argv[1:]
    registry = ToolRegistry()
    with connect_http(url) as server:
        server.register(registry)
        handler = never_rerun if mode == ["never-rerun"] else None
        with Executor(registry, journal=journal, on_in_doubt=handler, timeout=120) as executor:
            call = ToolCall(id="deploy-1", name="deploy", arguments={"gate": gate})
            result = executor.execute(call)
    print(result.model_dump_json(), flush=True)


if __name__ == "__main__":
    main()
