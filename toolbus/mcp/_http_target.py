"""A server at a URL: its streamable HTTP transport, and why it refused us.

The SDK reports any HTTP error to a request as "Server returned an error
response", without the status: a wrong token reads like a server bug. The
transport toolbus makes for a URL (`connect_http`, or `connect` given a URL)
keeps the status of the last refused request, and `refusal()` turns it into
the words a connect error adds: the status, and for 401/403 what to check.
"""

from __future__ import annotations

import http
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client

from ._redact import redact_text, redact_url

__all__ = ["SDK_REFUSED", "HttpTarget"]

# What the SDK (mcp 2.3) says for any HTTP status >= 400: "Not Found" for a
# 404 (also a session the server no longer knows), these words for the rest.
SDK_REFUSED = ("Server returned an error response", "Not Found")

# The SDK's own client's timeouts: a server may hold a response stream open.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class HttpTarget:
    """Makes a fresh transport to `url` per connection attempt (`headers` on
    every request, an `Authorization` among them, or an `auth` that adds its
    own: an OAuth provider), noting refused requests."""

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, auth: httpx2.Auth | None = None
    ) -> None:
        self.url = url
        self._headers = dict(headers) if headers is not None else None
        # One provider for every attempt: its tokens (and a registered client)
        # outlive a reconnection, as a user who signed in once expects.
        self._auth = auth
        self._watched = _Watched(auth, self) if auth is not None else None
        self._refused: tuple[int, str] | None = None  # status, WWW-Authenticate
        # Why the auth flow last failed (None: it has not, or succeeded since).
        self.auth_failure: str | None = None

    def __call__(self) -> Transport:
        self._refused = None
        return self._transport()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        async with (
            httpx2.AsyncClient(
                headers=self._headers,
                auth=self._watched,
                timeout=_TIMEOUT,
                event_hooks={"response": [self._seen]},
            ) as client,
            streamable_http_client(self.url, http_client=client) as streams,
        ):
            yield streams

    async def _seen(self, response: Any) -> None:
        if response.status_code >= 400:
            self._refused = (response.status_code, response.headers.get("www-authenticate", ""))

    def oauth_failure(self) -> str | None:
        """Why the OAuth flow last failed (None: it has not, or worked since)."""
        return self.auth_failure

    def refusal(self) -> str | None:
        """What the server's last refusal says (None: it refused nothing)."""
        if self.auth_failure is not None:
            return f"the OAuth flow failed: {self.auth_failure}"
        if self._refused is None:
            return None
        status, challenge = self._refused
        try:
            words = f"HTTP {status} {http.HTTPStatus(status).phrase}"
        except ValueError:
            words = f"HTTP {status}"
        if status == 401 and self._auth is not None:
            return (
                f"{words}: the server refused every token {type(self._auth).__name__} "
                "could get (check the client's registration and the scopes it asks for)"
            )
        if status == 403 and "insufficient_scope" in challenge:
            needed = _field(challenge, "scope")
            return f"{words}: the token lacks the scope the server needs" + (
                f" ({needed})" if needed else ""
            )
        if status == 401:
            scheme = f" ({challenge.split()[0]})" if challenge.strip() else ""
            given = "the token sent was refused" if self._authorized() else "no token was sent"
            return (
                f"{words}, the server needs credentials{scheme} and {given}: pass "
                "connect_http(url, headers={'Authorization': 'Bearer <token>'})"
            )
        if status == 403:
            return (
                f"{words}, the server refuses these credentials: a token without the "
                "scope it needs, or an Origin or Host it does not allow"
            )
        if status == 404:
            return (
                f"{words}: no MCP endpoint at that URL (check its path: servers "
                "often answer at /mcp), or the server forgot this session"
            )
        return words

    def _authorized(self) -> bool:
        if self._auth is not None:
            return True
        return any(k.lower() == "authorization" for k in self._headers or {})


def _field(challenge: str, name: str) -> str | None:
    """A quoted parameter of a `WWW-Authenticate` challenge (`scope="a b"`)."""
    found = re.search(rf'(?:^|[\s,]){re.escape(name)}="([^"]*)"', challenge)
    return found.group(1) if found else None


class _Watched(httpx2.Auth):
    """An `auth` as the transport runs it, noting why its flow failed: the
    SDK's transport turns an error of the auth flow into a closed connection,
    which would leave a user denied at sign-in reading "the server crashed"."""

    def __init__(self, auth: httpx2.Auth, target: HttpTarget) -> None:
        self._auth = auth
        self._target = target

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self._auth.async_auth_flow(request)
        outgoing = request
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            self._target.auth_failure = None
            return
        except GeneratorExit:
            # httpx closes the flow when a request failed to go out: one of
            # the flow's own (metadata, registration, token) is an OAuth
            # failure; the server's request failing is the transport's news.
            if outgoing is not request:
                where = redact_url(str(outgoing.url.copy_with(query=None)))
                self._target.auth_failure = f"its request to {where} got no answer"
            raise
        except Exception as e:
            text = redact_text(str(e))
            self._target.auth_failure = f"{type(e).__name__}: {text}" if text else type(e).__name__
            raise
        finally:
            await flow.aclose()
