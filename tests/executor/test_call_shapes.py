"""The calls a model sends, in every shape: mappings keep their id and name,
arguments that are not an object are refused unrun, a call that is not a
mapping is an unknown tool, a malformed call is logged without its secrets,
and integers beyond 64 bits stay exact from the arguments to every
provider's format.

Pins defects found outside the repo: a mapping whose arguments are not an
object must never run its tool with the defaults (here: deleting
everything), a malformed call's DEBUG log line must not print its
arguments, and big integers must not turn into floats.
"""

from __future__ import annotations

import decimal
import enum
import logging
import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import MakeExecutor
from toolbus import (
    ErrorCode,
    Executor,
    ToolCall,
    ToolRegistry,
    ToolResult,
    format_result_for_context,
    tool,
)
from toolbus import calls as toolbus_calls
from toolbus._json import dumps, dumps_surrogatepass, loads, loads_surrogatepass
from toolbus.calls import coerce_call
from toolbus.providers import anthropic, openai

# -- 2. calls given as mappings keep their id and name; bad arguments are rejected -----------


@pytest.fixture
def deletions() -> list[Any]:
    return []


@pytest.fixture
def ex(make_executor: MakeExecutor, deletions: list[Any]) -> Executor:
    reg = ToolRegistry()

    @reg.tool
    def delete_files(paths: list[str] | None = None, everything: bool = True) -> str:
        deletions.append((paths, everything))
        return "deleted"

    @reg.tool(type="custom")
    def shout(text: str) -> str:
        deletions.append(text)
        return text.upper()

    @reg.tool(read_only=True)
    def echo_int(n: int) -> int:
        return n

    @reg.tool(read_only=True)
    def big_result(shape: str) -> Any:
        return SHAPES[shape]

    return make_executor(reg)


BAD_ARGUMENTS = [[1, 2], [], 42, 1.5, True, "[1]", {1: "a"}, {"paths": [], 2: "b"}, b"\xff\xfe"]


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS)
@pytest.mark.parametrize("shape", ["plain", "openai"])
def test_mapping_with_non_object_arguments_is_rejected_and_keeps_its_id_and_name(
    ex: Executor, deletions: list[Any], arguments: Any, shape: str
) -> None:
    if shape == "plain":
        call: dict[str, Any] = {"id": "c1", "name": "delete_files", "arguments": arguments}
    else:
        function = {"name": "delete_files", "arguments": arguments}
        call = {"id": "c1", "type": "function", "function": function}
    r = ex.execute(call)
    assert (r.call_id, r.name, r.status) == ("c1", "delete_files", "rejected")
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error is not None and r.error.startswith("Invalid arguments for 'delete_files'")
    assert deletions == []  # the tool never ran


def test_mapping_batch_with_bad_arguments(ex: Executor, deletions: list[Any]) -> None:
    batch = ex.execute_batch(
        [{"id": f"b{i}", "name": "delete_files", "arguments": a} for i, a in enumerate([[1], 7])]
    )
    assert [(r.call_id, r.error_code) for r in batch] == [
        ("b0", ErrorCode.INVALID_ARGUMENTS),
        ("b1", ErrorCode.INVALID_ARGUMENTS),
    ]
    assert deletions == []


def test_custom_tool_refuses_text_that_is_not_utf8(ex: Executor, deletions: list[Any]) -> None:
    r = ex.execute({"id": "c2", "name": "shout", "arguments": b"caf\xe9"})
    assert (r.call_id, r.error_code) == ("c2", ErrorCode.INVALID_ARGUMENTS)
    assert r.error is not None and "UTF-8" in r.error
    assert ex.execute({"id": "c3", "name": "shout", "arguments": "café".encode()}).output == "CAFÉ"
    assert deletions == ["café"]


def test_mapping_with_good_arguments_runs(ex: Executor, deletions: list[Any]) -> None:
    for arguments in [{"paths": ["a"]}, '{"paths": ["a"]}', b'{"paths": ["a"]}']:
        r = ex.execute({"id": 7, "name": "delete_files", "arguments": arguments})
        assert (r.call_id, r.status) == ("7", "ok")
    assert ex.execute({"name": "delete_files", "arguments": None}).status == "ok"  # = absent
    assert deletions == [(["a"], True)] * 3 + [(None, True)]


