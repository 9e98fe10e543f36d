"""Unit tests for the tools layer: `@tool`, `Tool`, argument parsing and the registry."""

import asyncio
import dataclasses
import datetime as dt
import inspect
import threading
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from toolbus import Executor, ToolCall
from toolbus.models import Attachment, ErrorCode, ToolOutput
from toolbus.retry import RetryPolicy
from toolbus.tools import (
    ArgumentError,
    DuplicateToolError,
    FunctionTool,
    OutputError,
    Tool,
    ToolContext,
    ToolError,
    ToolFailure,
    ToolRegistry,
    error_text,
    normalize_output,
    parse_json_arguments,
    tool,
)

SECRET = "hunter2-secret-value"


# -- module-level tools (type hints are resolved against module globals) ---------------


@tool(read_only=True, timeout=5.0, max_concurrency=2)
def get_weather(
    city: str,
    days: int = 3,
    unit: Literal["c", "f"] = "c",
    note: str | None = None,
) -> dict[str, Any]:
    """Current weather
    for a city.

    The second paragraph is not part of the description.
    """
    return {"city": city, "days": days, "unit": unit, "note": note}


@tool
async def fetch_page(url: str, ctx: ToolContext) -> dict[str, Any]:
    """Fetch a page."""
    await asyncio.sleep(0)
    return {"url": url, "call_id": ctx.call_id, "tool": ctx.tool, "attempt": ctx.attempt}


@tool
def no_doc(x: int) -> int:
    return x * 2


@tool(type="custom", description="Run raw SQL.")
def run_sql(query: str) -> str:
    return f"ran: {query}"


class Point(BaseModel):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    label: str
    size: tuple[int, int]


class Kind(BaseModel):
    kind: Literal["a"]


class OtherKind(BaseModel):
    kind: Literal["b"]


# -- @tool: description, name, schema --------------------------------------------------


def test_tool_decorator_makes_function_tool() -> None:
    assert isinstance(get_weather, FunctionTool)
    assert isinstance(get_weather, Tool)
    assert get_weather.name == "get_weather"
    assert get_weather.type == "function"
    assert get_weather.description == "Current weather for a city."


def test_tool_without_docstring_has_empty_description() -> None:
    assert no_doc.description == ""


def test_tool_schema_from_type_hints() -> None:
    assert get_weather.schema == {
        "additionalProperties": False,
        "properties": {
            "city": {"title": "City", "type": "string"},
            "days": {"default": 3, "title": "Days", "type": "integer"},
            "unit": {"default": "c", "enum": ["c", "f"], "title": "Unit", "type": "string"},
            "note": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
                "title": "Note",
            },
        },
        "required": ["city"],
        "title": "GetWeatherParams",
        "type": "object",
    }


def test_tool_context_parameter_excluded_from_schema() -> None:
    assert fetch_page.schema["properties"] == {"url": {"title": "Url", "type": "string"}}
    assert fetch_page.schema["required"] == ["url"]
    assert "ctx" not in fetch_page.schema["properties"]


def test_tool_context_parameter_any_position_and_name() -> None:
    @tool
    def f(context: ToolContext, a: int, b: str = "x") -> str:
        return f"{context.tool}:{a}:{b}"

    assert set(f.schema["properties"]) == {"a", "b"}
    result = f.execute({"a": 1})
    assert result.status == "ok"
    assert result.output == "f:1:x"


def test_annotated_field_description_in_schema() -> None:
    @tool
    def search(query: Annotated[str, Field(description="What to look for", min_length=2)]) -> str:
        return query

    assert search.schema["properties"]["query"] == {
        "description": "What to look for",
        "minLength": 2,
        "title": "Query",
        "type": "string",
    }
    assert search.execute({"query": "a"}).status == "rejected"


def test_unannotated_parameter_is_any() -> None:
    @tool
    def anything(value, flag: bool = False) -> Any:  # type: ignore[no-untyped-def]
        return value

    assert anything.schema["required"] == ["value"]
    assert anything.execute({"value": [1, {"a": 2}]}).output == [1, {"a": 2}]


def test_tool_options_stored() -> None:
    policy = RetryPolicy(max_retries=2)

    @tool(
        name="renamed",
        description="Explicit.",
        read_only=True,
        timeout=1.5,
        retry=policy,
        max_concurrency=3,
    )
    def original() -> str:
        """Docstring ignored."""
        return "r"

    assert original.name == "renamed"
    assert original.description == "Explicit."
    assert original.read_only is True
    assert original.timeout == 1.5
    assert original.retry is policy
    assert original.max_concurrency == 3
    assert get_weather.read_only is True
    assert get_weather.timeout == 5.0
    assert get_weather.max_concurrency == 2


def test_tool_option_defaults() -> None:
    assert no_doc.read_only is False
    assert no_doc.timeout is None
    assert no_doc.retry is None
    assert no_doc.max_concurrency is None


def test_empty_description_override_kept() -> None:
    @tool(description="")
    def documented() -> None:
        """Would be the description."""

    assert documented.description == ""


