"""OAuth for the tests: keys and tokens made here, an authorization server
built from the MCP SDK's server-side auth pieces, and toolbus's resource server.

- `Keys`: signing keys made in the test (RSA and EC), their JWKS, and `mint`
  for a JWT with any claims.
- `AuthServer`: the SDK's authorization server routes (`create_auth_routes`:
  metadata, dynamic registration, authorize, token, revoke) over an in-memory
  provider whose access tokens are JWTs signed with `Keys`, plus what the
  SDK's token handler does not serve: the `client_credentials` grant, and the
  JWKS at `/jwks`. Its authorize endpoint approves at once (the "user"), so
  a client follows the redirect to get its code.
- `serve(make_app)`: an ASGI app on a free loopback port, in a thread; the
  app is made knowing its own base URL (a resource server must know its
  URL, and tokens name it).
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolbus._asgi import ServerThread, bind
from toolbus.mcp._oauth_server import _read_body, _replay

__all__ = ["AuthServer", "Keys", "serve"]


class Keys:
    """Signing keys by key id; `jwks()` publishes their public halves."""

    def __init__(self) -> None:
        self.private: dict[str, tuple[Any, str]] = {}
        self.add("rsa-1", "RS256")

    def add(self, kid: str, alg: str) -> None:
        if alg.startswith("ES"):
            key: Any = ec.generate_private_key(ec.SECP256R1())
        else:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private[kid] = (key, alg)

    def jwks(self, *kids: str) -> dict[str, Any]:
        keys = []
        for kid in kids or tuple(self.private):
            key, alg = self.private[kid]
            algorithm = jwt.get_algorithm_by_name(alg)
            jwk: dict[str, Any] = algorithm.to_jwk(key.public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": keys}

    def mint(
        self, claims: dict[str, Any], *, kid: str = "rsa-1", headers: dict[str, Any] | None = None
    ) -> str:
        key, alg = self.private[kid]
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, **(headers or {})})


def claims(
    issuer: str, audience: str, scope: str = "", ttl: float = 300, **more: Any
) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": issuer, "aud": audience, "sub": "user-1", "client_id": "agent", "iat": now}
    return {**base, "exp": now + int(ttl), **({"scope": scope} if scope else {}), **more}


@dataclass
class _Provider:
    """The authorization server's state: clients, codes, refresh tokens."""

    server: AuthServer
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.server.registrations += 1

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        # The user signs in and consents at once.
        code = secrets.token_urlsafe(16)
        consent = self.server.consent
        scopes = [s for s in params.scopes or [] if consent is None or s in consent]
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=scopes,
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject="user-1",
        )
        self.server.authorizations += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self.server.tokens(
            client.client_id or "", authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if refresh_token.token not in self.refresh:
            raise TokenError("invalid_grant", "refresh token revoked")
        del self.refresh[refresh_token.token]  # rotated
        self.server.refreshes += 1
        return self.server.tokens(
            client.client_id or "", scopes or refresh_token.scopes, refresh_token.resource
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        return None  # (access tokens are JWTs: the resource server checks them itself)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.refresh.pop(token.token, None)


class AuthServer:
    """An authorization server (see the module's doc); `url` once served."""

    def __init__(self, keys: Keys, *, access_ttl: float = 300) -> None:
        self.keys = keys
        self.access_ttl = access_ttl
        # What a client is told of a token's life (`expires_in`; None: the
        # truth): 0 makes it refresh before every request, the JWT still valid.
        self.expires_in: int | None = None
        # What the user consents to (None: whatever is asked).
        self.consent: set[str] | None = None
        self.url = ""
        self.provider = _Provider(self)
        self.registrations = self.authorizations = self.refreshes = self.grants = 0
        self.lock = threading.Lock()

    def register(self, client_id: str, secret: str, scope: str = "") -> None:
        """A client registered beforehand (for client credentials)."""
        self.provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            redirect_uris=None,
            grant_types=["client_credentials"],
            token_endpoint_auth_method="client_secret_basic",
            scope=scope or None,
        )

    def revoke_refresh_tokens(self) -> None:
        self.provider.refresh.clear()

    def tokens(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        assert resource, "the client named no resource (RFC 8707)"
        now = int(time.time())
        access = self.keys.mint(
            {
                "iss": self.url,
                "aud": resource,
                "sub": "user-1",
                "client_id": client_id,
                "scope": " ".join(scopes),
                "iat": now,
                "exp": now + int(self.access_ttl),
                "jti": secrets.token_hex(8),
            }
        )
        refresh = secrets.token_urlsafe(16)
        self.provider.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=int(self.access_ttl) if self.expires_in is None else self.expires_in,
            scope=" ".join(scopes) or None,
            refresh_token=refresh,
        )

    def app(self, url: str) -> Any:
        self.url = url
        # (AuthSettings keeps a path-less issuer without a slash, as RFC 8414
        # compares issuers as strings; AnyHttpUrl(url) would add one.)
        issuer = AuthSettings(issuer_url=url, resource_server_url=None).issuer_url  # type: ignore[arg-type]
        routes = create_auth_routes(
            self.provider,
            issuer,
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
        )
        routes.append(Route("/jwks", self._jwks, methods=["GET"]))
        inner = Starlette(routes=routes)
        return _ClientCredentials(inner, self)

    async def _jwks(self, request: Request) -> Response:
        return JSONResponse(self.keys.jwks())


class _ClientCredentials:
    """The `client_credentials` grant at `/token` (RFC 6749 4.4), which the
    SDK's token handler does not serve; every other request goes on to it."""

    def __init__(self, app: Any, server: AuthServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/token" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive, 1 << 20)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        if not complete or form.get("grant_type") != "client_credentials":
            await self.app(scope, _replay(body, complete, receive), send)
            return
        response = self._grant(form, dict(Request(scope).headers))
        await response(scope, receive, send)

    def _grant(self, form: dict[str, str], headers: dict[str, str]) -> Response:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        basic = headers.get("authorization", "")
        if basic.lower().startswith("basic "):
            decoded = base64.b64decode(basic[6:]).decode()
            client_id, _, secret = decoded.partition(":")
            client_id, secret = urllib.parse.unquote(client_id), urllib.parse.unquote(secret)
        client = self.server.provider.clients.get(client_id or "")
        if client is None or client.client_secret is None or client.client_secret != secret:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        asked = form.get("scope", "").split()
        allowed = (client.scope or "").split()
        if any(s not in allowed for s in asked):
            return JSONResponse({"error": "invalid_scope"}, status_code=400)
        self.server.grants += 1
        token = self.server.tokens(client_id or "", asked or allowed, form.get("resource"))
        return JSONResponse(token.model_dump(mode="json", exclude_none=True))


@contextlib.contextmanager
def serve(make_app: Callable[[str], Any], name: str = "oauth-test") -> Iterator[str]:
    """Serve the app `make_app(base_url)` makes on a free loopback port, in a
    thread; yield its base URL (`http://127.0.0.1:<port>`)."""
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    runner = ServerThread(make_app(base), sock, name)
    try:
        assert runner.wait_started(30), "the server did not start"
        yield base
    finally:
        runner.stop(10)
        sock.close()