def test_coercion_keeps_every_toolcall_field() -> None:
    call = ToolCall(id="x1", name="delete_files", arguments={"paths": ["a"]})
    as_mapping = call.model_dump()
    assert set(as_mapping) == set(ToolCall.model_fields)
    assert coerce_call(as_mapping) == call
    shaped = {
        **{k: v for k, v in as_mapping.items() if k not in ("name", "arguments")},
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    assert coerce_call(shaped) == call


class _Name(str, enum.Enum):  # noqa: UP042 (its str() is not its value, unlike StrEnum)
    ECHO = "echo_int"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("call_id", "name", "arguments", "status"),
    [
        (5, "echo_int", {"n": 1}, "ok"),
        (5, "echo_int", {"n": "one"}, "rejected"),
        ("c7", _Name.ECHO, {"n": 1}, "ok"),
        (type("Id", (str,), {})("c8"), "echo_int", {"n": 1}, "ok"),
        (["l"], "echo_int", {"n": 1}, "ok"),  # (unhashable: a batch looks up its approval)
    ],
)
def test_a_toolcall_made_without_validation_is_answered_in_text(
    ex: Executor, call_id: Any, name: Any, arguments: Any, status: str
) -> None:
    """`ToolCall.model_construct` (as frameworks build calls) with an id that
    is not text, or a `str` subclass for a name (an enum's member): the call
    is read as its mapping would be, and its result answers it in plain text
    (an int id hung the caller: no result could be made for it)."""
    call = ToolCall.model_construct(id=call_id, name=name, arguments=arguments)
    for result in (ex.execute(call), ex.execute_batch([call]).results[0]):
        assert result.status == status
        assert type(result.call_id) is str and result.call_id == str(call_id)
        assert type(result.name) is str and result.name == "echo_int"
        assert ToolResult.model_validate(result.model_dump()) == result


@pytest.mark.timeout(30)
def test_a_toolcall_made_without_a_name_is_an_unknown_tool(ex: Executor) -> None:
    call = ToolCall.model_construct(id="c9", arguments={"n": 1})
    for result in (ex.execute(call), ex.execute_batch([call]).results[0]):
        assert (result.status, result.error_code) == ("rejected", ErrorCode.TOOL_NOT_FOUND)
        assert (result.call_id, result.name) == ("c9", toolbus_calls.UNREADABLE_CALL)


@pytest.mark.parametrize("call", [None, 42, "delete_files", ["delete_files"]])
def test_a_call_that_is_not_a_mapping_is_unknown_not_run(
    ex: Executor, deletions: list[Any], call: Any
) -> None:
    r = ex.execute(call)
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_FOUND)
    assert deletions == []


# -- 3. no secret in the DEBUG log of a malformed call ------------------------------------

SECRET = "Zq5topsecretvalue"