def test_is_async_flag() -> None:
    assert get_weather.is_async is False
    assert fetch_page.is_async is True


def test_repr() -> None:
    assert repr(get_weather) == "<FunctionTool 'get_weather' function read-only>"
    assert repr(run_sql) == "<FunctionTool 'run_sql' custom mutating>"


def test_decorated_function_still_callable() -> None:
    assert get_weather("Oslo") == {"city": "Oslo", "days": 3, "unit": "c", "note": None}
    assert get_weather("Oslo", days=1, unit="f") == {
        "city": "Oslo",
        "days": 1,
        "unit": "f",
        "note": None,
    }
    assert no_doc(21) == 42


async def test_decorated_async_function_still_callable() -> None:
    ctx = ToolContext(call_id="c9", tool="fetch_page")
    coro = fetch_page("https://x", ctx)
    assert inspect.iscoroutine(coro)
    assert await coro == {"url": "https://x", "call_id": "c9", "tool": "fetch_page", "attempt": 1}


def test_var_args_rejected() -> None:
    def star(*args: int) -> None:
        return None

    def kw(**kwargs: int) -> None:
        return None

    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        tool(star)
    with pytest.raises(TypeError, match=r"\*args/\*\*kwargs"):
        tool(kw)


def test_custom_tool_needs_one_parameter() -> None:
    def two(a: str, b: str) -> str:
        return a + b

    with pytest.raises(TypeError, match="exactly one text parameter"):
        tool(type="custom")(two)


def test_invalid_max_concurrency() -> None:
    def f() -> None:
        return None

    with pytest.raises(ValueError, match="max_concurrency must be >= 1"):
        tool(max_concurrency=0)(f)


def test_unknown_tool_type() -> None:
    def f() -> None:
        return None

    with pytest.raises(ValueError, match="unknown tool type 'bogus'"):
        tool(type="bogus")(f)  # type: ignore[call-overload]


def test_positional_only_parameters_work() -> None:
    def double(x: int, /) -> int:
        return x * 2

    t = tool(double)
    assert t.schema["required"] == ["x"]
    result = t.execute({"x": 4})
    assert result.status == "ok"
    assert result.output == 8


def test_positional_only_mixed_with_keyword_and_context() -> None:
    def f(a: int, b: str, /, ctx: ToolContext, c: int = 1, *, d: str = "d") -> str:
        return f"{a}{b}{c}{d}:{ctx.call_id}"

    t = tool(f)
    assert set(t.schema["properties"]) == {"a", "b", "c", "d"}
    assert t.execute({"a": 1, "b": "x", "d": "z"}, call_id="k").output == "1x1z:k"


def test_parameter_hint_from_closure_variable() -> None:
    class Local(BaseModel):
        v: int

    def f(p: "Local") -> int:
        return Local.model_validate(p).v  # makes `Local` a closure variable

    t = tool(f)
    assert t.execute({"p": {"v": 3}}).output == 3
    assert t.schema["required"] == ["p"]


def test_unresolvable_parameter_hint_is_a_clear_type_error() -> None:
    def f(p: "NoSuchType") -> int:  # type: ignore[name-defined]  # noqa: F821
        return 1

    with pytest.raises(TypeError, match="cannot resolve the type of parameter 'p'"):
        tool(f)


def test_unresolvable_return_hint_is_ignored() -> None:
    def f(a: int) -> "NoSuchType":  # type: ignore[name-defined]  # noqa: F821
        return a

    assert tool(f).execute({"a": 5}).output == 5


def test_unresolvable_tool_context_hint_recognised_by_name() -> None:
    def f(a: int, ctx: "elsewhere.ToolContext") -> str:  # type: ignore[name-defined]  # noqa: F821
        return f"{a}:{ctx.tool}"

    t = tool(f)
    assert set(t.schema["properties"]) == {"a"}
    assert t.execute({"a": 2}).output == "2:f"


# -- argument validation ---------------------------------------------------------------


def test_valid_arguments_dict_and_json_text() -> None:
    r = get_weather.execute({"city": "Oslo", "days": 2})
    assert r.status == "ok"
    assert r.output == {"city": "Oslo", "days": 2, "unit": "c", "note": None}
    r = get_weather.execute('{"city": "Lisbon", "unit": "f"}')
    assert r.output == {"city": "Lisbon", "days": 3, "unit": "f", "note": None}


def test_extra_arguments_rejected() -> None:
    r = get_weather.execute({"city": "Oslo", "bogus": 1})
    assert r.status == "rejected"
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error == "Invalid arguments for 'get_weather': bogus: Extra inputs are not permitted"
    assert r.attempts == 0
    assert r.output is None


def test_missing_required_argument() -> None:
    r = get_weather.execute({})
    assert r.status == "rejected"
    assert r.error == "Invalid arguments for 'get_weather': city: Field required"


