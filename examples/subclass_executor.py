"""Customise the executor by subclassing it (the alternative to hook options).

`AuthorizedExecutor` overrides every hook method; each override prints what it
does, then defers to the default, which applies the constructor's options. The
hooks run on worker threads (`max_parallel` on the caller's thread), so they must
be thread-safe; here they only print and read immutable state.

Shows:
- `pre_execute(call)`: stamp a request id into calls of tools that take one;
- `is_allowed(call)`: a role check (viewers may not call mutating tools);
- `mask_arguments(call)`: hide an extra field on top of the default masking;
- `should_retry(call, failure)`: retry a flaky tool quickly, log each decision;
- `max_parallel(calls)`: one call at a time for batches that mutate anything;
- `post_execute(call, result)`: cap the output size and tag the result.

Run: python examples/subclass_executor.py
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from toolbus import (
    AttemptFailure,
    Executor,
    RetryDecision,
    RetryPolicy,
    ToolCall,
    ToolRegistry,
    ToolResult,
    bus,
)
from toolbus.masking import MASK

registry = ToolRegistry()

_flaky_calls = 0
_flaky_lock = threading.Lock()


@registry.tool(read_only=True)
def search(query: str, request_id: str = "") -> list[str]:
    """Search the knowledge base."""
    time.sleep(0.1)  # long enough for parallel calls to overlap
    return [f"{query} result {i}" for i in range(1, 40)]


@registry.tool(read_only=True)
def lookup_customer(email: str) -> dict[str, str]:
    """A customer record by e-mail address."""
    return {"email": email, "plan": "pro"}


@registry.tool(read_only=True)
def fetch_quote(symbol: str) -> float:
    """Latest price of a stock; the upstream service drops every other request."""
    global _flaky_calls
    with _flaky_lock:
        _flaky_calls += 1
        n = _flaky_calls
    if n % 2 == 1:
        raise ConnectionError("upstream reset the connection")
    return 101.5


@registry.tool
def delete_account(email: str) -> str:
    """Delete a customer's account."""
    return f"deleted {email}"


class AuthorizedExecutor(Executor):
    def __init__(self, registry: ToolRegistry, *, role: str, **options: Any) -> None:
        super().__init__(registry, **options)
        self.role = role
        self._request_ids = iter(range(1000, 10_000))
        self._id_lock = threading.Lock()

    def pre_execute(self, call: ToolCall) -> ToolCall:
        tool = self.registry.get(call.name)
        if tool is not None and "request_id" in tool.schema.get("properties", {}):
            with self._id_lock:
                rid = f"req-{next(self._request_ids)}"
            assert isinstance(call.arguments, dict)  # raw JSON is parsed before this hook
            call = call.with_arguments({**call.arguments, "request_id": rid})
            print(f"  [pre_execute]   {call.name}: added request_id={rid}")
        return super().pre_execute(call)

    def is_allowed(self, call: ToolCall) -> bool:
        tool = self.registry.get(call.name)
        if self.role == "viewer" and tool is not None and not tool.read_only:
            print(f"  [is_allowed]    {call.name}: denied, role {self.role!r} is read-only")
            return False
        return super().is_allowed(call)

    def mask_arguments(self, call: ToolCall) -> Any:
        masked = super().mask_arguments(call)
        if isinstance(masked, dict) and "email" in masked:
            # E-mail addresses are personal data: keep them out of events and logs.
            # Whatever is hidden here is also scrubbed from the result's output and
            # error text, so the model sees `***` where the address was.
            masked = {**masked, "email": MASK}
        return masked

    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
        if isinstance(failure.error, ConnectionError) and failure.attempt < 3:
            decision = RetryDecision(retry=True, delay=0.05)
        else:
            decision = super().should_retry(call, failure)
        print(
            f"  [should_retry]  {call.name} attempt {failure.attempt} failed "
            f"({type(failure.error).__name__}): retry={decision.retry} delay={decision.delay}"
        )
        return decision

    def max_parallel(self, calls: Sequence[ToolCall]) -> int:
        mutating = any(
            (t := self.registry.get(c.name)) is not None and not t.read_only for c in calls
        )
        limit = 1 if mutating else super().max_parallel(calls)
        print(f"  [max_parallel]  batch of {len(calls)}, mutating={mutating}: limit {limit}")
        return limit

    def post_execute(self, call: ToolCall, result: ToolResult) -> ToolResult:
        result = super().post_execute(call, result)
        if isinstance(result.output, list) and len(result.output) > 3:
            kept = result.output[:3]
            print(f"  [post_execute]  {call.name}: cut output from {len(result.output)} to 3")
            result = result.model_copy(update={"output": kept})
        return result.model_copy(update={"metadata": {**result.metadata, "role": self.role}})


def main() -> None:
    executing: list[Any] = []

    def on_executing(sender: Any, *, event: bus.Executing) -> None:
        executing.append(event)

    # The defaults in the base class still apply the options given here.
    options: dict[str, Any] = {"max_parallel": 4, "retry": RetryPolicy(max_retries=0)}
    for role in ("admin", "viewer"):
        print(f"== role {role}")
        with AuthorizedExecutor(registry, role=role, **options) as executor:
            bus.signal(bus.EXECUTING).connect(on_executing, sender=executor, weak=False)
            batch = executor.execute_batch(
                [
                    ToolCall(name="search", arguments={"query": "refund policy"}),
                    ToolCall(name="lookup_customer", arguments={"email": "ada@example.com"}),
                    ToolCall(name="fetch_quote", arguments={"symbol": "ACME"}),
                    ToolCall(name="delete_account", arguments={"email": "ada@example.com"}),
                ]
            )
            for r in batch:
                detail = r.output if r.ok else f"{r.error_code}: {r.error}"
                print(f"  -> {r.name}: {r.status} after {r.attempts} attempt(s), {detail}")
                print(f"     metadata={r.metadata}")
            print(f"  peak calls in flight: {executor.stats().peak_in_flight}")
            if role == "admin":
                print("-- a read-only batch may run in parallel")
                executor.execute_batch(
                    [ToolCall(name="search", arguments={"query": q}) for q in ("a", "b", "c")]
                )
                print(f"  peak calls in flight: {executor.stats().peak_in_flight}")
            executor.drain_events()
            bus.signal(bus.EXECUTING).disconnect(on_executing)
        print()

    print("Arguments as published in tool:executing events:")
    for e in executing:
        print(f"  {e.tool} attempt {e.attempt}: {e.arguments}")


if __name__ == "__main__":
    main()
