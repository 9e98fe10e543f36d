"""`ToolRegistry.merge`, `to_anthropic`, `to_mcp`; `FunctionTool` where the docs
name it; an unknown tool's error listing the available names (bounded)."""

from __future__ import annotations

import sys
from typing import Any

import mcp_types
import pytest

import toolbus
from toolbus import (
    DuplicateToolError,
    ErrorCode,
    Executor,
    FunctionTool,
    RetryPolicy,
    Tool,
    ToolCall,
    ToolRegistry,
    tool,
)
from toolbus.backends import ThreadBackend
from toolbus.executor import MAX_LISTED_TOOLS
from toolbus.mcp import mcp_tool
from toolbus.providers import anthropic


@tool(read_only=True, timeout=5, retry=RetryPolicy(max_retries=1))
def search(query: str) -> list[str]:
    """Search the docs."""
    return [query]


@tool
def save(text: str) -> str:
    """Save a note."""
    return f"saved {text}"


@tool(type="custom", read_only=True)
def shout(text: str) -> str:
    """Upper-case the raw input."""
    return text.upper()


class Ping(Tool):
    name = "ping"
    description = "Answer pong."
    read_only = True

    def run(self, params: Any) -> str:
        return "pong"


def test_function_tool_is_exported_where_the_docs_name_it() -> None:
    assert toolbus.FunctionTool is toolbus.tools.FunctionTool
    assert toolbus.CommandTool is toolbus.tools.CommandTool
    assert toolbus.DuplicateToolError is toolbus.tools.DuplicateToolError
    assert isinstance(FunctionTool(lambda x: x, name="echo"), Tool)


# -- merge --------------------------------------------------------------------------------


def test_merge_adds_every_tool_as_it_is() -> None:
    a, b = ToolRegistry([search]), ToolRegistry([save, Ping()])
    added = a.merge(b)
    assert a.names() == ["search", "save", "ping"]
    assert added == b.list()
    assert a.get("save") is save  # the same object
    assert b.names() == ["save", "ping"]  # the source is unchanged


def test_merge_with_prefix_copies_and_renames() -> None:
    a = ToolRegistry([search])
    other = ToolRegistry([search, save, shout])
    added = a.merge(other, prefix="docs_")
    assert a.names() == ["search", "docs_search", "docs_save", "docs_shout"]
    assert [t.name for t in added] == ["docs_search", "docs_save", "docs_shout"]
    copy = a.get("docs_search")
    assert copy is not search and search.name == "search"  # the original keeps its name
    assert other.names() == ["search", "save", "shout"]
    # The copy keeps everything else: options, schema, behaviour.
    assert isinstance(copy, FunctionTool)
    assert (copy.read_only, copy.timeout, copy.retry) == (True, 5, search.retry)
    assert copy.schema == search.schema
    assert copy.execute({"query": "q"}).output == ["q"]
    assert copy.execute({"query": "q"}).name == "docs_search"


def test_merge_keeps_a_tools_own_backend() -> None:
    backend = ThreadBackend()
    own = FunctionTool(lambda x: x, name="echo", backend=backend)
    a = ToolRegistry()
    a.merge([own], prefix="p_")
    assert a.get("p_echo").backend is backend  # type: ignore[union-attr]


def test_merge_collisions_add_nothing() -> None:
    a = ToolRegistry([search, Ping()])
    other = ToolRegistry([save, search, Ping()])
    with pytest.raises(DuplicateToolError, match=r"'search', 'ping' already registered") as e:
        a.merge(other)
    assert "prefix=" in str(e.value)
    assert a.names() == ["search", "ping"]  # all or nothing
    a.merge(other, prefix="b_")
    assert a.names() == ["search", "ping", "b_save", "b_search", "b_ping"]
    with pytest.raises(DuplicateToolError, match="'b_save', 'b_search', 'b_ping'"):
        a.merge(other, prefix="b_")