def test_empty_text_arguments_mean_no_arguments() -> None:
    assert (
        get_weather.execute("").error == "Invalid arguments for 'get_weather': city: Field required"
    )
    assert no_doc.execute("  ").status == "rejected"

    @tool
    def ping() -> str:
        return "pong"

    assert ping.execute("").output == "pong"
    assert ping.execute({}).output == "pong"


def test_several_errors_reported_without_values() -> None:
    r = get_weather.execute({"city": 5, "days": SECRET, "unit": SECRET})
    assert r.status == "rejected"
    assert r.error == (
        "Invalid arguments for 'get_weather': "
        "city: Input should be a valid string; "
        "days: Input should be a valid integer, unable to parse string as an integer; "
        "unit: Input should be 'c' or 'f'"
    )
    assert SECRET not in (r.error or "")


def test_nested_model_error_location() -> None:
    @tool
    def draw(points: list[Point]) -> int:
        return len(points)

    r = draw.execute({"points": [{"x": 1, "y": 2}, {"x": SECRET, "y": 3}]})
    assert r.status == "rejected"
    assert r.error == (
        "Invalid arguments for 'draw': points.1.x: "
        "Input should be a valid integer, unable to parse string as an integer"
    )
    assert draw.execute({"points": [{"x": 1, "y": 2}]}).output == 1


def test_discriminated_union_error_does_not_echo_value() -> None:
    @tool
    def pick(item: Annotated[Kind | OtherKind, Field(discriminator="kind")]) -> str:
        return item.kind

    assert pick.execute({"item": {"kind": "a"}}).output == "a"
    r = pick.execute({"item": {"kind": SECRET}})
    assert r.status == "rejected"
    assert r.error == (
        "Invalid arguments for 'pick': item: Input tag '<value>' found using 'kind' "
        "does not match any of the expected tags: 'a', 'b'"
    )


def test_redaction_keeps_constraint_bound_visible() -> None:
    @tool
    def limited(n: Annotated[int, Field(lt=10)]) -> int:
        return n

    r = limited.execute({"n": 10})
    assert r.error == "Invalid arguments for 'limited': n: Input should be less than 10"


def test_redaction_does_not_garble_message_words() -> None:
    r = get_weather.execute({"city": "Oslo", "days": "valid"})
    assert r.error == (
        "Invalid arguments for 'get_weather': "
        "days: Input should be a valid integer, unable to parse string as an integer"
    )


# -- Tool subclasses -------------------------------------------------------------------


class Divide(Tool):
    name = "divide"
    description = "Divide a by b."
    read_only = True

    class Params(BaseModel):
        a: float
        b: float = 1.0

    def run(self, params: "Divide.Params") -> float:
        return params.a / params.b


class WithContext(Tool):
    name = "with_ctx"

    class Params(BaseModel):
        n: int

    def run(self, params: "WithContext.Params", ctx: ToolContext) -> dict[str, Any]:
        return {
            "n": params.n,
            "ctx_type": type(ctx).__name__,
            "call_id": ctx.call_id,
            "tool": ctx.tool,
            "attempt": ctx.attempt,
            "deadline": ctx.deadline,
            "cancelled": ctx.cancelled,
        }


class AsyncEcho(Tool):
    name = "async_echo"

    class Params(BaseModel):
        text: str

    async def run(self, params: "AsyncEcho.Params", ctx: ToolContext) -> str:
        await asyncio.sleep(0)
        return f"{ctx.call_id}:{params.text}"


class Lookup(Tool):
    name = "lookup"
    description = "Look something up."
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "q": {"type": "string", "minLength": 3, "maxLength": 5, "pattern": "^[a-z]+$"},
            "mode": {"enum": ["fast", "full"]},
            "limit": {"type": "integer", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}},
        },
        "required": ["q"],
        "additionalProperties": False,
    }

    def run(self, params: dict[str, Any]) -> dict[str, Any]:
        return params


def test_subclass_with_params_model() -> None:
    t = Divide()
    assert t.schema == Divide.Params.model_json_schema()
    assert t.is_async is False
    r = t.execute({"a": 6, "b": 4})
    assert r.status == "ok"
    assert r.output == 1.5
    assert t.execute('{"a": 3}').output == 3.0
    assert t.to_openai() == {
        "type": "function",
        "function": {
            "name": "divide",
            "description": "Divide a by b.",
            "parameters": Divide.Params.model_json_schema(),
        },
    }


def test_subclass_parse_returns_params_instance() -> None:
    params = Divide().parse({"a": 1, "b": 2})
    assert isinstance(params, Divide.Params)
    assert params == Divide.Params(a=1, b=2)


def test_subclass_errors_contained() -> None:
    r = Divide().execute({"a": 1, "b": 0})
    assert r.status == "error"
    assert r.error_code is ErrorCode.TOOL_ERROR
    assert r.error == "ZeroDivisionError: float division by zero"
    assert r.attempts == 1


