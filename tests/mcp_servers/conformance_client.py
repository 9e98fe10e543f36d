"""toolbus as the client the official MCP conformance suite's client scenarios
drive (`@modelcontextprotocol/conformance`, tests/mcp/test_conformance.py).

The suite starts a server of its own for each scenario, then runs this with
the server's URL as the last argument and the scenario's name in
`MCP_CONFORMANCE_SCENARIO`. The program does what an agent would: connects
(`connect_http`), registers the server's tools, and calls them through an
`Executor`; the scenario's server checks what reached it. It exits non-zero
when a call does not end `ok`, so a failure shows in the suite's
`stderr.txt` too.
"""

from __future__ import annotations

import os
import sys

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.mcp import Elicitation, ElicitationAnswer, connect_http


def accept_as_offered(request: Elicitation) -> ElicitationAnswer:
    """Accept the form with no data of our own: the schema's defaults fill it
    (SEP-1034)."""
    return request.accept()


# What each scenario's server offers, and the arguments its tools want.
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}


def main(url: str, scenario: str) -> int:
    registry = ToolRegistry()
    with connect_http(url, elicitation=accept_as_offered, connect_timeout=30) as conn:
        tools = conn.register(registry, timeout=30)
        if scenario == "initialize":
            return 0  # the handshake and the tool list were the scenario
        with Executor(registry) as executor:
            calls = [
                ToolCall(name=n, arguments=ARGUMENTS.get(n, {})) for n in (t.name for t in tools)
            ]
            failed = 0
            for result in executor.execute_batch(calls):
                print(f"{result.name}: {result.status} {result.output or result.error}")
                failed += result.status != "ok"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
