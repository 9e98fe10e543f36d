"""Checking a bearer JWT: the MCP server's side of OAuth (a resource server).

`JwtVerifier` is the SDK's `TokenVerifier`: given the token of a request, it
answers the token's grant (`AccessToken`) or None, and the request is
refused. PyJWT does the cryptography; this module decides which key and which
claims:

- the key: the one of the JWKS (a file or a URL) with the token's `kid`, of
  an asymmetric algorithm only (a token signed with a shared secret, or with
  `none`, is refused whatever the JWKS holds);
- the claims: `iss` is the issuer, `aud` names this resource, `exp` is in the
  future and `nbf`, if any, in the past, each with `leeway` seconds of clock
  skew.

Keys rotate: a token whose `kid` the cached set lacks makes the set be read
again, at most once per `refresh` seconds (so tokens with made-up key ids
cannot make the server hammer its authorization server), and the set is read
again anyway once it is `ttl` seconds old. A set that cannot be read keeps the
one read before. Why a token was refused is logged at INFO, never the token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
import orjson
from mcp.server.auth.provider import AccessToken

from ._redact import redact_text, redact_url

__all__ = ["ASYMMETRIC", "JwksSource", "JwtVerifier"]

log = logging.getLogger("toolbus.mcp")

# Signature algorithms a token may use: public-key ones only, so a key
# published in a JWKS can never be used as a shared secret (RFC 8725 3.1).
ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class JwksSource:
    """A JSON Web Key Set, read from a file or fetched from a URL, cached."""

    def __init__(self, where: str | Path, *, refresh: float = 10.0, ttl: float = 600.0) -> None:
        text = str(where)
        self.url = text if urlsplit(text).scheme in ("http", "https") else None
        self.path = None if self.url is not None else Path(text).expanduser()
        if self.path is not None and not self.path.is_file():
            raise ValueError(f"no JWKS file at {self.path} (give a file or an http(s) URL)")
        self.refresh = refresh
        self.ttl = ttl
        # Each key with the algorithm its JWK declares (None: any of its type).
        self._keys: dict[str | None, tuple[jwt.PyJWK, str | None]] = {}
        self._read_at = -float("inf")
        self._lock = anyio.Lock()
        if self.path is not None:
            # A file is there now: one that holds no usable key is a mistake
            # in the configuration, said when it is given.
            try:
                self._keys = _usable(_parsed(self.path.read_bytes()))
            except (OSError, ValueError) as e:
                raise ValueError(f"JWKS file {self.path} cannot be read as a JWKS: {e}") from None
            if not self._keys:
                raise ValueError(f"JWKS file {self.path} holds no key a token could be signed with")
            self._read_at = time.monotonic()

    def __repr__(self) -> str:
        # A URL may carry credentials (user info, an api key in its query).
        return f"JwksSource({redact_url(self.url) if self.url else str(self.path)!r})"

    async def key(self, kid: str | None) -> tuple[jwt.PyJWK, str | None] | None:
        """The key with id `kid` (None: the set's only key), reading the set
        again when it is stale or lacks `kid` and may be read again."""
        now = time.monotonic()
        if now - self._read_at >= self.ttl or (
            kid not in self._keys and now - self._read_at >= self.refresh
        ):
            async with self._lock:  # concurrent requests share one read
                if time.monotonic() - self._read_at >= min(self.ttl, self.refresh):
                    await self._read()
        return self._find(kid)

    def _find(self, kid: str | None) -> tuple[jwt.PyJWK, str | None] | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _read(self) -> None:
        self._read_at = time.monotonic()
        try:
            if self.url is not None:
                async with httpx2.AsyncClient(timeout=10.0, follow_redirects=True) as client:
                    response = await client.get(self.url)
                    response.raise_for_status()
                    data = response.content
            else:
                assert self.path is not None
                data = await anyio.Path(self.path).read_bytes()
            found = _parsed(data)
        except Exception as e:  # the network, the file, not a JWKS
            why = redact_text(str(e)) or type(e).__name__
            log.warning("JWKS %s could not be read (%s): keeping the keys read before", self, why)
            return
        self._keys = _usable(found)

    async def warm(self) -> None:
        """Read a URL's set now, as a server starts: a wrong URL or an empty set
        is logged at once rather than at the first request (which it would
        refuse). A file's was read and checked when it was given."""
        if self.url is None:
            return
        await self._read()
        if not self._keys:
            log.warning("JWKS %s holds no key a token could be signed with (yet)", self)


def _parsed(data: bytes) -> list[Any]:
    """The `keys` of a JWKS document; ValueError if it is none."""
    found = orjson.loads(data)
    keys = found.get("keys") if isinstance(found, dict) else None
    if not isinstance(keys, list):
        raise ValueError("it has no 'keys' list")
    return keys


def _usable(found: list[Any]) -> dict[str | None, tuple[jwt.PyJWK, str | None]]:
    """The signing keys of a JWKS's `keys`, by key id, each with the algorithm
    it declares; a key of a type this cannot use is left out, the others kept."""
    keys: dict[str | None, tuple[jwt.PyJWK, str | None]] = {}
    for jwk in found:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(jwk)
        except jwt.PyJWTError:
            continue
        declared = jwk.get("alg")
        keys[key.key_id] = (key, declared if isinstance(declared, str) else None)
    return keys


class JwtVerifier:
    """The SDK's `TokenVerifier` for JWT access tokens (see the module's doc).

    `audience`: this server's resource URL (as clients are told in its
    protected-resource metadata); a token's `aud` must name it, a trailing
    slash aside. The grant's scopes are the token's `scope` and `scp` (each a
    space-separated string or a list), its client `client_id`, `azp` or `sub`.
    """

    def __init__(
        self,
        jwks: JwksSource,
        *,
        issuer: str,
        audience: str,
        leeway: float = 30.0,
        algorithms: Sequence[str] = tuple(sorted(ASYMMETRIC)),
    ) -> None:
        unknown = set(algorithms) - ASYMMETRIC
        if unknown:
            raise ValueError(f"algorithms must be asymmetric ones, not {sorted(unknown)}")
        self.jwks = jwks
        self.issuer = issuer
        self.audience = [audience.rstrip("/"), audience.rstrip("/") + "/"]
        self.resource = audience
        self.leeway = leeway
        self.algorithms = frozenset(algorithms)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = await self._claims(token)
        except jwt.PyJWTError as e:
            log.info("bearer token refused: %s", _why(e))
            return None
        except Exception as e:  # a token PyJWT chokes on: refused all the same
            log.info("bearer token refused: unreadable (%s)", type(e).__name__)
            return None
        return _grant(token, claims, self.resource, self.leeway)

    async def _claims(self, token: str) -> dict[str, Any]:
        header = jwt.get_unverified_header(token)
        algorithm = header.get("alg")
        if algorithm not in self.algorithms:
            raise jwt.InvalidAlgorithmError(f"algorithm {algorithm!r} is not accepted")
        kid = header.get("kid")
        found = await self.jwks.key(kid if isinstance(kid, str) else None)
        if found is None:
            raise jwt.InvalidKeyError(f"no key with id {kid!r} in the JWKS")
        key, declared = found
        if declared is not None and declared != algorithm:
            raise jwt.InvalidAlgorithmError(
                f"its key is for {declared}, the token says {algorithm}"
            )
        claims: dict[str, Any] = jwt.decode(
            token,
            key=key.key,
            algorithms=[algorithm],
            audience=self.audience,
            issuer=self.issuer,
            leeway=self.leeway,
            # `sub` too (RFC 9068): who the token is for is what a session
            # is bound to, so tokens without one would share sessions.
            options={"require": ["exp", "iss", "aud", "sub"]},
        )
        return claims


def _grant(token: str, claims: dict[str, Any], resource: str, leeway: float) -> AccessToken:
    # `scope` (RFC 9068: a space-separated string) or `scp` (Entra ID and
    # Okta: a string or a list), in whichever form they come.
    scopes: list[str] = []
    for claim in ("scope", "scp"):
        value = claims.get(claim)
        if isinstance(value, str):
            scopes += value.split()
        elif isinstance(value, list):
            scopes += [s for s in value if isinstance(s, str)]
    scopes = list(dict.fromkeys(scopes))
    client = next(
        (claims[k] for k in ("client_id", "azp", "sub") if isinstance(claims.get(k), str)), "-"
    )
    expires = claims.get("exp")
    subject = claims.get("sub")
    return AccessToken(
        token=token,
        client_id=client,
        scopes=scopes,
        # When this server stops accepting it (the SDK compares this with its
        # clock, without a leeway of its own).
        expires_at=int(expires + leeway) if isinstance(expires, int | float) else None,
        resource=resource,
        subject=subject if isinstance(subject, str) else None,
        claims=claims,
    )


def _why(error: jwt.PyJWTError) -> str:
    """PyJWT's reason, which names claims and keys but never quotes the token."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