def test_subclass_run_with_context() -> None:
    r = WithContext().execute({"n": 7}, call_id="call-42")
    assert r.status == "ok"
    assert r.call_id == "call-42"
    assert r.output == {
        "n": 7,
        "ctx_type": "ToolContext",
        "call_id": "call-42",
        "tool": "with_ctx",
        "attempt": 1,
        "deadline": None,
        "cancelled": False,
    }


def test_subclass_without_name_raises() -> None:
    class Nameless(Tool):
        def run(self, params: Any) -> None:
            return None

    with pytest.raises(ValueError, match="Nameless needs a name"):
        Nameless()


def test_subclass_without_schema_passes_arguments_through() -> None:
    class Free(Tool):
        name = "free"

        def run(self, params: dict[str, Any]) -> dict[str, Any]:
            return params

    t = Free()
    assert t.schema == {"type": "object", "properties": {}}
    assert t.execute({"anything": [1, 2]}).output == {"anything": [1, 2]}


def test_base_run_not_implemented_is_contained() -> None:
    class Lazy(Tool):
        name = "lazy"

    r = Lazy().execute({})
    assert r.status == "error"
    assert r.error == "NotImplementedError"


def test_json_schema_parameters_valid() -> None:
    t = Lookup()
    assert t.schema is Lookup.parameters
    r = t.execute({"q": "abc", "mode": "fast", "limit": 2, "tags": ["x"]})
    assert r.status == "ok"
    assert r.output == {"q": "abc", "mode": "fast", "limit": 2, "tags": ["x"]}
    assert t.parse('{"q": "abcd"}') == {"q": "abcd"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "arguments: q is required"),
        ({"q": 5}, "q: should be of type string"),
        ({"q": SECRET}, "q: fails 'maxLength' rule; q: fails 'pattern' rule"),
        ({"q": "abc", "mode": SECRET}, "mode: should be one of ['fast', 'full']"),
        ({"q": "abc", SECRET: 1}, "arguments: unexpected properties"),
        ({"q": "abc", "limit": 0}, "limit: fails 'minimum' rule"),
        ({"q": "abc", "tags": ["ok", SECRET]}, "tags.1: fails 'maxLength' rule"),
    ],
)
def test_json_schema_errors_never_echo_values(arguments: dict[str, Any], message: str) -> None:
    r = Lookup().execute(arguments)
    assert r.status == "rejected"
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error is not None
    assert SECRET not in r.error
    assert set(r.error.removeprefix("Invalid arguments for 'lookup': ").split("; ")) == set(
        message.split("; ")
    )


def test_json_schema_error_count_capped_at_five() -> None:
    class Many(Tool):
        name = "many"
        parameters = {  # noqa: RUF012
            "type": "object",
            "properties": {f"p{i}": {"type": "integer"} for i in range(8)},
        }

        def run(self, params: Any) -> None:
            return None

    with pytest.raises(ArgumentError) as info:
        Many().validate({f"p{i}": SECRET for i in range(8)})
    text = str(info.value)
    assert text.count("should be of type integer") == 5
    assert SECRET not in text


def test_invalid_json_schema_rejected_at_creation() -> None:
    class Broken(Tool):
        name = "broken"
        parameters = {"type": "object", "properties": {"a": {"type": "no-such-type"}}}  # noqa: RUF012

        def run(self, params: Any) -> None:
            return None

    with pytest.raises(jsonschema.SchemaError):
        Broken()


