"""An MCP server's tools whose names break the rule for tools' names (MCP's
own: 1 to 128 ASCII letters, digits, '_', '-' or '.') are left out with a
warning naming each; the server's other tools mount as before, dotted names
included. A `prefix` that breaks the rule is an error."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("mcp")

from tests.mcp_servers.scripted import Peer
from toolbus import ToolRegistry
from toolbus.mcp import connect


def test_tools_with_names_no_format_can_carry_are_left_out_naming_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    peer = Peer("odd-names")
    for name in ("get_weather", "admin.tools.list", "get weather", "user/update", "peek\x1b[8m"):
        peer.tool(name)
    registry = ToolRegistry()
    with caplog.at_level(logging.WARNING, "toolbus.mcp"), connect(peer.server) as conn:
        made = conn.register(registry)
        assert [t.name for t in made] == ["get_weather", "admin.tools.list"]
        assert registry.names() == ["get_weather", "admin.tools.list"]
        # A tool the server adds later is held to the same rule.
        peer.tool("later tool")
        peer.tool("later_tool")
        conn.refresh()
        assert registry.names() == ["get_weather", "admin.tools.list", "later_tool"]
    for shown, problem in [
        ("'get weather'", "' ' is not one"),
        ("'user/update'", "'/' is not one"),
        ("'peek\\x1b[8m'", "'\\x1b' is not one"),
        ("'later tool'", "' ' is not one"),
    ]:
        assert (
            f"MCP server 'odd-names': tool {shown} left out, its name is not usable: "
            f"tool {shown}: a tool's name must be 1 to 128 ASCII letters"
        ) in caplog.text
        assert problem in caplog.text
    assert "\x1b" not in caplog.text  # written out, not passed to the log raw


def test_a_prefix_that_breaks_the_rule_is_an_error() -> None:
    peer = Peer()
    peer.tool("t")
    with connect(peer.server) as conn:
        for prefix in ("my server ", "srv/", "p" * 128):
            with pytest.raises(ValueError, match=r"MCPConnection\.tools/register: prefix"):
                conn.register(ToolRegistry(), prefix=prefix)
            with pytest.raises(ValueError, match="cannot start a tool's name"):
                conn.tools(prefix=prefix)
        assert [t.name for t in conn.tools(prefix="srv.")] == ["srv.t"]
