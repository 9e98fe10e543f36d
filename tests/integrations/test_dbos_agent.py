"""The durable agent loop (`toolbus.integrations.dbos.run_agent`) against real DBOS
on SQLite, with a scripted model (the real `openai` client over a mock
transport). A workflow run again with `DBOS.fork_workflow` stands for a
recovery; an executor made anew for it stands for the new process (its own
secret: what a dead process's approvals were bound to is gone).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

import httpx2
import openai
from dbos import DBOS, SetWorkflowID

from tests.integrations import dbos_support
from toolbus import Executor, ToolContext, ToolRegistry
from toolbus.approvals import InputRequest
from toolbus.integrations.dbos import ModelCallFailed, run_agent
from toolbus.policies import requires_approval
from toolbus.tools import InputRequired


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with dbos_support.launched(
        tmp_path_factory.mktemp("dbos-agent") / "system.sqlite", "toolbus-agent-tests"
    ) as path:
        yield path


def scripted(turns: list[list[tuple[str, dict[str, Any]]]]) -> Callable[[], openai.OpenAI]:
    """A client whose model asks for `turns`' calls in turn, then answers."""

    def reply(request: httpx2.Request) -> httpx2.Response:
        return dbos_support.model_reply(turns, request)

    def make() -> openai.OpenAI:
        http = httpx2.Client(transport=httpx2.MockTransport(reply))
        return openai.OpenAI(api_key="sk-test", base_url="http://m.test/v1", http_client=http)

    return make


class World:
    """The tools, and which executor the workflow uses now (a new one per
    "process"); what the tools did, counted outside the engine."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.lock = threading.Lock()
        self.executor = self.new_executor()

    def new_executor(self) -> Executor:
        reg = ToolRegistry()

        @reg.tool(policies=[requires_approval()])
        def refund(amount: int) -> str:
            with self.lock:
                self.ran.append(("refund", amount))
            return f"refunded {amount}"

        @reg.tool()
        def pay(ctx: ToolContext) -> str:
            if ctx.answer is None:
                raise InputRequired(
                    "Your PIN?",
                    source="the bank",
                    schema={"type": "object", "properties": {"pin": {"type": "string"}}},
                )
            with self.lock:
                self.ran.append(("pay", ctx.answer.data))
            return "paid"

        return Executor(reg)

    def again(self) -> None:
        """A new process: a new executor (a new secret)."""
        self.executor.close()
        self.executor = self.new_executor()


@pytest.fixture
def world(launched: Path) -> Iterator[World]:
    w = World()
    yield w
    w.executor.close()


def test_an_approval_recorded_before_a_crash_holds_after_it(world: World) -> None:
    client = scripted([[("refund", {"amount": 1})]])
    asked: list[str] = []

    def approve(request: Any) -> bool:
        asked.append(request.call_id)
        return True

    @DBOS.workflow()
    def turn_refund() -> tuple[str, str]:
        with client() as c:
            run = run_agent(
                c, model="m", messages="refund", executor=world.executor, approve=approve
            )
        return run.stop_reason, run.text

    with SetWorkflowID("refund-1"):
        assert turn_refund() == ("done", "done")
    names = [s["function_name"] for s in DBOS.list_workflow_steps("refund-1")]
    approve_at = 1 + names.index("toolbus-approve")
    at = [s["function_id"] for s in DBOS.list_workflow_steps("refund-1")][approve_at - 1] + 1
    world.again()  # the process died after the approval was recorded
    assert DBOS.fork_workflow("refund-1", at).get_result(
        polling_interval_sec=dbos_support.POLL
    ) == ("done", "done")
    assert asked == ["call_0_0"]  # the person was not asked again
    assert world.ran == [("refund", 1), ("refund", 1)]  # (the fork ran it again: no journal)


def test_an_answer_to_a_question_is_given_again_after_a_crash(world: World) -> None:
    client = scripted([[("pay", {})]])
    asked: list[InputRequest] = []

    def approve(request: Any) -> Any:
        asked.append(request)
        return request.accept({"pin": "1234"})

    @DBOS.workflow()
    def turn_pay() -> tuple[str, str]:
        with client() as c:
            run = run_agent(c, model="m", messages="pay", executor=world.executor, approve=approve)
        return run.stop_reason, run.text

    with SetWorkflowID("pay-1"):
        assert turn_pay() == ("done", "done")
    steps = DBOS.list_workflow_steps("pay-1")
    at = next(s["function_id"] for s in steps if s["function_name"] == "toolbus-approve") + 1
    world.again()
    assert DBOS.fork_workflow("pay-1", at).get_result(polling_interval_sec=dbos_support.POLL) == (
        "done",
        "done",
    )
    assert len(asked) == 1
    assert world.ran == [("pay", {"pin": "1234"}), ("pay", {"pin": "1234"})]


def test_an_unclear_approval_denies_as_the_plain_loop_does(world: World) -> None:
    client = scripted([[("refund", {"amount": 2})]])

    @DBOS.workflow()
    def turn_junk() -> tuple[str, list[str]]:
        with client() as c:
            run = run_agent(
                c, model="m", messages="refund", executor=world.executor, approve=lambda r: None
            )
        return run.stop_reason, [r.error or "" for b in run.batches for r in b.results]

    with SetWorkflowID("junk-1"):
        stop, errors = turn_junk()
    assert stop == "done" and world.ran == []
    assert "approve returned NoneType" in errors[-1]


def test_a_model_error_is_recorded_without_the_request(world: World) -> None:
    def failing(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(400, json={"error": {"message": "bad request", "type": "invalid"}})

    @DBOS.workflow()
    def turn_fail() -> str:
        http = httpx2.Client(transport=httpx2.MockTransport(failing))
        with openai.OpenAI(
            api_key="k", base_url="http://m.test/v1", http_client=http, max_retries=0
        ) as c:
            return run_agent(
                c, model="m", messages="the secret is hunter2", executor=world.executor
            ).text

    with SetWorkflowID("fail-1"), pytest.raises(ModelCallFailed, match="BadRequestError"):
        turn_fail()
    (step,) = DBOS.list_workflow_steps("fail-1")
    assert isinstance(step["error"], ModelCallFailed)
    assert "hunter2" not in repr(step["error"].__dict__) and "hunter2" not in str(step["error"])


def test_a_decision_on_other_arguments_approves_nothing(world: World) -> None:
    from toolbus.approvals import ApprovalDecision

    client = scripted([[("refund", {"amount": 3})]])

    @DBOS.workflow()
    def turn_stale() -> str:
        with client() as c:
            run = run_agent(
                c,
                model="m",
                messages="refund",
                executor=world.executor,
                approve=lambda r: ApprovalDecision(digest="another request's", approved=True),
            )
        return run.stop_reason

    with SetWorkflowID("stale-1"):
        assert turn_stale() == "approval"  # as the plain loop: still waiting
    assert (
        DBOS.fork_workflow("stale-1", 99).get_result(polling_interval_sec=dbos_support.POLL)
        == "approval"
    )
    assert world.ran == []


def test_a_workflows_agent_run_is_its_id(world: World) -> None:
    """The durable loop's run id was a new uuid on every run of the workflow,
    so a recovered run got a fresh run limit; and `agent_run=` went to the
    model's SDK as an option (review of issue 28)."""
    from toolbus import current_agent_run

    client = scripted([[("refund", {"amount": 1})]])
    seen: list[str | None] = []

    def approve(request: Any) -> bool:
        seen.append(current_agent_run())
        return True

    @DBOS.workflow()
    def turn_runs() -> tuple[str, str]:
        with client() as c:
            run = run_agent(
                c, model="m", messages="refund", executor=world.executor, approve=approve
            )
        return run.stop_reason, run.agent_run

    with SetWorkflowID("runs-1"):
        assert turn_runs() == ("done", "dbos:runs-1")
    assert seen == ["dbos:runs-1"]
    # Run again (a fork is a workflow of its own, with its own id: a recovery
    # keeps the id, and so the run).
    forked = DBOS.fork_workflow("runs-1", 1)
    assert forked.get_result(polling_interval_sec=dbos_support.POLL) == (
        "done",
        f"dbos:{forked.get_workflow_id()}",
    )

    @DBOS.workflow()
    def named() -> str:
        with client() as c:
            return run_agent(
                c, model="m", messages="refund", executor=world.executor, approve=approve,
                agent_run="ticket-9",
            ).agent_run  # fmt: skip

    with SetWorkflowID("runs-2"):
        assert named() == "ticket-9"


