"""Inject the caller's credentials into tool calls, without ever publishing them.

The agent sets the current user's session in a `contextvars.ContextVar` before
it executes the model's tool calls. A `pre_call` hook copies the session into
the arguments of every tool that declares an `identity` parameter. The executor
captures the caller's context at submission and runs hooks and tools inside it,
so the session is visible on the worker threads (and in async tools) without
being passed around.

Shows:
- the pre-call hook, using `call.with_arguments({...})`;
- that the tool receives the credentials;
- that the `tool:executing` event shows the token as `***`;
- that the token appears in no event, not even when the tool raises an exception
  whose message contains it (toolbus scrubs every masked value from error text);
- a custom `masker=` that hides more than the default (here: the person id).

Note that `identity` stays in the parameter schema the model is shown
(`registry.to_openai()`) here: whatever the model sends under it is
overwritten by the hook. Declared `identity: Annotated[Auth, Injected]` with
`Executor(inject={"identity": lambda call: ...})`, it would be left out of the
schema, a model's value refused, and the whole value masked
(docs/extending.md, "Injected arguments").
(It is not called `auth`: a value under a secret-looking name such as `auth`
is masked whole, person id included, and the second run shows hiding the
person id as a choice.)

Run: python examples/auth_injection.py
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from toolbus import Executor, ToolCall, ToolRegistry, ToolResult, bus
from toolbus.masking import MASK, mask_arguments


@dataclass(frozen=True)
class Session:
    person_id: str
    bearer_token: str


# Set by the agent per request; read by the hook on the worker thread.
current_session: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "current_session", default=None
)


class Auth(BaseModel):
    person_id: str
    bearer_token: str


registry = ToolRegistry()


@registry.tool(read_only=True)
def get_profile(identity: Auth) -> dict[str, str | bool]:
    """The signed-in person's profile."""
    # A real tool would send `Authorization: Bearer ...` to an API here.
    return {
        "person_id": identity.person_id,
        "name": "Ada",
        "authenticated": bool(identity.bearer_token),
    }


@registry.tool
def transfer(amount: int, to: str, identity: Auth) -> str:
    """Transfer money to someone."""
    # The kind of error message a careless HTTP client produces.
    raise RuntimeError(f"401 from bank API for 'Authorization: Bearer {identity.bearer_token}'")


@registry.tool(read_only=True)
def get_time() -> str:
    """The current time (needs no credentials)."""
    return "12:00"


def inject_auth(call: ToolCall) -> ToolCall:
    """Pre-call hook: add the session to calls of tools that take `identity`."""
    tool = registry.get(call.name)
    if tool is None or "identity" not in tool.schema.get("properties", {}):
        return call  # the tool would reject an unexpected `identity` argument
    session = current_session.get()
    if session is None:
        # Raising rejects the call (TOOL_NOT_ALLOWED) with this message.
        raise PermissionError("no signed-in session")
    # Arguments are a dict here: raw JSON was parsed before pre-call hooks.
    assert isinstance(call.arguments, dict)
    # Overwrite whatever the model put under `identity`: only the session counts.
    identity = {"person_id": session.person_id, "bearer_token": session.bearer_token}
    return call.with_arguments({**call.arguments, "identity": identity})


def mask_person_ids(call: ToolCall) -> Any:
    """A masker that hides person ids as well as the default secret-looking keys."""
    masked, _ = mask_arguments(call.arguments)
    identity = masked.get("identity") if isinstance(masked, dict) else None
    if isinstance(identity, dict) and "person_id" in identity:
        masked["identity"] = {**identity, "person_id": MASK}
    return masked


def run_turn(executor: Executor) -> tuple[list[ToolResult], list[tuple[str, Any]]]:
    """Execute one model turn; return its results and every event it published."""
    events: list[tuple[str, Any]] = []

    def record(sender: Any, *, event: Any, signal: str) -> None:
        events.append((signal, event))

    with bus.subscribe(record, sender=executor):
        batch = executor.execute_batch(
            [
                ToolCall(name="get_profile", arguments="{}"),
                ToolCall(name="get_time", arguments="{}"),
                # The model tries to pass credentials of its own; the hook overrides them.
                ToolCall(
                    name="transfer",
                    arguments={"amount": 5, "to": "bob", "identity": {"bearer_token": "guess"}},
                ),
            ]
        )
        # Events are delivered on the executor's announcer thread; wait for them.
        executor.drain_events()
    for r in batch:
        print_result(r)
    return list(batch), events


def print_result(r: ToolResult) -> None:
    print(f"  {r.name}: {r.status} output={r.output!r} error={r.error!r}")


def check_for_token(results: list[ToolResult], events: list[tuple[str, Any]], token: str) -> None:
    for signal, event in events:
        if signal == "tool:executing":
            print(f"  {signal} {event.tool}: arguments={event.arguments}")
    leaked = [signal for signal, event in events if token in repr(event)]
    leaked += [r.name for r in results if token in r.model_dump_json()]
    print(f"  events: {len(events)}, events or results containing the token: {len(leaked)}")
    print("TOKEN LEAKED" if leaked else "token never appeared in any event or result")


def main() -> None:
    # A deliberate rejection by a hook is logged as a warning with its traceback;
    # keep this demo's output to what it prints.
    logging.getLogger("toolbus").setLevel(logging.ERROR)
    token = "tok_live_4f9a2c7e1b"

    print("-- default masking (keys that look secret: token, password, ...)")
    with Executor(registry, pre_call=[inject_auth]) as executor:
        current_session.set(Session(person_id="person-42", bearer_token=token))
        results, events = run_turn(executor)
        check_for_token(results, events, token)

        print("\n-- no session: calls that need auth are rejected, others run")
        current_session.set(None)
        for r in executor.execute_batch([ToolCall(name="get_profile"), ToolCall(name="get_time")]):
            print_result(r)

    print("\n-- custom masker= that also hides the person id")
    with Executor(registry, pre_call=[inject_auth], masker=mask_person_ids) as executor:
        current_session.set(Session(person_id="person-42", bearer_token=token))
        results, events = run_turn(executor)
        check_for_token(results, events, token)
        shown = [repr(e) for _, e in events if "person-42" in repr(e)]
        print(f"  events showing the person id: {len(shown)}")
        # What the masker hides is scrubbed from results too: the profile's
        # person_id above reached the caller as `***`.


if __name__ == "__main__":
    main()