def test_schema_built_once_for_params_model(monkeypatch: pytest.MonkeyPatch) -> None:
    t = Divide()
    first = t.schema
    assert t.schema is first

    def boom(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("schema rebuilt after creation")

    monkeypatch.setattr(Divide.Params, "model_json_schema", boom)
    assert t.schema is first
    assert t.to_openai()["function"]["parameters"] is first
    assert t.execute({"a": 1}).output == 1.0


def test_schema_built_once_for_function_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    @tool
    def f(a: int) -> int:
        return a

    first = f.schema
    assert f.Params is not None

    def boom(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("schema rebuilt after creation")

    monkeypatch.setattr(f.Params, "model_json_schema", boom)
    assert f.schema is first
    assert f.to_openai()["function"]["parameters"] is first


def test_json_schema_validator_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    t = Lookup()

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("validator rebuilt after creation")

    # The schema is checked once, when the tool is created, never per call.
    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", boom)
    assert t.execute({"q": "abc"}).status == "ok"
    assert t.execute({"q": 1}).status == "rejected"


# -- custom (free-text) tools ----------------------------------------------------------


def test_custom_function_tool_receives_raw_string() -> None:
    assert run_sql.type == "custom"
    assert run_sql.schema == {}
    assert run_sql.Params is None
    assert run_sql.description == "Run raw SQL."
    assert (
        run_sql.execute("SELECT * FROM t WHERE a = '{'").output
        == "ran: SELECT * FROM t WHERE a = '{'"
    )
    # Text that looks like JSON is not parsed.
    assert run_sql.execute('{"not": "parsed"}').output == 'ran: {"not": "parsed"}'
    assert run_sql.execute("").output == "ran: "


def test_custom_tool_takes_a_dict_only_as_its_text_under_input() -> None:
    """It ran on the dict as JSON text, which the model never wrote."""
    assert run_sql.execute({"input": "SELECT 1"}).output == "ran: SELECT 1"
    for given, problem in [
        ({"a": 1}, "'input' is missing"),
        ({}, "'input' is missing"),
        ({"input": None}, "'input' is null, not text"),
        ({"input": 5}, "'input' is int, not text"),
        ({"input": "ls", "extra": "rm"}, "unexpected keys 'extra'"),
    ]:
        r = run_sql.execute(given)
        assert r.error_code == ErrorCode.INVALID_ARGUMENTS, given
        assert r.error == (
            "Invalid arguments for 'run_sql': a free-text tool takes its input as text, "
            f'or as {{"input": <text>}} alone ({problem})'
        )


def test_custom_tool_with_context() -> None:
    @tool(type="custom")
    def patch(ctx: ToolContext, diff: str) -> str:
        return f"{ctx.call_id}:{diff}"

    assert patch.execute("--- a\n+++ b", call_id="c1").output == "c1:--- a\n+++ b"


def test_custom_tool_subclass() -> None:
    class Shell(Tool):
        name = "shell"
        type = "custom"
        description = "Run a command."

        def run(self, params: str) -> str:
            return params.upper()

    t = Shell()
    assert t.schema == {}
    assert t.parse("ls -la") == "ls -la"
    assert t.execute("ls -la").output == "LS -LA"
    assert t.to_openai() == {
        "type": "custom",
        "custom": {"name": "shell", "description": "Run a command."},
    }


# -- execute: outcomes -----------------------------------------------------------------


def test_execute_ok_result_fields() -> None:
    r = no_doc.execute({"x": 4}, call_id="abc")
    assert r.status == "ok"
    assert r.ok
    assert r.call_id == "abc"
    assert r.name == "no_doc"
    assert r.output == 8
    assert r.error is None
    assert r.error_code is None
    assert r.attempts == 1
    assert r.duration >= 0.0
    assert r.attachments == ()
    assert r.metadata == {}


def test_execute_default_call_id() -> None:
    assert no_doc.execute({"x": 1}).call_id == "direct"


def test_execute_tool_raising_is_error() -> None:
    @tool
    def broken(x: int) -> int:
        raise ValueError(f"cannot handle {x}")

    r = broken.execute({"x": 3})
    assert r.status == "error"
    assert not r.ok
    assert r.error_code is ErrorCode.TOOL_ERROR
    assert r.error == "ValueError: cannot handle 3"
    assert r.attempts == 1
    assert r.output is None


def test_execute_tool_error_message_as_is() -> None:
    @tool
    def quota() -> None:
        raise ToolError("Quota exceeded, try tomorrow", retryable=False)

    r = quota.execute({})
    assert r.status == "error"
    assert r.error == "Quota exceeded, try tomorrow"


def test_execute_exception_without_message() -> None:
    @tool
    def bare() -> None:
        raise RuntimeError

    assert bare.execute({}).error == "RuntimeError"


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ('{"city": ', "Arguments are not valid JSON (unexpected end of data at position 9)"),
        ("[1, 2]", "Arguments must be a JSON object, got list"),
        ('"Oslo"', "Arguments must be a JSON object, got str"),
        ("null", "Arguments must be a JSON object, got NoneType"),
    ],
)
def test_execute_bad_json_is_rejected(arguments: str, error: str) -> None:
    r = get_weather.execute(arguments)
    assert r.status == "rejected"
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.error == error
    assert r.attempts == 0


def test_execute_non_json_output_is_error() -> None:
    @tool
    def opaque() -> object:
        return object()

    r = opaque.execute({})
    assert r.status == "error"
    assert r.error_code is ErrorCode.TOOL_ERROR
    assert r.error == (
        "OutputError: tool returned a value that is not JSON-serializable: "
        "Type is not JSON serializable: object"
    )


def test_execute_pydantic_dataclass_datetime_outputs() -> None:
    @tool
    def model() -> Point:
        return Point(x=1, y=2)

    @tool
    def box() -> Box:
        return Box(label="b", size=(2, 3))

    @tool
    def when() -> dt.datetime:
        return dt.datetime(2024, 5, 17, 12, 30, tzinfo=dt.UTC)

    @tool
    def mixed() -> dict[str, Any]:
        return {"p": Point(x=0, y=-1), "d": dt.date(2024, 1, 2), "t": (1, 2), "s": {3}}

    assert model.execute({}).output == {"x": 1, "y": 2}
    assert box.execute({}).output == {"label": "b", "size": [2, 3]}
    assert when.execute({}).output == "2024-05-17T12:30:00+00:00"
    assert mixed.execute({}).output == {
        "p": {"x": 0, "y": -1},
        "d": "2024-01-02",
        "t": [1, 2],
        "s": [3],
    }


