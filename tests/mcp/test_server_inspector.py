"""The MCP Inspector's command line (npm `@modelcontextprotocol/inspector@1.0.3`,
the TypeScript SDK's client) driving `toolbus mcp serve` over stdio and HTTP:
`tools/list` shows output schemas and the four hints; `tools/call` returns
structured content (which the TypeScript client checks against the schema).
Over HTTP with OAuth, it sends a bearer token (`--header`), minted here.

The test command installs it into `.cache/npm`; `MCP_INSPECTOR=/path/to/mcp-inspector`
names another. Without node or the Inspector these tests skip. The guard's
refusals are tested in test_server_http.py, OAuth's in test_oauth_server.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.mcp.test_server_http import start, stop
from tests.mcp_servers.oauth import Keys, claims

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "tests.mcp_servers.registry_module:registry"
INSPECTOR = Path(
    os.environ.get("MCP_INSPECTOR")
    or ROOT / ".cache" / "npm" / "node_modules" / ".bin" / "mcp-inspector"
)

# The slow tier (tests/README.md): the MCP Inspector (node) run against the server.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("node") is None, reason="needs node (the Inspector runs on it)"
    ),
    pytest.mark.skipif(
        not INSPECTOR.exists(),
        reason=f"needs the MCP Inspector at {INSPECTOR}: npm install --prefix .cache/npm "
        "@modelcontextprotocol/inspector@1.0.3 (as the test command does), or set MCP_INSPECTOR",
    ),
]

SERVE = [sys.executable, "-m", "toolbus", "mcp", "serve", REGISTRY]


def inspect(
    target: list[str],
    method: str,
    *args: str,
    tool_args: tuple[str, ...] = (),
    fails: bool = False,
) -> Any:
    """Run the Inspector's CLI once; its JSON answer (`fails`: its error output)."""
    # `--tool-arg` takes every word up to the next option: it goes first.
    given = [w for a in tool_args for w in ("--tool-arg", a)]
    proc = subprocess.run(
        [str(INSPECTOR), "--cli", *given, "--method", method, *args, "--", *target],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if fails:
        assert proc.returncode != 0, proc.stdout
        return proc.stderr + proc.stdout
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    proc, url = start(["-m", "toolbus", "mcp", "serve", REGISTRY, "--http", "--port", "0"])
    yield url
    assert stop(proc) == 0


def check_listing(listing: Any) -> None:
    tools = {t["name"]: t for t in listing["tools"]}
    assert tools["add"]["outputSchema"] == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "x-toolbus-wrapped": True,  # a toolbus client unwraps its outputs
    }
    assert tools["forecast"]["outputSchema"]["required"] == ["city", "celsius", "summary"]
    assert "outputSchema" not in tools["chart"]
    assert tools["set_mode"]["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert tools["add"]["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": True,
    }


def check_call(answer: Any) -> None:
    assert answer.get("isError") is not True
    assert answer["structuredContent"] == {"city": "Oslo", "celsius": 21.5, "summary": "sunny"}


def test_inspector_over_stdio() -> None:
    check_listing(inspect(SERVE, "tools/list"))
    check_call(inspect(SERVE, "tools/call", "--tool-name", "forecast", tool_args=("city=Oslo",)))


def test_inspector_over_http(http_url: str) -> None:
    http = ("--transport", "http")
    check_listing(inspect([http_url], "tools/list", *http))
    forecast = ("--tool-name", "forecast")
    check_call(inspect([http_url], "tools/call", *http, *forecast, tool_args=("city=Oslo",)))
    added = inspect(
        [http_url], "tools/call", *http, "--tool-name", "add", tool_args=("a=2", "b=40")
    )
    assert added["structuredContent"] == {"result": 42}


def test_inspector_with_a_token_over_oauth(tmp_path: Path) -> None:
    keys = Keys()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(keys.jwks()))
    issuer, resource = "https://auth.example.test", "https://tools.example.test/mcp"
    oauth = ["--jwks", str(jwks), "--issuer", issuer, "--resource-url", resource,
             "--required-scope", "tools"]  # fmt: skip
    proc, url = start(["-m", "toolbus", "mcp", "serve", REGISTRY, "--http", "--port", "0", *oauth])
    try:
        token = keys.mint(claims(issuer, resource, "tools"))
        http = ("--transport", "http", "--header", f"Authorization: Bearer {token}")
        check_listing(inspect([url], "tools/list", *http))
        forecast = ("--tool-name", "forecast")
        check_call(inspect([url], "tools/call", *http, *forecast, tool_args=("city=Oslo",)))
        refused = inspect([url], "tools/list", "--transport", "http", fails=True)
        assert "invalid_token" in refused
        assert token not in refused
    finally:
        assert stop(proc) == 0
