"""How the MCP client tests reach their peers: the SDK's servers in-process and
over stdio, each with the current protocol (2026-07-28) or the initialize
handshake of earlier versions; and npm's server-everything when installed."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from toolbus.mcp import MCPConnection, connect, connect_stdio

from . import asking_server, spec_server

HERE = Path(__file__).parent
SPEC = str(HERE / "spec_server.py")
ASKING = str(HERE / "asking_server.py")
ROOT = HERE.parent.parent

# The four ways to one SDK server: where it runs, and which protocol is spoken.
PEERS = ["in-process", "in-process-legacy", "stdio", "stdio-legacy"]
# Where the protocol version changes nothing the test looks at: one stdio process fewer.
SOME_PEERS = ["in-process", "in-process-legacy", "stdio"]

# Where the test command installs npm's reference server (scripts/npm_peers.py, pinned there).
EVERYTHING_CI = (
    ROOT / ".cache" / "npm" / "node_modules" / "@modelcontextprotocol" / "server-everything"
)


def use_peer(peer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the connections of this test speak the peer's protocol."""
    if peer.endswith("-legacy"):
        # The initialize handshake (2025-11-25), as servers before 2026-07-28 speak it.
        import toolbus.mcp._connect as connecting

        monkeypatch.setattr(connecting, "Client", functools.partial(Client, mode="legacy"))


def connect_spec(peer: str, *, lowlevel: bool = False, **options: Any) -> MCPConnection:
    """`spec_server.server` (or `.lowlevel`) as `peer` says (after `use_peer`)."""
    if peer.startswith("in-process"):
        return connect(spec_server.lowlevel if lowlevel else spec_server.server, **options)
    return connect_stdio(sys.executable, [SPEC, *(["lowlevel"] if lowlevel else [])], **options)


def connect_asking(peer: str, **options: Any) -> MCPConnection:
    """`asking_server.server` as `peer` says (after `use_peer`)."""
    if peer.startswith("in-process"):
        return connect(asking_server.server, **options)
    return connect_stdio(sys.executable, [ASKING], **options)


def everything_server() -> str:
    """The dist/index.js of server-everything: MCP_EVERYTHING_SERVER, else the
    copy the test command installs; skips the test without one (or without node)."""
    path = os.environ.get("MCP_EVERYTHING_SERVER") or str(EVERYTHING_CI / "dist" / "index.js")
    if not shutil.which("node"):
        pytest.skip("node is not installed (server-everything runs on it)")
    if not Path(path).is_file():
        pytest.skip(
            "@modelcontextprotocol/server-everything is not installed: the test command installs it "
            f"into {EVERYTHING_CI.parents[2]}, or set MCP_EVERYTHING_SERVER to its dist/index.js"
        )
    return path
