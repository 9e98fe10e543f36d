"""Admission driven without an executor (`toolbus.pipeline`): the plain
admission, which admits the common call with no generator, decides and
publishes exactly what the full one does; and an ok result made without
validation is the validated one."""

from __future__ import annotations

import contextvars
import json
import pickle
from typing import Annotated, Any

import orjson
import pytest
from pydantic import SecretStr

from toolbus import Injected, RetryPolicy, ToolCall, tool
from toolbus.bus import Emitter, NullPublisher
from toolbus.masking import SecretKeys
from toolbus.models import ToolResult
from toolbus.pipeline import Run, Services
from toolbus.pipeline._admission import NOT_PLAIN, admit, admit_plain
from toolbus.pipeline._make import make_result, ok_result, parsed_call
from toolbus.tools import Tool, normalize_output

from ._hooks import DefaultHooks


@tool
def lookup(i: int, api_key: str = "", opts: dict[str, Any] | None = None) -> int:
    return i


def _services(limit: int = 1000) -> Services:
    return Services(
        emitter=Emitter(NullPublisher(), None),  # type: ignore[arg-type]
        hooks=DefaultHooks(),
        max_argument_bytes=limit,
        plain_admission=True,
        secret_keys=SecretKeys(),
    )


def _run(call: ToolCall, t: Tool = lookup) -> Run:
    run = Run(call, t, context=contextvars.copy_context(), timeout=None, policy=RetryPolicy())
    run.begin_attempt(1)
    return run


def _admitted_by_steps(run: Run, svc: Services) -> ToolResult | None:
    steps = admit(run, svc)
    try:
        steps.send(None)
    except StopIteration as stop:
        result: ToolResult | None = stop.value
        return result
    raise AssertionError("plain admission yielded")


def _seen(run: Run, outcome: ToolResult | None) -> dict[str, Any]:
    """What either admission leaves behind, as the rest of the call sees it."""
    return {
        "outcome": None
        if outcome is None
        else (outcome.status, outcome.error_code, outcome.error, outcome.attempts),
        "admitted": run.admitted,
        "params": None if run.params is None else run.params.model_dump(),
        "call": run.call.model_dump(),
        "masked": run.masked,
        "scrubbed": run.scrubber.text("key s3cret-value and p4ss-word here"),
    }


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


CALLS = {
    "plain": ToolCall(name="lookup", arguments={"i": 1}),
    "invalid": ToolCall(name="lookup", arguments={"i": "one"}),
    "text": ToolCall(name="lookup", arguments='{"i": 2}'),
    "bad text": ToolCall(name="lookup", arguments='{"i": '),
    "too large": ToolCall(name="lookup", arguments={"i": 3, "opts": {"pad": "x" * 2000}}),
    "secret": ToolCall(name="lookup", arguments={"i": 4, "api_key": "s3cret-value"}),
    "nested secret": ToolCall(
        name="lookup", arguments={"i": 5, "opts": {"deep": [{"password": "p4ss-word"}]}}
    ),
    "secret in text": ToolCall(name="lookup", arguments='{"i": 6, "api_key": "s3cret-value"}'),
    "not JSON": ToolCall.model_construct(id="c1", name="lookup", arguments={"i": 7, "x": object()}),
    "bad key": ToolCall.model_construct(
        id="c2", name="lookup", arguments={"i": 8}, idempotency_key="  "
    ),
    "empty": ToolCall(name="lookup", arguments={}),
    "too deep": ToolCall(name="lookup", arguments={"i": 9, "opts": _nested(300)}),
}


@pytest.mark.parametrize("case", sorted(CALLS))
def test_plain_admission_decides_and_publishes_as_the_full_one(case: str) -> None:
    call = CALLS[case]
    svc = _services()
    plain, full = _run(call), _run(call)
    outcome = admit_plain(plain, svc)
    assert outcome is not NOT_PLAIN
    assert _seen(plain, outcome) == _seen(full, _admitted_by_steps(full, svc))
    if outcome is None:  # what is published holds no secret, and is a copy
        text = orjson.dumps(plain.masked).decode()
        assert "s3cret" not in text and "p4ss" not in text
        assert plain.masked is not plain.call.arguments


