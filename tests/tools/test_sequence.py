"""Composite tools: `toolbus.tools.sequence` (seed 003's SequentialFlow) on an executor."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
from typing import Annotated, Any

import pytest
from pydantic import SecretStr

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, RetryPolicy, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.models import generated_id
from toolbus.observe import log_json
from toolbus.policies import requires_approval
from toolbus.providers import anthropic, openai
from toolbus.tools import Injected, SequenceTool, Tool, sequence, tool


@tool(read_only=True)
def fetch(url: str, depth: int = 1) -> dict[str, Any]:
    """Fetch a page."""
    return {"text": f"<p>{url}</p>", "lang": "en"}


@tool(read_only=True)
async def parse(text: str, lang: str) -> str:
    """Parse a page (async)."""
    return f"{lang}:{text.upper()}"


@tool(read_only=True)
def count(s: str) -> int:
    """Count characters."""
    return len(s)


@tool
def save(value: Any) -> str:
    """Store a value (mutating)."""
    return f"saved {value}"


@tool(read_only=True)
def explode(s: str) -> str:
    raise ValueError(f"cannot parse {s!r}")


def _registry(*tools: Tool) -> ToolRegistry:
    reg = ToolRegistry()
    for t in tools:
        reg.register(t)
    return reg


PIPELINE = sequence("pipeline", [fetch, parse, count], description="Fetch, parse, count.")


# -- data flow -------------------------------------------------------------------------


def test_outputs_feed_the_next_step_dict_as_kwargs_scalar_as_its_one_parameter(
    make_executor: MakeExecutor,
) -> None:
    # Only the sequence is registered: its steps run all the same.
    ex = make_executor(_registry(PIPELINE), timeout=10)
    r = ex.execute(ToolCall(id="c", name="pipeline", arguments={"url": "x"}))
    assert (r.status, r.output) == ("ok", len("en:<P>X</P>"))
    steps = r.metadata["steps"]
    assert [(s["index"], s["call_id"], s["tool"], s["status"]) for s in steps] == [
        (0, "c.0", "fetch", "ok"),
        (1, "c.1", "parse", "ok"),
        (2, "c.2", "count", "ok"),
    ]


def test_the_sequence_takes_the_first_steps_parameters_and_rejects_bad_ones(
    make_executor: MakeExecutor,
) -> None:
    assert PIPELINE.schema == fetch.schema
    assert PIPELINE.schema is not fetch.schema  # its own copy
    ex = make_executor(_registry(PIPELINE), timeout=10)
    r = ex.execute(ToolCall(name="pipeline", arguments={"depth": 2}))
    assert (r.status, r.error_code, r.attempts) == ("rejected", ErrorCode.INVALID_ARGUMENTS, 0)
    assert r.error is not None and r.error.startswith("Invalid arguments for 'pipeline'")
    assert "url" in r.error


def test_a_non_dict_for_a_step_with_two_required_parameters_names_the_step(
    make_executor: MakeExecutor,
) -> None:
    bad = sequence("bad", [count, parse])  # an int into parse(text, lang)
    ex = make_executor(_registry(bad), timeout=10)
    r = ex.execute(ToolCall(id="b", name="bad", arguments={"s": "abc"}))
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert r.error is not None
    assert "Step 1 ('parse') of 'bad'" in r.error
    assert "2 required parameters (text, lang)" in r.error
    assert r.metadata["failed_step"] == 1 and r.metadata["failed_tool"] == "parse"


def test_a_custom_step_gets_text(make_executor: MakeExecutor) -> None:
    @tool(type="custom", read_only=True)
    def shout(text: str) -> str:
        return text.upper()

    chain = sequence("chain", [fetch, shout])
    ex = make_executor(_registry(chain), timeout=10)
    r = ex.execute(ToolCall(name="chain", arguments={"url": "u"}))
    assert r.status == "ok"
    assert json.loads(r.output.lower()) == {"text": "<p>u</p>", "lang": "en"}


def test_steps_given_by_name_are_looked_up_when_the_sequence_runs(
    make_executor: MakeExecutor,
) -> None:
    by_name = sequence("by_name", [fetch, "parse", "count"])
    missing = sequence("missing", [fetch, "nowhere"])
    reg = _registry(by_name, missing)
    ex = make_executor(reg, timeout=10)
    reg.register(parse)  # registered after the sequence was made: found all the same
    reg.register(count)
    assert ex.execute(ToolCall(name="by_name", arguments={"url": "x"})).output == 11
    r = ex.execute(ToolCall(name="missing", arguments={"url": "x"}))
    assert r.status == "error" and r.error is not None
    assert "Step 1 ('nowhere') of 'missing'" in r.error
    assert "no tool of that name is registered" in r.error


def test_without_an_executor_the_steps_run_directly() -> None:
    r = PIPELINE.execute({"url": "x"}, call_id="d")
    assert (r.status, r.output) == ("ok", 11)
    assert [s["call_id"] for s in r.metadata["steps"]] == ["d.0", "d.1", "d.2"]


# -- failures ---------------------------------------------------------------------------


def test_the_first_failure_ends_the_sequence_naming_the_step(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    chain = sequence("chain", [fetch, parse, explode, count])
    ex = make_executor(_registry(chain), timeout=10)
    r = ex.execute(ToolCall(id="f", name="chain", arguments={"url": "x"}))
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_ERROR, 1)
    assert r.error is not None
    assert r.error.startswith("Step 2 ('explode') of 'chain' ended error:")
    assert "ValueError: cannot parse 'en:<P>X</P>'" in r.error
    assert "(TOOL_ERROR)" in r.error
    assert r.metadata["failed_step"] == 2
    failed = r.metadata["steps"][-1]
    assert (failed["call_id"], failed["status"], failed["error_code"]) == (
        "f.2",
        "error",
        "TOOL_ERROR",
    )
    assert ex.drain_events()
    ran = {e.call_id for e in recorder.of(bus.FINISHED)}
    assert ran == {"f", "f.0", "f.1", "f.2"}  # step 3 never ran


def test_a_failed_step_is_not_retried_as_a_whole_sequence(make_executor: MakeExecutor) -> None:
    chain = sequence(
        "chain", [fetch, explode], retry=RetryPolicy(max_retries=3, retry_on=(Exception,))
    )
    ex = make_executor(_registry(chain), timeout=10)
    r = ex.execute(ToolCall(name="chain", arguments={"url": "x"}))
    assert (r.status, r.attempts) == ("error", 1)


# -- read-only --------------------------------------------------------------------------


def test_read_only_only_if_every_step_is() -> None:
    assert PIPELINE.read_only
    assert not sequence("w", [fetch, save]).read_only
    assert not sequence("n", [fetch, "count"]).read_only  # unknown until it runs
    assert sequence("i", [fetch, tool(idempotent=True)(save.fn)]).idempotent
    assert not sequence("m", [fetch, save]).idempotent


def test_a_mutating_sequence_is_a_barrier_in_a_batch(make_executor: MakeExecutor) -> None:
    writer = sequence("writer", [count, save])
    ex = make_executor(_registry(writer, count), timeout=10)
    b = ex.execute_batch(
        [
            ToolCall(name="count", arguments={"s": "a"}),
            ToolCall(name="writer", arguments={"s": "xyz"}),
        ]
    )
    assert [r.output for r in b] == [1, "saved 3"]
    assert (b.summary.read_only, b.summary.mutating) == (1, 1)


# -- events -----------------------------------------------------------------------------


def test_step_events_carry_their_ids_and_the_parent_call_id(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    ex = make_executor(_registry(PIPELINE), timeout=10)
    assert ex.execute(ToolCall(id="e", name="pipeline", arguments={"url": "x"})).ok
    assert ex.drain_events()
    for signal in (bus.EXECUTING, bus.EXECUTED, bus.FINISHED):
        parents = {e.call_id: e.parent_call_id for e in recorder.of(signal)}
        assert parents == {"e": None, "e.0": "e", "e.1": "e", "e.2": "e"}, signal
    finished = {e.call_id: e for e in recorder.of(bus.FINISHED)}
    assert finished["e.1"].tool == "parse"
    assert finished["e.0"].arguments == {"url": "x"}


def test_any_nested_call_carries_its_parent_call_id(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool
    def leaf() -> str:
        return "leaf"

    @reg.tool
    def outer() -> str:
        return str(holder["ex"].execute(ToolCall(id="inner", name="leaf")).output)

    ex = holder["ex"] = make_executor(reg, timeout=10)
    assert ex.execute(ToolCall(id="top", name="outer")).ok
    assert ex.drain_events()
    assert {e.call_id: e.parent_call_id for e in recorder.of(bus.FINISHED)} == {
        "top": None,
        "inner": "top",
    }


def test_unregistered_steps_are_logged_by_their_names(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry(PIPELINE), timeout=10)
    out = io.StringIO()
    with log_json(ex, out, signals=(bus.FINISHED,)):
        assert ex.execute(ToolCall(id="l", name="pipeline", arguments={"url": "x"})).ok
        assert ex.drain_events()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {(x["call_id"], x["tool"], x["parent_call_id"]) for x in lines} == {
        ("l", "pipeline", None),
        ("l.0", "fetch", "l"),
        ("l.1", "parse", "l"),
        ("l.2", "count", "l"),
    }


def test_the_first_steps_secrets_are_masked_in_the_sequences_events(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    @tool(read_only=True)
    def login(user: str, pin: SecretStr) -> str:
        return f"{user}:{len(pin.get_secret_value())}"

    chain = sequence("chain", [login, count])
    ex = make_executor(_registry(chain), timeout=10)
    # Letters: a secret of digits can turn up in an event's timestamp by chance.
    r = ex.execute(ToolCall(id="s", name="chain", arguments={"user": "bo", "pin": "qzxvw"}))
    assert (r.status, r.output) == ("ok", 4)
    assert ex.drain_events()
    shown = {e.call_id: e.arguments for e in recorder.of(bus.EXECUTING)}
    assert shown["s"]["pin"] != "qzxvw" and shown["s.0"]["pin"] != "qzxvw"
    assert "qzxvw" not in repr(recorder.events)


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_a_step_hands_the_next_its_output_as_its_tool_gave_it(
    make_executor: MakeExecutor,
    recorder: bus.Recorder,
    caplog: pytest.LogCaptureFixture,
    nested: bool,
) -> None:
    # A step's result is scrubbed of every secret it knew (the model may read
    # it), but the next step is handed its output raw: a tool gets raw values.
    # Letters: a secret of digits can turn up in an event's timestamp by chance.
    key, ticket = "kqzxvwyplmbhg", "tgrsnmlkjwvbq"
    handed: list[str] = []

    @tool(read_only=True)
    def login(user: str, api_key: str) -> dict[str, Any]:
        return {"session": f"sess-{api_key}", "user": user}  # the sequence's secret, renamed

    @tool(read_only=True)
    def connect(session: str, user: str, ticket: Annotated[str, Injected]) -> dict[str, Any]:
        handed.append(session)
        return {"conn": f"{session}/{ticket}"}  # and a secret of its own, under a plain name

    @tool(read_only=True)
    def use(conn: str) -> str:
        handed.append(conn)
        return f"used {conn}"

    # Nested: the first steps a sequence of their own, which hands on its
    # last step's output as that step's tool gave it too.
    chain = (
        sequence("chain", [sequence("auth", [login, connect]), use])
        if nested
        else sequence("chain", [login, connect, use])
    )
    ex = make_executor(_registry(chain), timeout=10, inject={"ticket": lambda call: ticket})
    caplog.set_level(logging.DEBUG, logger="toolbus")
    r = ex.execute(ToolCall(id="s", name="chain", arguments={"user": "bo", "api_key": key}))
    assert r.status == "ok", r.error
    assert handed == [f"sess-{key}", f"sess-{key}/{ticket}"]
    assert r.output == "used sess-***/***"
    assert ex.drain_events()
    for published in (repr(recorder.events), r.model_dump_json(), caplog.text):
        assert key not in published and ticket not in published


# -- each step's own timeout and retries ---------------------------------------------------


def test_a_step_times_out_and_retries_by_its_own_policy(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    attempts: list[int] = []

    # 2 s: the retry runs under the same timeout as the hung first attempt,
    # and must end ok (0.2 s was not always enough on a busy machine).
    @tool(read_only=True, timeout=2, retry=RetryPolicy(max_retries=1, backoff_base=0.01))
    async def flaky(text: str, lang: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await asyncio.Event().wait()  # hangs until its deadline cancels it
        return text

    chain = sequence("chain", [fetch, flaky, count])
    ex = make_executor(_registry(chain), timeout=30)
    r = ex.execute(ToolCall(id="t", name="chain", arguments={"url": "x"}))
    assert (r.status, r.output) == ("ok", len("<p>x</p>"))
    assert r.metadata["steps"][1]["attempts"] == 2
    assert ex.drain_events()
    timeouts = recorder.of(bus.TIMEOUT)
    assert [(e.call_id, e.parent_call_id, e.timeout) for e in timeouts] == [("t.1", "t", 2)]
    retried = recorder.of(bus.RETRY_ATTEMPT)
    assert [(e.call_id, e.parent_call_id, e.attempt) for e in retried] == [("t.1", "t", 2)]


def test_a_step_that_keeps_timing_out_ends_the_sequence(make_executor: MakeExecutor) -> None:
    @tool(read_only=True, timeout=0.1)
    async def stuck(n: int) -> int:
        await asyncio.Event().wait()  # hangs until its deadline cancels it
        return n

    chain = sequence("chain", [count, stuck])
    ex = make_executor(_registry(chain), timeout=30)
    r = ex.execute(ToolCall(name="chain", arguments={"s": "abc"}))
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert r.error is not None and "Step 1 ('stuck') of 'chain' ended timeout" in r.error
    assert r.metadata["steps"][1]["error_code"] == "EXECUTION_TIMEOUT"


def test_a_sequence_that_times_out_cancels_its_running_step(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    @tool(read_only=True, timeout=float("inf"))
    async def forever(n: int) -> int:
        await asyncio.Event().wait()  # only a cancellation ends it
        return n

    # 2 s: its first step must be done, and the second running, when it runs
    # out (0.3 s could end it during the first on a busy machine).
    chain = sequence("chain", [count, forever], timeout=2)
    ex = make_executor(_registry(chain))
    r = ex.execute(ToolCall(id="x", name="chain", arguments={"s": "abc"}))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    step = recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "x.1")[0]
    # Ended with its sequence: cancelled by it, or at the deadline it
    # inherited from it, the same instant (whichever timer acts first).
    assert step.parent_call_id == "x"
    assert (step.result.status, step.result.error_code) in (
        ("cancelled", ErrorCode.CANCELLED),
        ("timeout", ErrorCode.DEADLINE_EXCEEDED),
    )
    assert ex.stats().in_flight == 0


# -- capacity: a sequence takes one slot ----------------------------------------------------


@pytest.mark.parametrize("how", ["sync", "async"])
def test_a_sequence_runs_at_max_parallel_1(make_executor: MakeExecutor, how: str) -> None:
    ex = make_executor(_registry(PIPELINE, save), max_parallel=1, timeout=10)
    call = ToolCall(name="pipeline", arguments={"url": "x"})
    r = ex.execute(call) if how == "sync" else asyncio.run(ex.aexecute(call))
    assert (r.status, r.output) == ("ok", 11)


def test_a_running_step_takes_no_slot_of_its_own(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    gate = threading.Event()

    @tool(read_only=True)
    def wait(n: int) -> int:
        gate.wait(10)
        return n

    chain = sequence("chain", [count, "wait"])
    ex = make_executor(_registry(chain, wait), max_parallel=2, timeout=10)
    done: list[Any] = []

    def call(c: ToolCall) -> threading.Thread:
        t = threading.Thread(target=lambda: done.append(ex.execute(c)))
        t.start()
        return t

    threads = [call(ToolCall(id="q", name="chain", arguments={"s": "ab"}))]
    try:
        recorder.wait_for(bus.EXECUTING, where=lambda e: e.call_id == "q.1")
        # The sequence and its step hold one slot between them: a second call
        # starts beside them.
        threads.append(call(ToolCall(id="o", name="wait", arguments={"n": 1})))
        recorder.wait_for(bus.EXECUTING, where=lambda e: e.call_id == "o")
        assert ex.stats().in_flight == 3
    finally:
        gate.set()
        for t in threads:
            t.join(10)
    assert sorted(r.status for r in done) == ["ok", "ok"]


def test_sequences_in_a_batch_from_sync_and_async_callers(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry(PIPELINE, count), max_parallel=1, timeout=10)
    calls = [
        ToolCall(name="pipeline", arguments={"url": "a"}),
        ToolCall(name="count", arguments={"s": "abc"}),
        ToolCall(name="pipeline", arguments={"url": "bb"}),
    ]
    sync = ex.execute_batch(calls)
    assert [r.output for r in sync] == [11, 3, 12]

    async def main() -> Any:
        return await ex.aexecute_batch(calls)

    assert [r.output for r in asyncio.run(main())] == [11, 3, 12]


async def test_a_sequence_awaited_on_the_callers_loop(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry(PIPELINE), max_parallel=1, timeout=10)
    results = await asyncio.gather(
        *(ex.aexecute(ToolCall(name="pipeline", arguments={"url": u})) for u in "abc")
    )
    assert [r.output for r in results] == [11, 11, 11]


def test_a_sequence_of_sequences(make_executor: MakeExecutor) -> None:
    inner = sequence("inner", [parse, count])
    outer = sequence("outer", [fetch, inner])
    assert outer.read_only
    ex = make_executor(_registry(outer), max_parallel=1, timeout=10)
    r = ex.execute(ToolCall(id="o", name="outer", arguments={"url": "x"}))
    assert (r.status, r.output) == ("ok", 11)
    assert [s["call_id"] for s in r.metadata["steps"]] == ["o.0", "o.1"]


# -- idempotency keys -----------------------------------------------------------------------


def test_steps_keys_follow_the_sequences(make_executor: MakeExecutor) -> None:
    keys: list[str | None] = []

    @tool(read_only=True)
    def key_of(text: str, lang: str, ctx: ToolContext) -> str:
        keys.append(ctx.idempotency_key)
        return text

    chain = sequence("chain", [fetch, key_of])
    ex = make_executor(_registry(chain), timeout=10)
    assert ex.execute(ToolCall(name="chain", arguments={"url": "x"}, idempotency_key="K")).ok
    assert keys == ["K.1"]
    assert generated_id("call_1f_3.0") and generated_id("call_1f_3.0.2")
    assert not generated_id("model-id.0")


# -- exports and construction ---------------------------------------------------------------


def test_exported_schemas_show_the_first_steps_parameters() -> None:
    reg = _registry(PIPELINE)
    chat: Any = openai.chat_tool_definitions(reg)[0]
    assert chat["function"]["parameters"] == fetch.schema
    assert chat["function"]["description"] == "Fetch, parse, count."
    strict: Any = openai.chat_tool_definitions(reg, strict=True)[0]
    assert set(strict["function"]["parameters"]["properties"]) == {"url", "depth"}
    resp: Any = openai.responses_tool_definitions(reg)[0]
    assert resp["parameters"] == fetch.schema
    claude: Any = anthropic.tool_definitions(reg)[0]
    assert claude["input_schema"] == fetch.schema


def test_construction_is_checked() -> None:
    with pytest.raises(TypeError, match="first step must be a Tool"):
        sequence("s", ["fetch", count])
    with pytest.raises(ValueError, match="at least one step"):
        sequence("s", [])
    with pytest.raises(TypeError, match="step 1 must be a Tool"):
        sequence("s", [fetch, 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="list of tools"):
        sequence("s", fetch)  # type: ignore[arg-type]
    s = sequence("s", [fetch])
    assert isinstance(s, SequenceTool) and s.is_async and s.process_local
    assert s.description == "Runs fetch: each step's output is the next one's input."


# -- approvals (review 9): a step guarded by requires_approval makes the sequence ask --------


def _guarded(ran: list[str], **approval: Any) -> tuple[Tool, Tool]:
    from toolbus.policies import requires_approval

    @tool(read_only=True)
    def prep(x: int) -> int:
        ran.append(f"prep {x}")
        return x

    @tool(policies=[requires_approval(**approval)])
    def danger(x: int) -> str:
        ran.append(f"danger {x}")
        return "boom"

    return prep, danger


def test_a_step_needing_approval_makes_the_sequence_ask_before_any_step_runs(
    make_executor: MakeExecutor,
) -> None:
    ran: list[str] = []
    prep, danger = _guarded(ran)
    seq = sequence("seq", [prep, danger])
    assert not prep.policies and len(seq.policies) == 1  # the sequence's own requires_approval
    ex = make_executor(_registry(seq))
    call = ToolCall(id="s1", name="seq", arguments={"x": 1})
    first = ex.execute(call)
    assert (first.status, first.error_code) == ("deferred", ErrorCode.APPROVAL_REQUIRED)
    request = first.approval_request
    assert request is not None and (request.call_id, request.tool) == ("s1", "seq")
    assert "'danger'" in (first.error or "") and ran == []  # nothing ran before the decision
    # A decision for other arguments, or none, never runs it.
    other = ex.execute(
        ToolCall(id="s1", name="seq", arguments={"x": 2}), approval=request.approve()
    )
    assert other.status == "deferred" and ran == []
    denied = ex.execute(call, approval=request.deny("not today"))
    assert denied.status == "rejected" and denied.error_code is ErrorCode.TOOL_NOT_ALLOWED
    approved = ex.execute(call, approval=request.approve())
    assert (approved.status, approved.output) == ("ok", "boom"), approved
    assert ran == ["prep 1", "danger 1"]  # the sequence's approval covered its step's
    # The step itself, called alone, still asks.
    assert ex.execute(ToolCall(name="danger", arguments={"x": 1})).status == "rejected"


def test_a_sequence_of_sequences_asks_once_at_the_top(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    prep, danger = _guarded(ran, when=lambda c: True)  # conditional: the sequence asks anyway
    inner = sequence("inner", [prep, danger])
    outer = sequence("outer", [prep, inner])
    ex = make_executor(_registry(outer))
    call = ToolCall(id="o", name="outer", arguments={"x": 3})
    request = ex.execute(call).approval_request
    assert request is not None and request.tool == "outer" and ran == []
    assert ex.execute(call, approval=request.approve()).status == "ok"
    assert ran == ["prep 3", "prep 3", "danger 3"]


def test_an_executors_approval_policy_covers_a_sequences_steps(
    make_executor: MakeExecutor,
) -> None:
    """Executor policies guard the steps too: the sequence's approval (asked
    by them, unconditional or for the sequence's name) covers its steps'."""
    from toolbus.policies import requires_approval

    ran: list[str] = []
    prep, danger = _guarded(ran)
    for policy in (requires_approval(), requires_approval(when=lambda c: c.name != "prep")):
        ran.clear()
        reg = ToolRegistry()
        reg.register(sequence("seq", [prep, "danger"]))
        reg.register(danger)
        ex = make_executor(reg, policies=[policy])
        call = ToolCall(id="s", name="seq", arguments={"x": 4})
        request = ex.execute(call).approval_request
        assert request is not None and ran == []
        assert ex.execute(call, approval=request.approve()).status == "ok"
        assert ran == ["prep 4", "danger 4"]


def test_a_step_approval_the_sequence_cannot_know_of_ends_it_saying_so(
    make_executor: MakeExecutor,
) -> None:
    """A step given by name is found when the sequence runs: the sequence did
    not ask for approval, and the step's cannot be given. It ends `error`
    saying how to guard it, having run nothing that needed approval."""
    ran: list[str] = []
    prep, danger = _guarded(ran)
    reg = _registry(sequence("seq", [prep, "danger"]), danger)
    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="s", name="seq", arguments={"x": 5}))
    assert r.status == "error" and r.metadata["failed_step"] == 1
    assert "ended deferred" in (r.error or "") and "requires_approval()" in (r.error or "")
    assert ran == ["prep 5"]
    # An approval passed for the sequence's own arguments covers it.
    from toolbus.policies import ApprovalDecision, arguments_digest

    # (Made by hand, as a caller that signs with the executor's own secret would.)
    digest = arguments_digest("seq", {"x": 5}, secret=ex._services.key_secret)
    decision = ApprovalDecision(digest=digest, approved=True)
    assert ex.execute(ToolCall(id="s", name="seq", arguments={"x": 5}), approval=decision).ok
    assert ran == ["prep 5", "prep 5", "danger 5"]


def test_a_sequences_own_policies(make_executor: MakeExecutor) -> None:
    """`policies=`: asked for the sequence's call, before any step runs; its
    own requires_approval() covers a step given by name."""
    from toolbus.policies import quota, requires_approval

    ran: list[str] = []
    prep, danger = _guarded(ran)
    own = requires_approval()
    seq = sequence("seq", [prep, "danger"], policies=[quota(1), own])
    assert seq.policies[1] is own and len(seq.policies) == 2  # no second approval added
    ex = make_executor(_registry(seq, danger))
    call = ToolCall(id="s", name="seq", arguments={"x": 6})
    request = ex.execute(call).approval_request
    assert request is not None and ran == []
    assert ex.execute(call, approval=request.approve()).ok
    assert ran == ["prep 6", "danger 6"]
    again = ex.execute(ToolCall(id="t", name="seq", arguments={"x": 7}))
    assert again.error_code is ErrorCode.QUOTA_EXCEEDED  # the sequence's own quota
    with pytest.raises(TypeError, match="sequence 'bad'"):
        sequence("bad", [prep], policies=["not a policy"])


def test_a_step_needing_approval_surfaces_its_request() -> None:
    """A sequence step that needs approval ended TOOL_ERROR with no request to approve (review 9)."""

    @tool(read_only=True)
    def prep(x: int) -> int:
        return x

    @tool(policies=[requires_approval()])
    def danger(x: int) -> str:
        return "boom"

    reg = ToolRegistry()
    reg.register(sequence("seq", [prep, danger]))
    with Executor(reg) as ex:
        r = ex.execute(ToolCall(id="s1", name="seq", arguments={"x": 1}))
    # Today: status "error" (TOOL_ERROR), no approval_request; no decision can run it.
    assert r.status == "deferred" and r.approval_request is not None


@pytest.mark.parametrize("timeout", [5.0, None])
def test_a_sequence_that_names_itself_is_stopped_by_the_nesting_bound(
    make_executor: MakeExecutor, timeout: float | None
) -> None:
    """Steps named by name are found as the sequence runs: one that names
    its own sequence nests without end. The call `MAX_NESTING` deep is
    refused; the sequence ends `error` saying so (found by a bug hunt: it
    grew until memory or its deadline ran out)."""
    from toolbus._executor._plan import MAX_NESTING

    @tool(read_only=True)
    def inc(x: int) -> int:
        return x + 1

    reg = ToolRegistry()
    reg.register(sequence("loop", [inc, "loop"]))
    ex = make_executor(reg, timeout=timeout)
    r = ex.execute(ToolCall(id="L", name="loop", arguments={"x": 1}))
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert f"calls nest more than {MAX_NESTING} deep" in (r.error or "")
