"""toolbus as the client the official MCP conformance suite's client scenarios
drive (`@modelcontextprotocol/conformance`, tests/mcp/test_conformance.py).

The suite starts a server of its own for each scenario, then runs this with
the server's URL as the last argument and the scenario's name in
`MCP_CONFORMANCE_SCENARIO`. The program does what an agent would: connects
(`connect_http`), registers the server's tools, and calls them through an
`Executor`; the scenario's server checks what reached it. It exits non-zero
when a call does not end `ok`, so a failure shows in the suite's
`stderr.txt` too.

The `auth/*` scenarios put the server behind an authorization server of the
suite's: `connect_http(url, auth=...)` with the flow each scenario names,
the credentials it hands over in `MCP_CONFORMANCE_CONTEXT`, and, for the
authorization code flow, a "user" who signs in at once (the suite's
authorization endpoint redirects straight back with a code).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from typing import Any

import httpx2
from mcp.client.auth.extensions.client_credentials import (
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.mcp import (
    Elicitation,
    ElicitationAnswer,
    MemoryTokens,
    connect_http,
    oauth_authorization_code,
    oauth_client_credentials,
)

REDIRECT = "http://localhost:3000/callback"
# The suite serves a client metadata document at this URL (SEP-991) in `auth/basic-cimd`.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def accept_as_offered(request: Elicitation) -> ElicitationAnswer:
    """Accept the form with no data of our own: the schema's defaults fill it
    (SEP-1034)."""
    return request.accept()


# What each scenario's server offers, and the arguments its tools want.
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}


def sign_in_at_once(authorization_url: str) -> str:
    """The user: the suite's authorization endpoint redirects at once with a code."""
    response = httpx2.get(authorization_url, follow_redirects=False, timeout=10)
    location = response.headers.get("location")
    if not location:
        raise RuntimeError(f"no redirect from the authorization endpoint ({response.status_code})")
    return location


def auth_for(url: str, scenario: str, context: dict[str, Any]) -> httpx2.Auth | None:
    """The OAuth provider the scenario calls for (None: not an auth scenario)."""
    if not scenario.startswith("auth/"):
        return None
    if scenario == "auth/client-credentials-basic":
        return oauth_client_credentials(
            url,
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            issuer=_issuer_of(url),
        )
    if scenario == "auth/client-credentials-jwt":
        key = SignedJWTParameters(
            issuer=context["client_id"],
            subject=context["client_id"],
            signing_key=context["private_key_pem"],
            signing_algorithm=context.get("signing_algorithm", "ES256"),
        )
        return PrivateKeyJWTOAuthProvider(
            url,
            MemoryTokens(),
            context["client_id"],
            key.create_assertion_provider(),
            issuer=_issuer_of(url),
        )
    if scenario == "auth/cross-app-access-complete-flow":
        return _cross_app(url, context)
    return oauth_authorization_code(
        url,
        redirect_uri=REDIRECT,
        authorize=sign_in_at_once,
        client_id=context.get("client_id"),  # pre-registered: no dynamic registration
        client_secret=context.get("client_secret"),
        client_name="toolbus-conformance",
        client_metadata_url=CLIENT_METADATA_URL if scenario == "auth/basic-cimd" else None,
    )


def _cross_app(url: str, context: dict[str, Any]) -> httpx2.Auth:
    """SEP-990: an ID-JAG from the enterprise IdP (RFC 8693 token exchange of
    the user's ID token), presented to the MCP server's authorization server."""

    async def id_jag(audience: str, resource: str) -> str:
        async with httpx2.AsyncClient() as client:
            response = await client.post(
                context["idp_token_endpoint"],
                data={
                    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                    "subject_token": context["idp_id_token"],
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "audience": audience,
                    "resource": resource,
                    "client_id": context["idp_client_id"],
                },
            )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    return IdentityAssertionOAuthProvider(
        url,
        MemoryTokens(),
        context["client_id"],
        context["client_secret"],
        issuer=_issuer_of(url),
        assertion_provider=id_jag,
        token_endpoint_auth_method="client_secret_basic",
    )


def _issuer_of(url: str) -> str:
    """The authorization server the suite's MCP server names (RFC 9728): the
    issuer client credentials belong to, known to a real agent beforehand."""
    parts = urllib.parse.urlsplit(url)
    metadata = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"
    servers: list[str] = httpx2.get(metadata, timeout=10).json()["authorization_servers"]
    return servers[0]


def main(url: str, scenario: str) -> int:
    registry = ToolRegistry()
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    auth = auth_for(url, scenario, context)
    with connect_http(url, auth=auth, elicitation=accept_as_offered, connect_timeout=30) as conn:
        tools = conn.register(registry, timeout=30)
        if scenario == "initialize":
            return 0  # the handshake and the tool list were the scenario
        with Executor(registry) as executor:
            calls = [
                ToolCall(name=n, arguments=ARGUMENTS.get(n, {})) for n in (t.name for t in tools)
            ]
            failed = 0
            for result in executor.execute_batch(calls):
                print(f"{result.name}: {result.status} {result.output or result.error}")
                failed += result.status != "ok"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