def test_merge_an_iterable_and_its_errors() -> None:
    a = ToolRegistry()
    assert a.merge([save, Ping()]) == [save, a.get("ping")]
    with pytest.raises(DuplicateToolError, match="given more than once"):
        ToolRegistry().merge([save, save])
    with pytest.raises(TypeError, match="expected toolbus tools"):
        ToolRegistry().merge([lambda: 1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="prefix must be a string"):
        ToolRegistry().merge([save], prefix=1)  # type: ignore[arg-type]
    assert ToolRegistry().merge(ToolRegistry()) == []
    b = ToolRegistry()
    b.merge([save], prefix="")  # an empty prefix is no prefix
    assert b.get("save") is save


def test_merged_tools_run_in_an_executor() -> None:
    a = ToolRegistry([search])
    a.merge(ToolRegistry([search, save]), prefix="x_")
    with Executor(a) as ex:
        batch = ex.execute_batch(
            [
                ToolCall(name="search", arguments={"query": "a"}),
                ToolCall(name="x_search", arguments={"query": "b"}),
                ToolCall(name="x_save", arguments={"text": "c"}),
            ]
        )
    assert [(r.name, r.status, r.output) for r in batch] == [
        ("search", "ok", ["a"]),
        ("x_search", "ok", ["b"]),
        ("x_save", "ok", "saved c"),
    ]


# -- to_anthropic, to_mcp --------------------------------------------------------------------

REGISTRY = ToolRegistry([search, save, shout, Ping()])


def test_to_anthropic_is_the_providers_converter() -> None:
    assert REGISTRY.to_anthropic() == anthropic.tool_definitions(REGISTRY)
    first = REGISTRY.to_anthropic()[0]
    assert first == {
        "name": "search",
        "description": "Search the docs.",
        "input_schema": search.schema,
    }
    assert ToolRegistry().to_anthropic() == []


def test_to_mcp_is_the_mcp_converter_as_json() -> None:
    expected = [
        mcp_tool(t).model_dump(mode="json", by_alias=True, exclude_none=True)
        for t in REGISTRY.list()
    ]
    assert REGISTRY.to_mcp() == expected
    first = REGISTRY.to_mcp()[0]
    assert first["name"] == "search"
    assert first["inputSchema"] == search.schema
    assert first["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    # The SDK reads it back as the same Tool.
    assert mcp_types.Tool.model_validate(first) == mcp_tool(search)


def test_to_mcp_without_the_sdk_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "toolbus.mcp" or m.startswith("toolbus.mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(ImportError, match=r"pip install 'toolbus\[mcp\]'"):
        REGISTRY.to_mcp()


def test_to_openai_is_unchanged() -> None:
    assert REGISTRY.to_openai() == [t.to_openai() for t in REGISTRY.list()]


# -- unknown tools ---------------------------------------------------------------------------


def test_unknown_tool_lists_the_available_names() -> None:
    with Executor(ToolRegistry([search, save])) as ex:
        r = ex.execute(ToolCall(name="serch"))
        assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_FOUND)
        assert r.error == (
            "Unknown tool 'serch'. Did you mean 'search'? Available tools: search, save"
        )
        far = ex.execute(ToolCall(name="weather"))
        assert far.error == "Unknown tool 'weather'. Available tools: search, save"


def test_unknown_tool_list_is_bounded() -> None:
    registry = ToolRegistry(
        [FunctionTool(lambda: None, name=f"tool_{i:03}") for i in range(MAX_LISTED_TOOLS + 15)]
    )
    with Executor(registry) as ex:
        r = ex.execute(ToolCall(name="x" * 5000))
    assert r.error is not None
    listed = [f"tool_{i:03}" for i in range(MAX_LISTED_TOOLS)]
    assert r.error.endswith("Available tools: " + ", ".join(listed) + " (and 15 more)")
    assert "tool_020" not in r.error
    assert len(r.error) < 500  # the invented name is cut too
    assert r.error.startswith("Unknown tool '" + "x" * 99 + "…'.")


def test_unknown_tool_with_no_tools() -> None:
    with Executor(ToolRegistry()) as ex:
        r = ex.execute(ToolCall(name="anything"))
    assert r.error == "Unknown tool 'anything': no tools are available"


class _Brings(toolbus.policies.BasePolicy):
    """A policy that brings tools along (as a spill brings read_artifact)."""

    def __init__(self, *brought: Tool) -> None:
        self.brought = brought

    def tools(self) -> tuple[Tool, ...]:
        return self.brought


def test_register_adds_the_tools_a_policy_brings() -> None:
    helper = FunctionTool(lambda: "h", name="helper")
    registry = ToolRegistry()
    registry.register(FunctionTool(lambda: 1, name="first", policies=[_Brings(helper)]))
    # The same helper again is no clash; another tool by its name is.
    registry.register(FunctionTool(lambda: 2, name="second", policies=[_Brings(helper)]))
    assert registry.names() == ["first", "helper", "second"]
    other = FunctionTool(lambda: "o", name="helper")
    with pytest.raises(DuplicateToolError, match="its policies bring a tool named 'helper'"):
        registry.register(FunctionTool(lambda: 3, name="third", policies=[_Brings(other)]))
    # Nor may a policy bring a tool under its own tool's name.
    namesake = FunctionTool(lambda: "n", name="fourth")
    with pytest.raises(DuplicateToolError, match="bring a tool named 'fourth'"):
        registry.register(FunctionTool(lambda: 4, name="fourth", policies=[_Brings(namesake)]))
    assert registry.names() == ["first", "helper", "second"]


class _Gives(toolbus.policies.BasePolicy):
    """A policy whose `tools()` gives back what it was made with, tools or not."""

    name = "gives"

    def __init__(self, given: Any) -> None:
        self.given = given

    def tools(self) -> Any:
        return self.given


def _helper() -> str:
    return "h"


_NOT_TOOLS = {
    "none": (None, "got NoneType"),
    "a name": ("read_artifact", "got str"),
    "a number": (42, "got int"),
    "a mapping": ({"helper": FunctionTool(_helper)}, "got dict"),
    "a function": ([_helper], r"got function .*make it one"),
    "a tool class": ([FunctionTool], "got type"),
    "a name in a list": (["read_artifact"], "got str 'read_artifact'"),
}


@pytest.mark.parametrize("given", list(_NOT_TOOLS), ids=list(_NOT_TOOLS))
def test_a_policy_whose_tools_are_not_tools_is_refused_where_it_is_bound(given: str) -> None:
    """A policy's `tools()` was taken on trust: None or a number raised a bare
    "not iterable", a name an AttributeError, and a plain function was made a
    tool unasked (by the executor) or held as one (by the registry). Now each
    is a TypeError naming the policy, where it is bound, and nothing changes."""
    value, said = _NOT_TOOLS[given]
    registry = ToolRegistry()
    registry.register(FunctionTool(lambda: 1, name="first"))
    guarded = FunctionTool(lambda: 2, name="second", policies=[_Gives(value)])
    with pytest.raises(TypeError, match=f"tool 'second': policy 'gives': tools\\(\\).*{said}"):
        registry.register(guarded)
    assert registry.names() == ["first"]
    with pytest.raises(TypeError, match=f"Executor: policy 'gives': tools\\(\\).*{said}"):
        Executor(registry, policies=[_Gives(value)])
    assert registry.names() == ["first"]


def test_a_policy_whose_tools_attribute_is_no_method_is_refused() -> None:
    policy = _Gives(())
    policy.tools = ["helper"]  # type: ignore[assignment,method-assign]
    with pytest.raises(TypeError, match="Executor: policy 'gives': tools must be a method"):
        Executor(ToolRegistry(), policies=[policy])
    # Tools given back in any iterable are taken (a generator, a list, a tuple).
    helper = FunctionTool(_helper, name="helper")
    registry = ToolRegistry()
    with Executor(registry, policies=[_Gives(t for t in [helper])]) as ex:
        assert ex.registry.get("helper") is helper


def test_registering_what_is_no_function_or_has_no_name_says_so() -> None:
    """(A bug hunt's: `register(42)` raised `AttributeError: __name__`.)"""
    import functools

    reg = ToolRegistry()
    with pytest.raises(TypeError, match="made of a function, not of int"):
        reg.register(42)  # type: ignore[arg-type]

    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(TypeError, match="needs name="):
        reg.register(functools.partial(add, 1))
    assert reg.tool(name="add_one")(functools.partial(add, 1)).name == "add_one"
