"""MCP for toolbus, both ways (needs the `mcp` extra: `pip install toolbus[mcp]`).

Client: run an MCP server's tools through toolbus, with the same timeouts,
retries, masking, events and scheduling as local tools.

    from toolbus.mcp import connect_stdio

    with connect_stdio("python", ["-m", "mcp_server_time"]) as time_server:
        time_server.register(registry)          # one toolbus tool per MCP tool

Server: expose a registry to MCP clients, every call supervised by an Executor.

    from toolbus.mcp import serve_http, serve_stdio

    serve_stdio(registry, timeout=10)           # or: toolbus mcp serve module:registry
    serve_http(registry, port=8765)             # or: toolbus mcp serve module:registry --http

See docs/mcp.md.
"""

from __future__ import annotations

try:
    import mcp as _mcp  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("toolbus.mcp needs the MCP SDK: pip install 'toolbus[mcp]'") from e

from ..approvals import InputAnswer, InputRequest
from ._connect import (
    MCPTarget,
    aconnect,
    aconnect_http,
    aconnect_stdio,
    connect,
    connect_http,
    connect_stdio,
)
from ._connection import MCPConnection
from ._elicitation import Elicitation, ElicitationAnswer, ElicitationHandler
from ._errors import (
    MCPCallError,
    MCPConnectError,
    MCPConnectionLost,
    MCPOutputError,
    MCPServerUnavailable,
)
from ._link import ConnectionStatus
from ._oauth_client import (
    Authorize,
    MemoryTokens,
    TokenFile,
    oauth_authorization_code,
    oauth_client_credentials,
)
from ._oauth_server import OAuthResource
from ._output import tool_output
from ._resource_updates import RESOURCE_UPDATED, ResourceUpdated
from ._roots import RootsOption
from ._sampling import SamplingAnswer, SamplingHandler, SamplingRequest
from ._serve_http import aserve_http, http_app, serve_http
from ._server import (
    aserve_stdio,
    build_server,
    call_result,
    load_registry,
    mcp_tool,
    serve_stdio,
    tool_annotations,
)
from ._tool import MCPTool

__all__ = [
    "RESOURCE_UPDATED",
    "Authorize",
    "ConnectionStatus",
    "Elicitation",
    "ElicitationAnswer",
    "ElicitationHandler",
    "InputAnswer",
    "InputRequest",
    "MCPCallError",
    "MCPConnectError",
    "MCPConnection",
    "MCPConnectionLost",
    "MCPOutputError",
    "MCPServerUnavailable",
    "MCPTarget",
    "MCPTool",
    "MemoryTokens",
    "OAuthResource",
    "ResourceUpdated",
    "RootsOption",
    "SamplingAnswer",
    "SamplingHandler",
    "SamplingRequest",
    "TokenFile",
    "aconnect",
    "aconnect_http",
    "aconnect_stdio",
    "aserve_http",
    "aserve_stdio",
    "build_server",
    "call_result",
    "connect",
    "connect_http",
    "connect_stdio",
    "http_app",
    "load_registry",
    "mcp_tool",
    "oauth_authorization_code",
    "oauth_client_credentials",
    "serve_http",
    "serve_stdio",
    "tool_annotations",
    "tool_output",
]
