"""The client's roots (`toolbus/mcp/_roots.py`): offered with `connect(roots=...)`,
replaced with `set_roots`, which a 2025-11-25 session hears of.

Peer: tests/mcp_servers/asking_server.py (the SDK's `MCPServer`; its `roots`
tool asks with a `ListRoots` resolver), in-process and over stdio, each with
the 2026-07-28 protocol and with the initialize handshake of 2025-11-25.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor, wait_until
from tests.mcp_servers import asking_server
from tests.mcp_servers.peers import connect_asking
from toolbus import ToolCall, ToolRegistry
from toolbus.mcp import connect

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow


def test_the_server_gets_the_roots_and_their_changes(
    peer: str, make_executor: MakeExecutor, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    with connect_asking(peer, roots=[project, (tmp_path / "docs", "docs")]) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry)
        first = ex.execute(ToolCall(name="roots"))
        assert first.output == {
            "result": [[project.resolve().as_uri(), None], [(tmp_path / "docs").as_uri(), "docs"]]
        }
        conn.set_roots(["file:///srv/other"])
        assert [str(r.uri) for r in conn.roots] == ["file:///srv/other"]
        again = ex.execute(ToolCall(name="roots"))
        assert again.output == {"result": [["file:///srv/other", None]]}
        if peer == "in-process-legacy":  # the server's own count of the notice
            wait_until(lambda: asking_server.roots_heard == [1], what="roots/list_changed")


def test_roots_are_checked_when_given() -> None:
    with pytest.raises(ValueError, match="a root must be a path or a file:// URI"):
        connect(asking_server.server, roots=["https://example.com/x"])
    with pytest.raises(TypeError, match="roots must be a list"):
        connect(asking_server.server, roots="/srv")
    for nowhere in ("file://", "file:", "file:relative"):  # (read leniently: everything)
        with pytest.raises(ValueError, match="needs an absolute path"):
            connect(asking_server.server, roots=[nowhere])
    with pytest.raises(ValueError, match="NUL"):
        connect(asking_server.server, roots=["/srv/a\0b"])
    with pytest.raises(TypeError, match=r"\(path or URI, name\)"):
        connect(asking_server.server, roots=[("/srv", 3)])  # type: ignore[list-item]


def test_without_roots_none_are_offered(make_executor: MakeExecutor) -> None:
    with connect(asking_server.server) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        r = make_executor(registry).execute(ToolCall(name="roots"))
        assert r.status == "error" and "roots" in (r.error or "")
        assert conn.roots == []
        with pytest.raises(ValueError, match="offers no roots: connect with roots="):
            conn.set_roots(["/srv"])
