"""A tool's `parameters` is checked when the tool is made as jsonschema reads
it, and arguments against it never fail for want of Python's stack.

Before: the `$ref` check skipped every key named `const`, `enum`, `default` or
`examples` and stopped at any `$id`, property names included, so a property
called `default` hid a dangling `$ref` (every call then failed, blaming the
model); a remote or relative `$ref` passed (and was fetched at every first
call); a schema ~100 levels deep raised a bare RecursionError; and arguments
254 levels deep against a schema referring to itself were refused as
"RecursionError: maximum recursion depth exceeded".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from toolbus import Executor, FunctionTool, Tool, ToolCall, ToolRegistry
from toolbus.tools._schemas import MAX_RECURSIVE_DEPTH, MAX_SCHEMA_DEPTH, ToolSchemaError

T = TypeVar("T")


def _tool(parameters: dict[str, Any]) -> Tool:
    class Schemed(Tool):
        name = "schemed"

        def run(self, params: Any) -> str:
            return "ran"

    Schemed.parameters = parameters
    return Schemed()


MISSING = {"$ref": "#/$defs/Missing"}


@pytest.mark.parametrize(
    ("properties", "where"),
    [
        ({"default": MISSING}, "/properties/default"),
        ({"enum": MISSING}, "/properties/enum"),
        ({"const": MISSING}, "/properties/const"),
        ({"examples": MISSING}, "/properties/examples"),
        ({"$id": {"type": "string"}, "size": MISSING}, "/properties/size"),
        (
            {"a": {"type": "object", "properties": {"default": MISSING}}},
            "/properties/a/properties/default",
        ),
    ],
)
def test_a_dangling_ref_under_a_property_named_like_a_keyword_is_refused(
    properties: dict[str, Any], where: str
) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        _tool({"type": "object", "properties": properties})
    assert str(caught.value) == (
        f"tool 'schemed': parameters has a $ref '#/$defs/Missing' (at {where}) "
        "that points nowhere in it"
    )


def test_a_ref_in_data_is_not_a_ref_and_a_keyword_s_target_is_a_schema() -> None:
    # `const` and `default` hold values: a "$ref" in them is data.
    ok = _tool(
        {
            "type": "object",
            "properties": {"a": {"const": {"$ref": "#/nope"}, "default": {"$ref": "#/nope"}}},
        }
    )
    assert ok.execute({"a": {"$ref": "#/nope"}}).status == "ok"
    # What a $ref points to is a schema wherever it is: its own $refs resolve.
    with pytest.raises(ToolSchemaError, match=r"\$ref '#/nope' \(in #/x-defs/A\) that points"):
        _tool(
            {
                "type": "object",
                "x-defs": {"A": {"$ref": "#/nope"}},
                "properties": {"a": {"$ref": "#/x-defs/A"}},
            }
        )


@pytest.mark.parametrize(
    "ref", ["https://example.com/schema.json", "other.json#/x", "https://example.com/s#/$defs/a"]
)
def test_a_ref_to_another_document_is_refused_not_fetched_at_every_call(ref: str) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        _tool({"type": "object", "properties": {"a": {"$ref": ref}}})
    assert str(caught.value) == (
        f"tool 'schemed': parameters has a $ref {ref!r} (at /properties/a) to another "
        'document, which toolbus does not fetch: put what it points to under "$defs" '
        'and refer to it as "#/$defs/..."'
    )


def test_refs_resolve_against_each_id_as_jsonschema_resolves_them() -> None:
    based = _tool(
        {
            "$id": "https://example.com/root.json",
            "type": "object",
            "properties": {"a": {"$ref": "root.json#/$defs/A"}},
            "$defs": {"A": {"type": "integer"}},
        }
    )
    assert (
        based.execute({"a": "x"}).error
        == "Invalid arguments for 'schemed': a: should be of type integer"
    )
    # A nested $id is a document of its own: "#/nope" is looked for in it.
    with pytest.raises(ToolSchemaError, match=r"\$ref '#/nope' \(at /properties/a\) that points"):
        _tool(
            {
                "type": "object",
                "properties": {"a": {"$id": "https://x.example/a.json", "$ref": "#/nope"}},
            }
        )
    # A metaschema is known without fetching it.
    meta = {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    assert _tool({"type": "object", "properties": {"a": meta}}).execute({"a": {}}).status == "ok"


def _nested_schema(objects: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(objects):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _nested_value(levels: int, leaf: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {} if leaf is None else leaf
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_a_schema_too_deep_to_check_is_refused_naming_the_tool() -> None:
    for objects in (64, 100, 3000):  # 129 levels of objects and more
        with pytest.raises(ToolSchemaError) as caught:
            _tool(_nested_schema(objects))
        assert str(caught.value).startswith(
            f"tool 'schemed': parameters nests more than {MAX_SCHEMA_DEPTH} levels of "
            "objects and arrays, too deep to check values against"
        )
    # As deep as allowed: taken, and its calls checked.
    deep = _tool(_nested_schema(63))  # 127 levels
    assert deep.execute(_nested_value(63)).status == "ok"
    wrong = _nested_value(62, leaf={"a": 5})
    assert deep.execute(wrong).error == (
        "Invalid arguments for 'schemed': " + ".".join(["a"] * 62) + ": should be of type object"
    )


def _near_the_stack_s_end(then: Callable[[], T], left: int = 120) -> T:
    """`then()` called with about `left` frames of Python's recursion limit to spare."""
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]

    def dive(n: int) -> T:
        return dive(n - 1) if n else then()

    return dive(sys.getrecursionlimit() - depth - left)


