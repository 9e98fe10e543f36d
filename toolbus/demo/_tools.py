"""The example tools the scripted turn calls, each built to show one behaviour.

Every tool closes over a `World`, so each demo run starts from a clean state and
a hung tool can be released when the run is over.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from pydantic import BaseModel

from ..retry import RetryPolicy
from ..tools import ToolContext, ToolRegistry

__all__ = ["HANG_TIMEOUT", "Auth", "World", "build_registry"]

HANG_TIMEOUT = 0.5
"""Seconds the executor gives a hung tool (`legacy_inventory`; `legacy_lookup` in the
second part) before it gives up the attempt."""

_WEATHER = {
    "Oslo": {"temp_c": 4, "sky": "sleet"},
    "Lima": {"temp_c": 19, "sky": "overcast"},
    "Paris": {"temp_c": 11, "sky": "clear"},
}

_DOCS = [
    {"title": "Rotating API keys", "url": "https://docs.example.com/keys#rotate"},
    {"title": "Key scopes", "url": "https://docs.example.com/keys#scopes"},
]


class Auth(BaseModel):
    """Credentials the pre-call hook injects; the model never supplies them."""

    bearer_token: str


@dataclass
class World:
    """The state behind the tools of one demo run."""

    notes: list[str] = field(default_factory=list)
    # `legacy_inventory` blocks on this; nothing sets it until the turn is over.
    unplug: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def build_registry(world: World) -> ToolRegistry:
    """A fresh registry of the demo's tools, all acting on `world`."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def get_weather(city: str) -> dict[str, object]:
        """Current weather for a city."""
        time.sleep(0.6 if city == "Oslo" else 0.8)
        return {"city": city, **_WEATHER.get(city, {"temp_c": None, "sky": "unknown"})}

    @reg.tool(
        read_only=True,
        retry=RetryPolicy(max_retries=2, backoff_base=0.2, jitter=0.0),
    )
    def search_docs(query: str, ctx: ToolContext) -> list[dict[str, str]]:
        """Search the product documentation."""
        time.sleep(0.3)
        if ctx.attempt == 1:
            # The transient kind of failure the retry policy is there for.
            raise ConnectionError("connection reset by search backend")
        ctx.progress("ranking results", 0.5)
        time.sleep(0.2)
        return _DOCS

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT, retry=RetryPolicy(max_retries=0))
    def legacy_inventory(sku: str) -> dict[str, object]:
        """Stock level from the legacy inventory system (a sync client with no timeout)."""
        world.unplug.wait()
        return {"sku": sku, "stock": 0}

    @reg.tool
    def save_note(text: str, ctx: ToolContext) -> dict[str, object]:
        """Save a note for the user (mutating: later calls must see it)."""
        ctx.progress("writing note", 0.0)
        time.sleep(0.25)
        with world.lock:
            world.notes.append(text)
            count = len(world.notes)
        ctx.progress("note stored", 1.0, notes=count)
        time.sleep(0.15)
        return {"saved": True, "notes": count}

    @reg.tool(read_only=True)
    def list_notes() -> list[str]:
        """The user's saved notes."""
        time.sleep(0.2)
        with world.lock:
            return list(world.notes)

    @reg.tool(read_only=True)
    def read_private_repo(repo: str, auth: Auth) -> dict[str, object]:
        """Open issues of a private repository (needs the user's credentials)."""
        time.sleep(0.4)
        # Echoes the credential back, as careless API wrappers do.
        return {
            "repo": repo,
            "open_issues": 3,
            "request": f"GET /repos/{repo}/issues Authorization: Bearer {auth.bearer_token}",
        }

    @reg.tool(read_only=True)
    def deploy_status(service: str, auth: Auth) -> dict[str, object]:
        """Deployment status of a service (needs the user's credentials)."""
        time.sleep(0.3)
        raise PermissionError(
            f"403 from deploy API: token {auth.bearer_token} lacks scope 'deploy:read' "
            f"for service '{service}'"
        )

    return reg