def test_workflows_whose_long_ids_share_a_start_have_agent_runs_apart(world: World) -> None:
    """A workflow id past the agent run's 200 characters was cut to fit:
    two workflows whose ids differ only past that shared one run (its run
    limits counted for both, a halt of one halted the other)."""
    client = scripted([[("refund", {"amount": 1})]])

    @DBOS.workflow()
    def turn_long() -> str:
        with client() as c:
            return run_agent(
                c, model="m", messages="refund", executor=world.executor, approve=lambda r: True
            ).agent_run

    start = "tenant-7/conversation-" + "x" * 200
    runs = []
    for end in ("a", "b"):
        with SetWorkflowID(start + end):
            runs.append(turn_long())
    assert runs[0] != runs[1]
    assert all(len(r) <= 200 and r.startswith("dbos:") for r in runs)
    with SetWorkflowID(start + "a"):  # the same workflow: the same run
        assert turn_long() == runs[0]


def test_a_model_response_holding_a_lone_surrogate_is_recorded_and_read_back(
    world: World,
) -> None:
    """A model's JSON `"\\udce9"` decodes to a lone surrogate, which orjson
    refuses: the response could not be recorded (`TypeError`), and the
    workflow failed where the plain loop answered."""
    import json

    def reply(request: httpx2.Request) -> httpx2.Response:
        message = {"role": "assistant", "content": "caf\udce9 booked"}
        body = {
            "id": "chatcmpl-0",
            "object": "chat.completion",
            "created": 1_800_000_000,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
        return httpx2.Response(  # (the stdlib's JSON: the surrogate as its escape)
            200, content=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )

    def client() -> openai.OpenAI:
        http = httpx2.Client(transport=httpx2.MockTransport(reply))
        return openai.OpenAI(api_key="sk-test", base_url="http://m.test/v1", http_client=http)

    @DBOS.workflow()
    def turn_odd() -> str | None:
        with client() as c:
            return run_agent(c, model="m", messages="book", executor=world.executor).text

    with SetWorkflowID("odd-reply-1"):
        assert turn_odd() == "caf\udce9 booked"
    again = DBOS.fork_workflow("odd-reply-1", 2)  # the response read back
    assert again.get_result(polling_interval_sec=dbos_support.POLL) == "caf\udce9 booked"
