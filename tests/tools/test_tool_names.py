"""A tool's name and schemas are checked when it is made, each error naming
the tool and the rule: a name no format can carry (MCP's rule, 1 to 128 ASCII
letters, digits, '_', '-' or '.') and a `parameters` that is no JSON schema of
an object used to pass, and failed only when rendered or called."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from toolbus import FunctionTool, Tool, ToolRegistry, tool
from toolbus.tools._names import check_provider_name

RULE = r"a tool's name must be 1 to 128 ASCII letters, digits, '_', '-' or '\.'"

REFUSED = {
    "get weather": "' ' is not one",
    "tab\t": r"'\\t' is not one",
    "line\nbreak": r"'\\n' is not one",
    "nul\x00": r"'\\x00' is not one",
    "esc\x1b[8m": r"'\\x1b' is not one",
    "x" * 129: "it is 129 characters long",
    "x" * 300: "it is 300 characters long",
    "ünïcode": r"'ü' \(U\+00FC\) is not one",
    "\u0430bc": r"'\u0430' \(U\+0430\) is not one",  # a Cyrillic a, like the Latin one
    "a/b": "'/' is not one",
    "a:b": "':' is not one",
    "<lambda>": "'<' is not one",
}
ACCEPTED = ["get_weather", "get-weather", "admin.tools.list", "DATA_EXPORT_v2", "x" * 128, "7"]


def _noop() -> None:
    return None


def _class_named(name: str) -> type[Tool]:
    class Named(Tool):
        def run(self, params: Any) -> None:
            return None

    Named.name = name
    return Named


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_name_no_format_can_carry_is_refused_however_the_tool_is_made(name: str) -> None:
    expected = REFUSED[name]
    with pytest.raises(ValueError, match=f"{RULE}.*; {expected}"):
        FunctionTool(_noop, name=name)
    with pytest.raises(ValueError, match=f"{RULE}.*; {expected}"):
        tool(name=name)(_noop)
    with pytest.raises(ValueError, match=f"{RULE}.*; {expected}"):
        ToolRegistry().tool(name=name)(_noop)
    with pytest.raises(ValueError, match=f"{RULE}.*; {expected}"):
        _class_named(name)()


@pytest.mark.parametrize("name", ACCEPTED)
def test_names_mcp_allows_are_accepted(name: str) -> None:
    assert name in ToolRegistry([FunctionTool(_noop, name=name)])
    assert name in ToolRegistry([_class_named(name)()])


def test_the_error_names_the_tool_written_out_and_cut() -> None:
    with pytest.raises(ValueError) as caught:
        FunctionTool(_noop, name="peek\x1b[8m")
    assert str(caught.value).startswith("tool 'peek\\x1b[8m': ")
    assert "\x1b" not in str(caught.value)
    with pytest.raises(ValueError) as caught:
        FunctionTool(_noop, name="y" * 300)
    assert str(caught.value).startswith(f"tool '{'y' * 39}…': ")


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ValueError, match=r"'<lambda>'.*\(it is the function's name: pass name=\)"):
        ToolRegistry().register(lambda: 1)
    registry = ToolRegistry([FunctionTool(lambda: 1, name="one")])
    assert registry.names() == ["one"]


def test_a_tool_class_is_not_registered_as_a_function() -> None:
    """register(SomeTool) made a function tool of the class's constructor: a
    call made a tool (or failed making one) instead of running it."""

    class Lookup(Tool):
        name = "lookup"

        def run(self, params: Any) -> str:
            return "found"

    with pytest.raises(
        TypeError, match=r"Lookup is a Tool class: register an instance, Lookup\(\)"
    ):
        ToolRegistry().register(Lookup)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Tool class"):
        ToolRegistry([Lookup])  # type: ignore[list-item]
    assert ToolRegistry([Lookup()]).names() == ["lookup"]


def test_a_name_set_after_the_tool_is_made_is_checked() -> None:
    t = FunctionTool(_noop, name="fine")
    with pytest.raises(ValueError, match=RULE):
        t.name = "not fine"
    assert t.name == "fine"
    t.name = "still.fine"
    assert t.name == "still.fine"


def test_merge_checks_its_prefix_and_the_names_it_makes() -> None:
    source = ToolRegistry([FunctionTool(_noop, name="search")])
    target = ToolRegistry()
    with pytest.raises(ValueError, match=r"merge: prefix 'web search ' cannot start a tool's name"):
        target.merge(source, prefix="web search ")
    with pytest.raises(ValueError, match=r"merge: prefix .* leaving no room for a name"):
        target.merge(source, prefix="p" * 128)
    with pytest.raises(ValueError) as caught:
        target.merge(source, prefix="p" * 124)  # 124 + "search": too long
    # The tool as it was, and where the name was made: the name made, cut, tells neither.
    assert str(caught.value) == (
        f"merge: tool 'search' would be named {'p' * 39 + '…'!r} with prefix "
        f"{'p' * 39 + '…'!r}: a tool's name must be 1 to 128 ASCII letters, digits, '_', "
        "'-' or '.' (MCP's rule for tool names); it is 130 characters long"
    )
    assert len(target) == 0  # nothing added
    assert [t.name for t in target.merge(source, prefix="web.")] == ["web.search"]


def test_providers_refuse_what_mcp_allows_and_they_do_not() -> None:
    check_provider_name("get_weather", "OpenAI")
    check_provider_name("x" * 64, "OpenAI")
    with pytest.raises(ValueError, match=r"tool 'a\.b': OpenAI takes tool names of 1 to 64"):
        check_provider_name("a.b", "OpenAI")
    with pytest.raises(ValueError, match="it is 65 characters long"):
        check_provider_name("x" * 65, "Anthropic")
    dotted = FunctionTool(_noop, name="admin.tools.list")
    with pytest.raises(ValueError, match=r"tool 'admin\.tools\.list': OpenAI takes"):
        dotted.to_openai()
    with pytest.raises(ValueError, match=r"tool 'admin\.tools\.list': OpenAI takes"):
        ToolRegistry([dotted]).to_openai()


# -- parameters ------------------------------------------------------------------------------


def _with_parameters(schema: Any) -> type[Tool]:
    class Schemed(Tool):
        name = "schemed"
        parameters = schema

        def run(self, params: Any) -> None:
            return None

    return Schemed


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "banana"}, r"parameters is not a valid JSON schema: .*banana.* \(at /type\)"),
        (
            {"type": "object", "properties": 5},
            r"parameters is not a valid JSON schema: 5 is not of type 'object' \(at /properties\)",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "no-such-type"}}},
            r"parameters is not a valid JSON schema: .* \(at /properties/a/type\)",
        ),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            r"parameters has a \$ref '#/\$defs/missing' \(at /properties/a\) that points nowhere",
        ),
        ({"type": "string"}, "parameters must describe an object .* not 'string'"),
        ({"type": ["string", "null"]}, "parameters must describe an object"),
        (
            {"type": ["object", "null"], "properties": {"x": {"type": "integer"}}},
            r'parameters must describe an object .*: its "type" must be "object" or absent, '
            r"not \['object', 'null'\]",
        ),
    ],
)
def test_a_parameters_schema_that_is_not_one_is_refused_naming_the_tool(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^tool 'schemed': {message}"):
        _with_parameters(schema)()
    # What it raised before (without the tool's name) still catches it.
    with pytest.raises(jsonschema.SchemaError):
        _with_parameters(schema)()


@pytest.mark.parametrize("schema", ["not a dict", 5, ["a"], True])
def test_parameters_that_are_not_a_dict_are_a_type_error(schema: Any) -> None:
    with pytest.raises(
        TypeError, match="tool 'schemed': parameters must be a JSON schema \\(a dict\\)"
    ):
        _with_parameters(schema)()


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string"}}},
        {"properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "integer"}}},
        {},
    ],
)
def test_valid_object_schemas_are_accepted(schema: dict[str, Any]) -> None:
    assert _with_parameters(schema)().execute({}).status in ("ok", "rejected")


def test_output_schema_is_checked_when_set_after_registration() -> None:
    registry = ToolRegistry()
    made = registry.register(_with_parameters({"type": "object"})())
    function = registry.register(FunctionTool(_noop, name="fn"))
    for t in (made, function):
        with pytest.raises(ValueError, match=r"output_schema is not a valid JSON schema.*at /type"):
            t.output_schema = {"type": "banana"}
        with pytest.raises(TypeError, match="output_schema must be a JSON schema"):
            t.output_schema = "banana"  # type: ignore[assignment]
        t.output_schema = {"type": "object"}
        assert t.output_schema == {"type": "object"}