def test_malformed_calls_log_no_secret_at_debug(
    ex: Executor, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    for arguments in [{1: SECRET, "api_key": SECRET}, [{"token": SECRET}], SECRET.encode()]:
        ex.execute({"id": "m1", "name": "delete_files", "arguments": arguments})
    # A field pydantic refuses reaches the log line that used to print its input.
    monkeypatch.setattr(
        toolbus_calls,
        "_fields",
        lambda call: {"id": "m2", "name": "delete_files", "arguments": {1: SECRET}},
    )
    coerced = coerce_call({"ignored": True})
    assert coerced.name == toolbus_calls.UNREADABLE_CALL
    logged = [r for r in caplog.records if r.levelno == logging.DEBUG and "tool call" in r.msg]
    assert any("arguments" in r.getMessage() for r in logged)
    for record in caplog.records:
        assert SECRET not in record.getMessage()


# -- 5. integers beyond 64 bits stay exact ------------------------------------------------

BIG = 123456789012345678901234567890


@pytest.mark.parametrize("arguments", [f'{{"n": {BIG}}}', {"n": BIG}, f'{{"n": {BIG}}}'.encode()])
def test_big_integer_argument_reaches_the_tool_exactly(ex: Executor, arguments: Any) -> None:
    r = ex.execute({"name": "echo_int", "arguments": arguments})
    assert (r.status, r.output) == ("ok", BIG)
    assert type(r.output) is int
    assert tool(lambda n: n, name="direct").execute(f'{{"n": {BIG}}}').output == BIG


SHAPES: dict[str, Any] = {
    "int": 10**30,
    "nested": {"n": [10**30, -(10**25)]},
    "list": [10**30],
    # Past a double's range, which orjson refuses to read: a tool returning it
    # failed with a JSONDecodeError (hunt 6).
    "huge": {"n": [10**400, -(10**400)]},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_big_integer_result_formats_and_goes_through_every_provider(
    ex: Executor, shape: str
) -> None:
    r = ex.execute(ToolCall(id="r1", name="big_result", arguments={"shape": shape}))
    assert r.status == "ok", r.error
    expected = SHAPES[shape]
    assert r.output == expected
    texts = [
        format_result_for_context(r, include_metadata=False),
        openai.chat_tool_messages([r])[0]["content"],
        openai.responses_tool_outputs([r], [])[0]["output"],
        anthropic.tool_result_blocks([r])[0]["content"],
    ]
    for text in texts:
        assert isinstance(text, str) and loads(text) == expected


def test_an_integer_past_a_doubles_range_is_read_and_nothing_more_is() -> None:
    """orjson refuses 10**400 ("number is infinity"), which `dumps` writes: a
    worker's reply holding one crashed its call (hunt 6)."""
    huge = 10**400
    assert loads(f"[{huge}, -{huge}, 1.5]") == [huge, -huge, 1.5]
    assert loads(f'{{"n": {huge}}}'.encode()) == {"n": huge}
    # The stdlib reads it; not what orjson refuses besides, which the stdlib
    # would read: refused for what it is, not "number is infinity" (orjson's
    # first error, the integer; review 60).
    for text, reason in [
        ("1e400", "number is infinity"),
        (f"[{huge}, 1e400]", "number is infinity"),
        (f"[{huge}, NaN]", "unexpected character"),
        (f'[{huge}, "\\ud800"]', "surrogate"),
        (f'[{huge}, "a\\x"]', "invalid escape"),
        (f"[-{huge},]", "trailing comma"),
    ]:
        with pytest.raises(ValueError, match=reason):
            loads(text)


def test_an_integer_longer_than_python_reads_is_read_exactly(make_executor: MakeExecutor) -> None:
    """Past 4300 digits the stdlib's `int()` refuses the text: such a result
    failed on every backend ("number is infinity"), and, beside a lone
    surrogate, a process tool's reply could not be read (review 60)."""
    huge = 10**5000
    assert loads(dumps([huge, -huge])) == [huge, -huge]
    assert loads_surrogatepass(dumps_surrogatepass({"n": huge, "u": "\udce9"})) == {
        "n": huge,
        "u": "\udce9",
    }
    reg = ToolRegistry()

    @reg.tool
    def giant() -> dict[str, int]:
        return {"n": huge}

    r = make_executor(reg).execute(ToolCall(name="giant"))
    assert (r.status, r.error) == ("ok", None)
    assert isinstance(r.output, dict) and r.output["n"] == huge


def test_an_integer_longer_than_python_writes_is_written_exactly(ex: Executor) -> None:
    # Past 4300 digits `str(n)` raises (sys.get_int_max_str_digits): a
    # result holding one must still format for the model, digit for digit.
    huge = math.factorial(2000)  # 5736 digits
    digits = format(decimal.Decimal(huge), "f")
    assert dumps([huge, {"n": -huge}]) == f'[{digits},{{"n":-{digits}}}]'.encode()
    assert dumps({"n": huge}, option=orjson.OPT_INDENT_2) == f'{{\n  "n": {digits}\n}}'.encode()
    r = ToolResult(call_id="h", name="f", status="ok", output={"n": huge})
    assert digits in format_result_for_context(r, max_length=10_000, include_metadata=False)
    for text in (  # (cut at their default length)
        openai.chat_tool_messages([r])[0]["content"],
        anthropic.tool_result_blocks([r])[0]["content"],
    ):
        assert isinstance(text, str) and digits[:3000] in text


def test_big_integers_survive_provider_call_helpers() -> None:
    reg = ToolRegistry()

    @reg.tool
    def f(n: int, note: str = "") -> int:
        return n

    raw = f'{{"n": {BIG}, "note": null}}'
    (call,) = openai.drop_strict_nulls([ToolCall(name="f", arguments=raw)], reg)
    assert call.arguments == {"n": BIG}
    completion = {
        "choices": [
            {"message": {"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": [BIG]}},
            ]}},
        ]
    }  # fmt: skip
    sent = openai.chat_assistant_message(completion)["tool_calls"]
    assert loads(sent[0]["function"]["arguments"]) == [BIG]  # type: ignore[typeddict-item]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=4) | st.integers(-5, 5), children, max_size=4)
    ),
    max_leaves=16,
)


def _has_float(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_float(k) or _has_float(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return isinstance(value, float)


@settings(max_examples=200, deadline=None)
@given(value=json_values, indent=st.booleans())
def test_json_fallback_writes_what_orjson_would(value: Any, indent: bool) -> None:
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    big = dumps([value, 10**30], option=option)
    small = orjson.dumps([value, 0], option=option)
    assert loads(big) == [loads(small)[0], 10**30]
    # The stdlib spells some floats differently (1e+16, 1e16); and keys that
    # collide once written (2 and "2") orjson writes twice, the fallback once
    # (the last one's value: what reading either gives).
    duplicates = orjson.dumps(orjson.loads(small), option=option) != small
    if not _has_float(value) and not duplicates:
        head, _, tail = small.rpartition(b"0")
        assert big == head + str(10**30).encode() + tail