def test_execute_tool_output_with_attachments() -> None:
    @tool
    def chart(city: str) -> ToolOutput:
        return ToolOutput(
            content={"city": city, "when": dt.date(2024, 1, 1)},
            attachments=(Attachment(type="image/png", url="https://img.example/chart.png"),),
            metadata={"source": "cache"},
        )

    r = chart.execute({"city": "Oslo"})
    assert r.status == "ok"
    assert r.output == {"city": "Oslo", "when": "2024-01-01"}
    assert r.attachments == (Attachment(type="image/png", url="https://img.example/chart.png"),)
    assert r.metadata == {"source": "cache"}


def test_tool_output_attachments_given_as_list() -> None:
    @tool
    def pic() -> ToolOutput:
        return ToolOutput(
            content="see image",
            attachments=[Attachment(type="image/png", url="https://x/y.png")],
        )

    r = pic.execute({})
    assert r.output == "see image"
    assert len(r.attachments) == 1
    assert r.attachments[0].url == "https://x/y.png"


def test_execute_async_tool_synchronously() -> None:
    r = fetch_page.execute({"url": "https://a"}, call_id="sync-1")
    assert r.status == "ok"
    assert r.output == {"url": "https://a", "call_id": "sync-1", "tool": "fetch_page", "attempt": 1}


# -- aexecute --------------------------------------------------------------------------


async def test_aexecute_async_function_tool() -> None:
    r = await fetch_page.aexecute({"url": "https://b"}, call_id="a-1")
    assert r.status == "ok"
    assert r.output == {"url": "https://b", "call_id": "a-1", "tool": "fetch_page", "attempt": 1}
    assert r.attempts == 1


async def test_aexecute_async_subclass_with_context() -> None:
    r = await AsyncEcho().aexecute('{"text": "hi"}', call_id="x")
    assert r.status == "ok"
    assert r.output == "x:hi"


async def test_aexecute_sync_tool() -> None:
    r = await Divide().aexecute({"a": 1, "b": 4})
    assert r.status == "ok"
    assert r.output == 0.25


async def test_aexecute_bad_arguments_rejected() -> None:
    r = await fetch_page.aexecute('{"url": 1')
    assert r.status == "rejected"
    assert r.error_code is ErrorCode.INVALID_ARGUMENTS
    assert r.attempts == 0
    r = await fetch_page.aexecute({"url": "u", "extra": True})
    assert r.error == "Invalid arguments for 'fetch_page': extra: Extra inputs are not permitted"


async def test_aexecute_async_tool_raising() -> None:
    @tool
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ConnectionError("upstream reset")

    r = await failing.aexecute({})
    assert r.status == "error"
    assert r.error_code is ErrorCode.TOOL_ERROR
    assert r.error == "ConnectionError: upstream reset"


async def test_aexecute_non_json_output_is_error() -> None:
    @tool
    async def opaque() -> object:
        return object()

    r = await opaque.aexecute({})
    assert r.status == "error"
    assert (r.error or "").startswith("OutputError: ")


# -- parse_json_arguments --------------------------------------------------------------


def test_parse_json_arguments_object() -> None:
    assert parse_json_arguments('{"a": 1, "b": [true, null]}') == {"a": 1, "b": [True, None]}
    assert parse_json_arguments("{}") == {}


@pytest.mark.parametrize("text", ["", " ", "\n\t "])
def test_parse_json_arguments_blank_is_empty(text: str) -> None:
    assert parse_json_arguments(text) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": ', "Arguments are not valid JSON (unexpected end of data at position 6)"),
        (
            '{"a": 1}}',
            "Arguments are not valid JSON (unexpected content after document at position 8)",
        ),
        (
            "{'a': 1}",
            "Arguments are not valid JSON (unexpected character, expected a string key at position 1)",
        ),
        (
            '{"a": tru}',
            "Arguments are not valid JSON (invalid literal, expected 'true' at position 6)",
        ),
        ("[]", "Arguments must be a JSON object, got list"),
        ("42", "Arguments must be a JSON object, got int"),
        ("1.5", "Arguments must be a JSON object, got float"),
        ('"s"', "Arguments must be a JSON object, got str"),
        ("true", "Arguments must be a JSON object, got bool"),
        ("null", "Arguments must be a JSON object, got NoneType"),
    ],
)
def test_parse_json_arguments_errors(text: str, message: str) -> None:
    with pytest.raises(ArgumentError) as info:
        parse_json_arguments(text)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_parse_json_arguments_torn_output_does_not_echo_content() -> None:
    with pytest.raises(ArgumentError) as info:
        parse_json_arguments('{"password": "' + SECRET + '", "x": ')
    assert SECRET not in str(info.value)


# -- normalize_output / error_text -----------------------------------------------------


def test_normalize_output_plain_values() -> None:
    assert normalize_output("s") == ("s", (), {})
    assert normalize_output(None) == (None, (), {})
    assert normalize_output([1, (2, 3)]) == ([1, [2, 3]], (), {})
    assert normalize_output({1: "a"}) == ({"1": "a"}, (), {})


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_normalize_output_non_finite_becomes_null(value: float) -> None:
    assert normalize_output(value) == (None, (), {})
    assert normalize_output({"v": value, "l": [value]}) == ({"v": None, "l": [None]}, (), {})


