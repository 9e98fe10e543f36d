"""OAuth for the client: tokens from an authorization server, for a server that asks for them.

    auth = oauth_client_credentials(url, client_id="agent", client_secret=secret,
                                    issuer="https://auth.example.com",
                                    tokens=TokenFile("~/.config/agent/tokens.json"))
    with connect_http(url, auth=auth) as server: ...

Both builders return the MCP SDK's own providers (`OAuthClientProvider` and
`ClientCredentialsOAuthProvider`, httpx `Auth`s), so everything the protocol
asks of a client happens there: discovery from the server's 401 (RFC 9728,
RFC 8414), dynamic registration, PKCE, the `resource` indicator, refresh,
stepping up to the scopes a 403 names. What toolbus adds is the shape a
program wants: a callback that gets the authorization URL and returns where
the browser came back to, sync or async; tokens kept in a file of the user's
choosing; arguments checked when the provider is made, not at the first
request. `connect_http(auth=...)` takes these or any other httpx `Auth`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientMetadata,
)
from pydantic import AnyUrl

from ..tools._offer import scope_name
from ._oauth_tokens import MemoryTokens, TokenFile, _Store, preregistered

__all__ = [
    "Authorize",
    "MemoryTokens",
    "TokenFile",
    "check_auth",
    "oauth_authorization_code",
    "oauth_client_credentials",
]

log = logging.getLogger("toolbus.mcp")

Authorize = Callable[[str], str] | Callable[[str], Awaitable[str]]
"""Given the authorization URL, have the user sign in (open a browser, print
the URL...) and return the URL the authorization server redirected back to
(its query is enough: `?code=...&state=...`). Sync or async."""


def oauth_authorization_code(
    server_url: str,
    *,
    redirect_uri: str,
    authorize: Authorize,
    tokens: TokenStorage | None = None,
    scopes: Sequence[str] | None = None,
    client_name: str = "toolbus",
    client_metadata_url: str | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
) -> OAuthClientProvider:
    """The authorization code flow with PKCE, for an agent acting for a person.

    At the first request the server refuses, the provider discovers the
    authorization server, registers a client (dynamically, or as
    `client_metadata_url` when the server accepts URL client ids), and calls
    `authorize(url)`: the user signs in there, and `authorize` returns the URL
    the browser was sent back to (`redirect_uri` with `?code=...&state=...`).
    A refusal there (`?error=access_denied`) ends the flow with its words.
    Tokens go to `tokens` (default: memory only; `TokenFile(path)` keeps them)
    and are refreshed when they expire. `scopes`: what to ask for (default:
    what the server's challenge or metadata says).
    """
    where = "oauth_authorization_code"
    _check_url(server_url, "server_url", where)
    _check_url(redirect_uri, "redirect_uri", where)
    if not callable(authorize):
        raise TypeError(f"{where}: authorize must be a function of the authorization URL")
    callback = _Callback(authorize)
    if client_id is not None:
        _text(client_id, "client_id", where)
    if client_secret is not None and (client_id is None or not isinstance(client_secret, str)):
        raise TypeError(f"{where}: client_secret needs a client_id, and must be a string")
    metadata = OAuthClientMetadata(
        client_name=_text(client_name, "client_name", where),
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=_scope(scopes, where),
    )
    return OAuthClientProvider(
        server_url,
        metadata,
        preregistered(_storage(tokens, where, server_url), client_id, client_secret, metadata),
        redirect_handler=callback.redirect,
        callback_handler=callback.result,
        client_metadata_url=client_metadata_url,
    )


def oauth_client_credentials(
    server_url: str,
    *,
    client_id: str,
    client_secret: str,
    issuer: str,
    tokens: TokenStorage | None = None,
    scopes: Sequence[str] | None = None,
    method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic",
) -> ClientCredentialsOAuthProvider:
    """The client credentials flow, for an agent acting for itself (no person involved).

    The client was registered beforehand: `client_id` and `client_secret`,
    sent to the token endpoint as `method` says. `issuer`: the authorization
    server that registered it (its issuer identifier): the secret is sent to
    no other, whatever authorization server the MCP server names. Tokens go
    to `tokens` (default: memory) and a new one is fetched when the old expires.
    """
    where = "oauth_client_credentials"
    _check_url(server_url, "server_url", where)
    _check_url(issuer, "issuer", where)
    if method not in ("client_secret_basic", "client_secret_post"):
        raise ValueError(
            f"{where}: method must be 'client_secret_basic' or 'client_secret_post', not {method!r}"
        )
    return ClientCredentialsOAuthProvider(
        server_url,
        _storage(tokens, where, server_url),
        _text(client_id, "client_id", where),
        _text(client_secret, "client_secret", where),
        token_endpoint_auth_method=method,
        scope=_scope(scopes, where),
        issuer=issuer,
    )


def check_auth(auth: object, where: str) -> httpx2.Auth | None:
    """`auth` as `connect_http` takes it: None or an httpx `Auth` (an SDK OAuth provider)."""
    if auth is None or isinstance(auth, httpx2.Auth):
        return auth
    raise TypeError(
        f"{where}: auth must be an httpx Auth, such as oauth_authorization_code(...) or "
        f"oauth_client_credentials(...), not {type(auth).__name__}"
    )


class _Callback:
    """`authorize` as the SDK's provider calls it: a redirect handler, then a
    callback handler returning what the redirect carried."""

    def __init__(self, authorize: Authorize) -> None:
        self._authorize = authorize
        self._returned: str | None = None

    async def redirect(self, url: str) -> None:
        self._returned = None
        if inspect.iscoroutinefunction(self._authorize):
            returned = await self._authorize(url)
        else:
            # Abandoned when the connection gives up: a person who never
            # comes back must not hold the connection past its timeout.
            returned = await anyio.to_thread.run_sync(self._authorize, url, abandon_on_cancel=True)
            if inspect.isawaitable(returned):
                returned = await returned
        if not isinstance(returned, str):
            raise OAuthFlowError(
                "authorize must return the URL the authorization server redirected to, "
                f"not {type(returned).__name__}"
            )
        self._returned = returned

    async def result(self) -> AuthorizationCodeResult:
        returned, self._returned = self._returned, None
        if returned is None:
            raise OAuthFlowError("authorize returned no redirect URL")
        query = urlsplit(returned).query if "?" in returned else returned.lstrip("?")
        fields = {k: v[0] for k, v in parse_qs(query).items() if v}
        if "error" in fields:
            detail = fields.get("error_description")
            raise OAuthFlowError(
                f"the authorization server refused: {fields['error']}"
                + (f" ({detail})" if detail else "")
            )
        code = fields.get("code")
        if not code:
            raise OAuthFlowError("the redirect URL authorize returned carries no code")
        return AuthorizationCodeResult(code=code, state=fields.get("state"), iss=fields.get("iss"))


def _check_url(value: object, name: str, where: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{where}: {name} must be a URL string, not {type(value).__name__}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{where}: {name} must be an http(s) URL, not {value!r}")


def _text(value: object, name: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{where}: {name} must be a non-empty string")
    return value


def _scope(scopes: Sequence[str] | None, where: str) -> str | None:
    if scopes is None:
        return None
    if isinstance(scopes, str) or not all(scope_name(s) for s in scopes):
        raise TypeError(
            f"{where}: scopes must be a sequence of scope names (printable ASCII without "
            "spaces, double quotes or backslashes)"
        )
    return " ".join(scopes) or None


def _storage(tokens: TokenStorage | None, where: str, server_url: str) -> TokenStorage:
    if tokens is None:
        tokens = MemoryTokens()
    if isinstance(tokens, _Store):
        return tokens.for_server(server_url)
    missing = [
        m
        for m in ("get_tokens", "set_tokens", "get_client_info", "set_client_info")
        if not callable(getattr(tokens, m, None))
    ]
    if missing:
        raise TypeError(f"{where}: tokens must be a TokenStorage (it has no {missing[0]})")
    return tokens
