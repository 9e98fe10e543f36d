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


def test_a_message_no_call_is_tied_to_is_scrubbed_with_every_call_s_secrets_built_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Merged one scrubber at a time, the secrets of 300 calls in flight were
    sorted and compiled 300 times for each server log line (seconds a line on
    the connection's loop, its calls timing out: found by review). They are
    built into one scrubber at once, and not again while the same calls are
    in flight."""
    from types import SimpleNamespace

    from toolbus.masking import Scrubber
    from toolbus.mcp import _asking

    calls = _asking.Calls()
    for i in range(300):
        logs = SimpleNamespace(scrubber=Scrubber([f"secret-value-{i:04d}"]))
        calls.add(Asking(ToolContext(call_id=f"c{i}", tool="t", logs=logs), "t"))  # type: ignore[arg-type]
    ended = next(iter(calls))
    calls.discard(ended)  # its secrets are still known: a late line may quote them
    built: list[int] = []

    class Counted(Scrubber):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(_asking, "Scrubber", Counted)
    text = " ".join(f"secret-value-{i:04d}" for i in range(300))
    assert "secret-value" not in _asking.every_scrubber(calls).text(text)
    assert len(built) == 1
    assert _asking.every_scrubber(calls).text("secret-value-0007") == _asking.every_scrubber(
        calls
    ).text("secret-value-0007")
    assert len(built) == 1  # the same calls: the same scrubber
    calls.discard(next(iter(calls)))
    assert "secret-value" not in _asking.every_scrubber(calls).text(text)
    assert len(built) == 2