def test_normalize_output_rejects_non_json() -> None:
    with pytest.raises(OutputError):
        normalize_output({"f": lambda: None})
    with pytest.raises(OutputError):
        normalize_output(ToolOutput(content=object()))


def test_error_text() -> None:
    assert error_text(ToolError("as is")) == "as is"
    assert error_text(ArgumentError("bad")) == "bad"
    assert error_text(KeyError("k")) == "KeyError: 'k'"
    assert error_text(TimeoutError()) == "TimeoutError"


def test_tool_error_fields() -> None:
    e = ToolError("nope", retryable=True)
    assert e.message == "nope"
    assert e.retryable is True
    assert ToolError("x").retryable is None
    # Only True says "retry": a truthy non-bool is False, never None (issue 21).
    for odd in (1, "yes", "True", [True], 0, ""):
        assert ToolError("x", retryable=odd).retryable is False  # type: ignore[arg-type]
        failure = ToolFailure("x", retry=odd)  # type: ignore[arg-type]
        assert (failure.retry, failure.retryable) == (False, False)
    assert (ToolFailure("x", retry=True).retry, ToolFailure("x", retry=True).retryable) == (
        True,
        None,
    )


# -- ToolContext -----------------------------------------------------------------------


def test_tool_context_defaults_and_progress() -> None:
    events: list[tuple[ToolContext, str, float | None, dict[str, Any]]] = []
    cancel = threading.Event()
    ctx = ToolContext(
        call_id="c1",
        tool="t",
        attempt=2,
        cancel=cancel,
        sink=lambda c, m, f, d: events.append((c, m, f, d)),
    )
    assert ctx.remaining is None
    assert not ctx.cancelled
    ctx.progress("half way", 0.5, rows=10)
    ctx.progress("step")
    assert events == [(ctx, "half way", 0.5, {"rows": 10}), (ctx, "step", None, {})]
    cancel.set()
    assert ctx.cancelled
    assert ctx.wait_cancelled(0) is True


def test_tool_context_without_sink_and_deadline() -> None:
    import time

    ctx = ToolContext(call_id="c", tool="t", deadline=time.monotonic() + 100)
    ctx.progress("ignored")
    remaining = ctx.remaining
    assert remaining is not None
    assert 99 < remaining <= 100
    assert ctx.wait_cancelled(0) is False
    expired = ToolContext(call_id="c", tool="t", deadline=time.monotonic() - 5)
    assert expired.remaining == 0.0


# -- ToolRegistry ----------------------------------------------------------------------


def test_registry_register_get_contains_len() -> None:
    reg = ToolRegistry()
    assert len(reg) == 0
    t = Divide()
    assert reg.register(t) is t
    assert reg.get("divide") is t
    assert reg.get("missing") is None
    assert "divide" in reg
    assert "missing" not in reg
    assert 42 not in reg
    assert len(reg) == 1


def test_registry_duplicate_name() -> None:
    reg = ToolRegistry([Divide()])
    with pytest.raises(DuplicateToolError, match="a tool named 'divide' is already registered"):
        reg.register(Divide())
    assert issubclass(DuplicateToolError, ValueError)
    assert len(reg) == 1


def test_registry_unregister() -> None:
    t = Divide()
    reg = ToolRegistry([t, Lookup()])
    assert reg.unregister("divide") is t
    assert "divide" not in reg
    assert reg.names() == ["lookup"]
    with pytest.raises(KeyError):
        reg.unregister("divide")
    # The name is free again.
    reg.register(Divide())
    assert reg.names() == ["lookup", "divide"]


def test_registry_plain_function() -> None:
    def add(a: int, b: int = 1) -> int:
        """Add numbers."""
        return a + b

    reg = ToolRegistry()
    t = reg.register(add)
    assert isinstance(t, FunctionTool)
    assert t.name == "add"
    assert t.description == "Add numbers."
    assert reg.get("add") is t
    assert t.execute({"a": 2}).output == 3
    assert ToolRegistry([add]).names() == ["add"]


def test_registry_list_names_by_type_in_order() -> None:
    d, lk = Divide(), Lookup()
    reg = ToolRegistry([d, run_sql, lk])
    assert reg.names() == ["divide", "run_sql", "lookup"]
    assert reg.list() == [d, run_sql, lk]
    assert reg.list_by_type("function") == [d, lk]
    assert reg.list_by_type("custom") == [run_sql]


def test_registry_list_is_a_copy() -> None:
    reg = ToolRegistry([Divide()])
    reg.list().clear()
    reg.names().clear()
    assert len(reg) == 1


