"""toolbus inside DBOS workflows on Postgres (DBOS's database for several
workers): what Postgres refuses that SQLite takes.

The slow tier (tests/README.md): it starts a Postgres cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS, SetWorkflowID

from tests.integrations import dbos_support
from tests.integrations.dbos_support import POLL, call
from tests.integrations.postgres import cluster
from toolbus import ErrorCode, Executor, ToolRegistry
from toolbus.integrations.dbos import DurableExecutor, durable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def tools() -> Iterator[tuple[DurableExecutor, list[str]]]:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool()
    def book(item: str) -> str:
        ran.append(item)
        return f"booked {item}"

    with cluster() as url:
        DBOS.destroy(destroy_registry=True)
        DBOS(config=dbos_support.config("toolbus-postgres-tests", url))
        dbos_support.poll_queue_often()
        DBOS.launch()
        executor = Executor(reg)
        try:
            yield durable(executor), ran
        finally:
            executor.close()
            DBOS.destroy(destroy_registry=True)


def test_a_tool_name_or_call_id_holding_nul_is_recorded_and_replayed(
    tools: tuple[DurableExecutor, list[str]],
) -> None:
    # A model's JSON "\u0000" decodes to NUL, which Postgres's text cannot
    # hold: the step's name held it as it was (`psycopg.DataError` out of
    # the workflow, for good on every recovery).
    durable_tools, ran = tools

    @DBOS.workflow()
    def turn_nul() -> list[Any]:
        batch = durable_tools.execute_batch(
            [call("a\x00id", "book", item="x\x00y"), call("b", "no\x00such", item="z")]
        )
        return [(r.call_id, r.status, r.error_code, r.output) for r in batch.results]

    with SetWorkflowID("nul-1"):
        first = turn_nul()
    assert first == [
        ("a\x00id", "ok", None, "booked x\x00y"),
        ("b", "rejected", ErrorCode.TOOL_NOT_FOUND, None),
    ]
    again = DBOS.fork_workflow("nul-1", 5).get_result(polling_interval_sec=POLL)
    assert again == first
    assert ran == ["x\x00y"]