def test_a_schema_made_where_the_stack_is_nearly_spent_is_refused_naming_the_tool() -> None:
    with pytest.raises(
        ToolSchemaError, match=r"^tool 'schemed': parameters nests too deeply to be checked$"
    ):
        _near_the_stack_s_end(lambda: _tool(_nested_schema(40)))


TREE = {
    "type": "object",
    "properties": {"node": {"$ref": "#/$defs/N"}},
    "$defs": {
        "N": {
            "type": "object",
            "properties": {"c": {"$ref": "#/$defs/N"}, "v": {"type": "integer"}},
        }
    },
}


def _tree(levels: int, leaf: Any = 1) -> dict[str, Any]:
    """Arguments for TREE nesting `levels` objects in all."""
    node: dict[str, Any] = {"v": leaf}
    for _ in range(levels - 2):
        node = {"c": node}
    return {"node": node}


def test_arguments_for_a_schema_referring_to_itself_nest_at_most_its_depth() -> None:
    tree = _tool(TREE)
    assert tree.execute(_tree(MAX_RECURSIVE_DEPTH)).status == "ok"
    wrong = tree.execute(_tree(MAX_RECURSIVE_DEPTH, leaf="x"))
    path = ".".join(["node", *["c"] * (MAX_RECURSIVE_DEPTH - 2), "v"])
    assert wrong.error == f"Invalid arguments for 'schemed': {path}: should be of type integer"
    refused = (
        "Invalid arguments for 'schemed': Arguments nest too deeply for this tool's schema, "
        f"which refers to itself (more than {MAX_RECURSIVE_DEPTH} levels of objects and arrays)"
    )
    with Executor(ToolRegistry([tree])) as executor:
        for levels in (MAX_RECURSIVE_DEPTH + 1, 200, 254):
            for arguments in (_tree(levels), json.dumps(_tree(levels))):
                result = executor.execute(ToolCall(name="schemed", arguments=arguments))
                assert (result.status, result.error) == ("rejected", refused)


def test_arguments_checked_where_the_stack_is_nearly_spent_are_refused_as_such() -> None:
    tree = _tool(TREE)
    result = _near_the_stack_s_end(lambda: tree.execute(_tree(40)))
    assert result.status == "rejected"
    assert result.error == (
        "Invalid arguments for 'schemed': Arguments nest too deeply to be checked "
        "against this tool's schema"
    )


def test_tool_execute_refuses_a_dict_as_deep_as_the_executor_refuses_it() -> None:
    """`Tool.execute` refused text past 254 levels, and ran a dict of any depth."""

    def f(a: list[Any]) -> str:
        return "ran"

    tool = FunctionTool(f, name="f")
    too_deep = "Arguments nest too deeply (more than 254 levels of objects and arrays)"
    for levels in (255, 5000):
        value: Any = 1
        for _ in range(levels - 1):
            value = [value]
        result = tool.execute({"a": value})
        assert (result.status, result.error) == ("rejected", too_deep)
    value = 1
    for _ in range(253):
        value = [value]
    assert tool.execute({"a": value}).status == "ok"
