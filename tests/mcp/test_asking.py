"""What the connection's handlers share (`toolbus/mcp/_asking.py`), without a server."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

from toolbus.mcp._asking import ASKING, Asking, about, while_asking
from toolbus.mcp._elicitation import Elicitation, publish_request
from toolbus.tools import ToolContext


def _asking() -> tuple[Asking, list[tuple[str, dict[str, Any]]]]:
    published: list[tuple[str, dict[str, Any]]] = []

    def sink(ctx: ToolContext, message: str, fraction: float | None, data: dict[str, Any]) -> None:
        published.append((message, data))

    return Asking(ToolContext(call_id="c1", tool="t", sink=sink), "t"), published


async def test_the_call_a_request_is_about_ends_with_its_request() -> None:
    """It stayed set in the task: a reconnection started from it later took
    every request for that long-gone call's (found by review)."""
    asking, _ = _asking()
    in_flight: set[Asking] = set()

    async def send() -> Asking | None:
        return about(in_flight)

    assert await while_asking(asking, in_flight, send) is asking
    assert ASKING.get() is None and in_flight == set()
    assert about(in_flight) is None


async def test_the_only_call_in_flight_is_a_guess() -> None:
    asking, _ = _asking()
    in_flight = {asking}
    guess = about(in_flight)
    assert guess is not None and guess is not asking and not guess.sure
    assert guess.ctx is asking.ctx and guess.declined is asking.declined


def test_a_servers_message_is_published_without_credentials() -> None:
    asking, published = _asking()
    request = Elicitation(
        server="s", message="Sign in at https://bob:hunter2@example.com/x?token=TOK123 please"
    )
    publish_request(asking, request)
    ((message, _),) = published
    assert "hunter2" not in message and "TOK123" not in message