def test_plain_admission_is_not_for_calls_that_need_more() -> None:
    """Hooks, a tool's secret-typed values or injected values: the full admission."""

    @tool
    def typed(token: SecretStr) -> str:
        return token.get_secret_value()

    @tool
    def injected(i: int, user: Annotated[str, Injected]) -> int:
        return i

    svc = _services()
    hooked = Services(
        emitter=svc.emitter, hooks=svc.hooks, max_argument_bytes=1000, plain_admission=False
    )
    for run, services in [
        (_run(ToolCall(name="typed", arguments={"token": "t"}), typed), svc),
        (_run(ToolCall(name="injected", arguments={"i": 1}), injected), svc),
        (_run(CALLS["plain"]), hooked),
    ]:
        assert admit_plain(run, services) is NOT_PLAIN
        assert (run.admitted, run.masked, run.phase) == (False, None, "queued")


@pytest.mark.parametrize("value", [7, "text", None, True, 2.5, {"a": [1, {"b": None}]}, [1, 2]])
def test_an_ok_result_made_without_validation_is_the_validated_one(value: Any) -> None:
    run = _run(CALLS["plain"])
    output, attachments, metadata = normalize_output(value)
    assert attachments == ()
    made = ok_result(run, output, metadata)
    validated = make_result(run, "ok", output=output, metadata=dict(metadata))
    assert made.model_dump() == {**validated.model_dump(), "duration": made.duration}
    assert made.model_fields_set == validated.model_fields_set
    assert made.model_dump_json(exclude={"duration"}) == validated.model_dump_json(
        exclude={"duration"}
    )
    again = pickle.loads(pickle.dumps(made))
    assert again == made and isinstance(again, ToolResult)
    # A copy with changes, as `finish` makes one, leaves the original alone.
    late = made.model_copy(update={"metadata": {**made.metadata, "completed_late": True}})
    assert late.metadata == {"completed_late": True} and made.metadata == {}
    assert "metadata" in late.model_fields_set and made.model_fields_set is not (
        late.model_fields_set
    )
    with pytest.raises(Exception, match="frozen"):
        made.status = "error"  # type: ignore[misc]


@pytest.mark.parametrize("key", [None, "order-7"])
def test_a_call_whose_text_is_parsed_is_the_one_model_construct_makes(key: str | None) -> None:
    call = ToolCall(id="c1", name="lookup", arguments='{"i": 3}', idempotency_key=key)
    made = parsed_call(call, {"i": 3})
    built = ToolCall.model_construct(id="c1", name="lookup", arguments={"i": 3})
    assert made == built and made.model_dump() == built.model_dump()
    assert made.model_fields_set == built.model_fields_set == {"id", "name", "arguments"}
    assert made.model_fields_set is not parsed_call(call, {}).model_fields_set
    assert made.idempotency_key is None  # the run keeps the caller's key
    assert pickle.loads(pickle.dumps(made)) == made
    assert made.with_arguments({"i": 4}).arguments == {"i": 4} and made.arguments == {"i": 3}
    with pytest.raises(Exception, match="frozen"):
        made.name = "other"  # type: ignore[misc]


def test_the_plain_admission_parses_text_arguments_into_the_call() -> None:
    run = _run(ToolCall(id="c1", name="lookup", arguments='{"i": 3}', idempotency_key="k-1"))
    assert admit_plain(run, _services()) is None
    assert run.call == ToolCall.model_construct(id="c1", name="lookup", arguments={"i": 3})
    assert run.params is not None and run.origin.idempotency_key == "k-1"