def test_registry_to_openai() -> None:
    reg = ToolRegistry([no_doc, run_sql])
    assert reg.to_openai() == [
        {
            "type": "function",
            "function": {
                "name": "no_doc",
                "description": "",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {"x": {"title": "X", "type": "integer"}},
                    "required": ["x"],
                    "title": "NoDocParams",
                    "type": "object",
                },
            },
        },
        {"type": "custom", "custom": {"name": "run_sql", "description": "Run raw SQL."}},
    ]
    assert ToolRegistry().to_openai() == []


def test_registry_tool_decorator_bare_and_with_options() -> None:
    reg = ToolRegistry()

    @reg.tool
    def echo(text: str) -> str:
        """Echo text back."""
        return text

    policy = RetryPolicy(max_retries=1)

    @reg.tool(name="remote-fetch", read_only=True, timeout=2.0, retry=policy, max_concurrency=4)
    async def fetch(url: str) -> str:
        return url

    assert isinstance(echo, FunctionTool)
    assert reg.get("echo") is echo
    assert echo("x") == "x"
    assert reg.get("remote-fetch") is fetch
    assert fetch.read_only is True
    assert fetch.timeout == 2.0
    assert fetch.retry is policy
    assert fetch.max_concurrency == 4
    assert fetch.is_async is True
    assert fetch.schema["title"] == "RemoteFetchParams"

    with pytest.raises(DuplicateToolError):

        @reg.tool
        def echo(text: str) -> str:
            return text


def test_registry_concurrent_register() -> None:
    reg = ToolRegistry()
    n_threads, per_thread = 8, 25
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def make(name: str) -> FunctionTool:
        def fn() -> str:
            return name

        return FunctionTool(fn, name=name)

    tools = [[make(f"t{i}_{j}") for j in range(per_thread)] for i in range(n_threads)]

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for t in tools[i]:
                reg.register(t)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    assert errors == []
    assert len(reg) == n_threads * per_thread
    for i in range(n_threads):
        for j, t in enumerate(tools[i]):
            assert reg.get(f"t{i}_{j}") is t


def test_registry_concurrent_duplicates_only_one_wins() -> None:
    reg = ToolRegistry()
    n_threads = 8
    barrier = threading.Barrier(n_threads)
    candidates = [Divide() for _ in range(n_threads)]
    won: list[Tool] = []
    lost: list[BaseException] = []
    lock = threading.Lock()

    def worker(t: Tool) -> None:
        barrier.wait()
        try:
            reg.register(t)
        except DuplicateToolError as e:
            with lock:
                lost.append(e)
        else:
            with lock:
                won.append(t)

    threads = [threading.Thread(target=worker, args=(t,)) for t in candidates]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    assert len(won) == 1
    assert len(lost) == n_threads - 1
    assert reg.get("divide") is won[0]
    assert len(reg) == 1


def test_optional_tool_context_parameter_is_injected() -> None:
    from toolbus import ToolContext

    @tool
    def maybe(x: int, ctx: ToolContext | None = None) -> bool:
        return ctx is not None

    assert "ctx" not in maybe.schema["properties"]
    assert maybe.execute({"x": 1}).output is True


async def test_sync_execute_of_async_tool_inside_a_running_loop_says_what_to_do() -> None:
    @tool
    async def hello() -> str:
        return "hi"

    r = hello.execute({})
    assert r.status == "error"
    assert r.error is not None and "use `await tool.aexecute(...)`" in r.error
    assert (await hello.aexecute({})).output == "hi"


def test_negative_backoff_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=-0.5)


def test_coroutine_returned_by_sync_wrapper_is_awaited() -> None:
    """A coroutine returned by a sync wrapper of an async tool was not awaited (concurrency review,
    af84076)."""
    import functools

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            return fn(*a, **k)

        return wrapper

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    @logged
    async def fetch(i: int) -> int:
        await asyncio.sleep(0)
        return i * 2

    with Executor(reg) as ex:
        r = ex.execute(ToolCall(name="fetch", arguments={"i": 21}))
        assert (r.status, r.output) == ("ok", 42)


@pytest.mark.parametrize("kind", ["classmethod", "staticmethod"])
def test_a_params_model_with_its_own_model_validate_is_validated_by_it(kind: str) -> None:
    # The executor validates through pydantic's validator directly only for a
    # model that keeps `BaseModel.model_validate`; an override of either kind is called.
    class Plain(BaseModel):
        n: int

    def own(obj: Any, *args: Any, **kwargs: Any) -> Plain:
        return Plain(n=99)

    Params = type(
        "Params",
        (Plain,),
        {"model_validate": classmethod(lambda cls, *a, **k: own(*a, **k))}
        if kind == "classmethod"
        else {"model_validate": staticmethod(own)},
    )

    class Own(Tool):
        name = "own"
        Params: Any

        def run(self, params: Any) -> int:
            return int(params.n)

    Own.Params = Params
    tool = Own()
    assert tool.execute({"n": 1}).output == 99
    reg = ToolRegistry()
    reg.register(tool)
    with Executor(reg) as ex:
        assert ex.execute(ToolCall(name="own", arguments={"n": 1})).output == 99
