"""The HTTP server as an OAuth 2.1 resource server (MCP's authorization spec).

    serve_http(registry, oauth=OAuthResource(jwks="https://auth.example.com/jwks",
                                            issuer="https://auth.example.com",
                                            resource_url="https://tools.example.com/mcp"))

`OAuthGate` stands between the `Guard` and the SDK's app. For each request:

- the protected-resource metadata (RFC 9728) is served at its path for the
  resource (`/.well-known/oauth-protected-resource/mcp` for `/mcp`): the
  authorization server, and the scopes the resource and its tools use;
- at `/mcp`, the bearer token is checked (`JwtVerifier`); none, or a bad one,
  gets `401` with `WWW-Authenticate: Bearer ... resource_metadata="<that URL>"`,
  so a client can find where to get one (the SDK's `BearerAuthBackend` and
  `RequireAuthMiddleware`);
- a token without the resource's `required_scopes`, or a `tools/call` of a
  tool whose `scopes` the token lacks, gets `403` with
  `error="insufficient_scope"` and the scopes to ask for, before anything of
  the call runs (the body is read here, then handed on unchanged).

`tools/list` offers a token only the tools it may call (`_server.py`, through
`toolbus.tools.offered`, with the scopes this gate puts in the request).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl, ValidationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from ..tools import ToolRegistry
from ..tools._offer import check_scopes, missing_scopes, scope_name
from ._jwt import JwksSource, JwtVerifier

__all__ = ["GRANTED", "OAuthGate", "OAuthResource", "granted_scopes"]

# Where the gate leaves the scopes a request's token grants (ASGI scope key).
GRANTED = "toolbus.granted_scopes"

Asgi = Callable[[Any, Any, Any], Awaitable[None]]


@dataclass(frozen=True)
class OAuthResource:
    """What makes the HTTP server a resource server (every field is checked when made).

    `jwks`: the authorization server's signing keys, a file or an http(s) URL.
    `issuer`: its issuer identifier (a token's `iss`). `resource_url`: this
    server's URL as clients reach it (`https://tools.example.com/mcp`), which a
    token's `aud` must name. `required_scopes`: what every request's token must
    grant (a tool's own `scopes` come on top). `leeway`: the clock skew allowed
    on `exp` and `nbf`, in seconds (default 30). `jwks_refresh`: the least time
    between two reads of the key set for tokens with an unknown key id
    (default 10 s); `jwks_ttl`: how long a key set is used before it is read
    again (default 600 s).
    """

    jwks: str | Path
    issuer: str
    resource_url: str
    required_scopes: tuple[str, ...] = ()
    leeway: float = 30.0
    jwks_refresh: float = 10.0
    jwks_ttl: float = 600.0
    _keys: JwksSource = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = "OAuthResource"
        if not isinstance(self.jwks, str | Path) or not str(self.jwks).strip():
            raise TypeError(f"{where}: jwks must be a file path or an http(s) URL")
        for name in ("issuer", "resource_url"):
            _check_url(getattr(self, name), name, where)
        if urlsplit(self.resource_url).fragment:
            raise ValueError(f"{where}: resource_url must not have a fragment (RFC 8707)")
        object.__setattr__(
            self, "required_scopes", check_scopes(self.required_scopes, f"{where} required_scopes")
        )
        for name in ("leeway", "jwks_refresh", "jwks_ttl"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{where}: {name} must be a number of seconds >= 0, not {value!r}")
            if value == float("inf"):
                raise ValueError(f"{where}: {name} must be finite")
        keys = JwksSource(self.jwks, refresh=self.jwks_refresh, ttl=self.jwks_ttl)
        object.__setattr__(self, "_keys", keys)

    @property
    def metadata_url(self) -> str:
        """Where the protected-resource metadata is served (RFC 9728 3.1)."""
        return str(build_resource_metadata_url(AnyHttpUrl(self.resource_url)))

    def _verifier(self) -> JwtVerifier:
        return JwtVerifier(
            self._keys, issuer=self.issuer, audience=self.resource_url, leeway=self.leeway
        )


# What RFC 3986 lets a URL hold as it is: anything else (a space, a quote, a
# control character) would be percent-encoded by the SDK's models, and the
# URL published would not be the one given.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")


def _check_url(value: object, name: str, where: str) -> None:
    if not isinstance(value, str) or not _URL_CHARS.fullmatch(value):
        raise ValueError(
            f"{where}: {name} must be an http(s) URL of plain URL characters, not {value!r}"
        )
    try:
        parts = urlsplit(value)
    except ValueError as e:
        raise ValueError(f"{where}: {name} is not a valid URL ({value!r}: {e})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{where}: {name} must be an http(s) URL, not {value!r}")
    try:
        AnyHttpUrl(value)  # (the SDK's own check: a port out of range, a bad host)
    except ValidationError as e:
        why = e.errors()[0]["msg"] if e.errors() else "not a URL"
        raise ValueError(f"{where}: {name} is not a valid URL ({value!r}: {why})") from None


def granted_scopes(request: object) -> frozenset[str] | None:
    """The scopes the token of `request` (an MCP handler's `ctx.request`)
    grants, as the gate found them; None without a gate (stdio, a shared token)."""
    scope = getattr(request, "scope", None)
    granted = scope.get(GRANTED) if isinstance(scope, dict) else None
    return granted if isinstance(granted, frozenset) else None


class OAuthGate:
    """ASGI middleware: the resource server's checks (see the module's doc)."""

    def __init__(self, app: Asgi, resource: OAuthResource, registry: ToolRegistry, path: str):
        self.app = app
        self.resource = resource
        self.registry = registry
        self.path = path
        self._backend = BearerAuthBackend(resource._verifier())
        metadata_url = resource.metadata_url
        self._metadata_path = urlsplit(metadata_url).path
        self._metadata = cors_middleware(self._metadata_response, ["GET", "OPTIONS"])
        # The SDK's refusal without a good token (401), then the scopes (403,
        # with the scopes to ask for, which the SDK's 403 leaves out), then
        # the SDK's app with the token in its context.
        self._protected = RequireAuthMiddleware(
            _Scopes(AuthContextMiddleware(app), self), [], AnyHttpUrl(metadata_url)
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == self._metadata_path:
            await self._metadata(scope, receive, send)
            return
        if path.rstrip("/") != self.path:
            await self.app(scope, receive, send)  # (the SDK's 404)
            return
        found = await self._backend.authenticate(HTTPConnection(scope))
        if found is not None:
            credentials, user = found
            scope = {**scope, "auth": credentials, "user": user}
            scope[GRANTED] = frozenset(credentials.scopes)
        await self._protected(scope, receive, send)

    async def _metadata_response(self, request: Request) -> Response:
        # Built per request: tools registered later bring their scopes.
        scopes = dict.fromkeys(self.resource.required_scopes)
        for tool in self.registry.list():
            scopes.update(dict.fromkeys(tool.scopes))
        # Given as text: the model keeps a path-less URL as it is, where
        # AnyHttpUrl would add a slash, and issuers compare as strings (RFC 8414).
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": self.resource.resource_url,
                "authorization_servers": [self.resource.issuer],
                "scopes_supported": list(scopes) or None,
            }
        )
        return PydanticJSONResponse(content=metadata, headers={"Cache-Control": "max-age=60"})

    def needed(self, body: bytes, granted: frozenset[str]) -> tuple[str, ...]:
        """The scopes a request's body calls for that `granted` lacks: those of
        each tool it calls (`tools/call`); () for anything else, or a body this
        cannot read (the SDK answers that one)."""
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            try:
                # What orjson refuses and the SDK's parsers take (NaN,
                # Infinity, numbers beyond a double): read as they would.
                message = json.loads(body)
            except (ValueError, RecursionError):
                return ()  # (nor can the SDK: nothing runs)
        missing: dict[str, None] = {}
        for item in message if isinstance(message, list) else (message,):
            if not isinstance(item, dict) or item.get("method") != "tools/call":
                continue
            params = item.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            tool = self.registry.get(name) if isinstance(name, str) else None
            if tool is not None:
                missing.update(dict.fromkeys(missing_scopes(tool, granted)))
        return tuple(missing)


class _Scopes:
    """Refuses (403) a token without the resource's required scopes, and a
    `tools/call` whose tool's scopes the token lacks, before it runs."""

    def __init__(self, app: Asgi, gate: OAuthGate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        granted: frozenset[str] = scope.get(GRANTED, frozenset())
        required = [s for s in self.gate.resource.required_scopes if s not in granted]
        if required:
            await _insufficient_scope(send, required, granted, self.gate)
            return
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive, DEFAULT_MAX_REQUEST_BODY_SIZE)
        missing = self.gate.needed(body, granted) if complete else ()
        if missing:
            await _insufficient_scope(send, missing, granted, self.gate)
            return
        await self.app(scope, _replay(body, complete, receive), send)


async def _read_body(receive: Any, limit: int) -> tuple[bytes, bool]:
    """The request's body, up to `limit` bytes; (what was read, whether that is all of it).
    A longer body is handed on as it is: the SDK refuses it (413) before anything runs."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False  # a disconnect: nothing will run
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > limit:
            return b"".join(chunks), False


def _replay(body: bytes, complete: bool, receive: Any) -> Any:
    """A `receive` that gives the body read so far, then what follows it."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


async def _insufficient_scope(
    send: Any, missing: Iterable[str], granted: frozenset[str], gate: OAuthGate
) -> None:
    # The scopes to ask for: the ones granted with the missing ones, so a
    # client that asks for exactly these keeps what it had (step-up, MCP
    # authorization "Runtime insufficient scope errors").
    needed = list(missing)
    kept = sorted(s for s in granted if scope_name(s))  # (a token's text goes in a header)
    asked = " ".join(dict.fromkeys([*gate.resource.required_scopes, *kept, *needed]))
    description = f"needs scope {' '.join(needed)}"
    challenge = (
        f'Bearer error="insufficient_scope", scope="{asked}", '
        f'resource_metadata="{gate.resource.metadata_url}", error_description="{description}"'
    )
    body = json.dumps({"error": "insufficient_scope", "error_description": description}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", challenge.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