def test_arguments_that_json_cannot_write_are_refused_in_the_usual_form() -> None:
    """Arguments nested past orjson's limit were refused as "Arguments are not
    JSON: Recursion limit reached": false (they are JSON), and without the
    "Invalid arguments for" the other refusals start with (bug hunt)."""
    for depth in (300, 5000):
        run = _run(ToolCall(name="lookup", arguments={"i": 1, "opts": _nested(depth)}))
        outcome = admit_plain(run, _services(limit=10**6))
        assert isinstance(outcome, ToolResult) and outcome.error_code == "INVALID_ARGUMENTS"
        assert outcome.error == (
            "Invalid arguments for 'lookup': Arguments nest too deeply"
            " (more than 254 levels of objects and arrays)"
        )
    run = _run(CALLS["not JSON"])
    outcome = admit_plain(run, _services())
    assert isinstance(outcome, ToolResult) and outcome.error is not None
    assert outcome.error.startswith("Invalid arguments for 'lookup': Arguments are not JSON: ")


def _nested_text(levels: int, leaf: str = "{}") -> str:
    """Arguments for `lookup` as JSON text nesting `levels` objects deep in all."""
    inner = levels - 2
    return '{"i": 1, "opts": ' + '{"a": ' * inner + leaf + "}" * inner + "}"


@pytest.mark.parametrize("full", [False, True], ids=["plain", "full"])
def test_text_arguments_nest_as_deep_as_a_dict_may_and_no_deeper(full: bool) -> None:
    """Text was parsed by orjson, which reads 1,024 levels: arguments refused
    as a dict past 254 levels ran as text, and 1,000 levels deep failed
    later, in masking, with an internal error (bug hunt)."""
    too_deep = (
        "Invalid arguments for 'lookup': Arguments nest too deeply"
        " (more than 254 levels of objects and arrays)"
    )

    def outcome(arguments: dict[str, Any] | str) -> tuple[Any, ...] | None:
        run = _run(ToolCall(name="lookup", arguments=arguments))
        svc = _services(limit=10**6)
        result = _admitted_by_steps(run, svc) if full else admit_plain(run, svc)
        assert result is not NOT_PLAIN
        return None if result is None else (result.status, result.error_code, result.error)

    for levels, admitted in ((254, True), (255, False)):
        text = _nested_text(levels)
        assert outcome(text) == outcome(orjson.loads(text))
        assert outcome(text) == (None if admitted else ("rejected", "INVALID_ARGUMENTS", too_deep))
    # Deeper: past where masking's recursion failed, where orjson stops
    # reading (1,024), and where the stdlib rereads a long integer.
    for text in (
        _nested_text(1000),
        _nested_text(1100),
        _nested_text(1010, leaf='{"n": 123456789012345678901234567890}'),
    ):
        assert outcome(text) == ("rejected", "INVALID_ARGUMENTS", too_deep)


@pytest.mark.parametrize("full", [False, True], ids=["plain", "full"])
def test_an_integer_wider_than_64_bits_lets_no_level_more_in(full: bool) -> None:
    """orjson refuses a 255th level, empty or not; the writer standing in for
    it where an integer is wider than 64 bits counted values, not containers,
    and took 255 levels whose innermost was empty, as text and as a dict (review)."""

    def text(levels: int) -> str:
        inner = levels - 2
        wide = '{"n": 123456789012345678901234567890, "a": '
        return '{"i": 1, "opts": ' + wide + '{"a": ' * (inner - 1) + "{}" + "}" * inner + "}"

    def outcome(arguments: dict[str, Any] | str) -> tuple[Any, ...] | None:
        run = _run(ToolCall(name="lookup", arguments=arguments))
        svc = _services(limit=10**6)
        result = _admitted_by_steps(run, svc) if full else admit_plain(run, svc)
        return None if not isinstance(result, ToolResult) else (result.status, result.error)

    for arguments in (text(254), json.loads(text(254))):
        assert outcome(arguments) is None
    for arguments in (text(255), json.loads(text(255))):
        assert outcome(arguments) == (
            "rejected",
            "Invalid arguments for 'lookup': Arguments nest too deeply"
            " (more than 254 levels of objects and arrays)",
        )
