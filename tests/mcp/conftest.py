"""The peer of the MCP client tests that run on every kind (tests/mcp_servers/peers.py).

A module that needs fewer kinds, or other set-up, defines its own `peer`.
"""

from __future__ import annotations

import pytest

from tests.mcp_servers import asking_server, library_server
from tests.mcp_servers.peers import PEERS, use_peer


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each kind of peer in turn: in-process or over stdio, either protocol;
    the in-process servers' counts back at zero."""
    use_peer(request.param, monkeypatch)
    asking_server.runs.clear()
    asking_server.roots_heard.clear()
    library_server.readers.update(inside=0, peak=0)
    return str(request.param)
