"""A small workload that keeps an executor busy, for the dashboard and page tests.

Also a way to see them by hand:

    python tests/observe_workload.py live              # the dashboard in this terminal
    python tests/observe_workload.py serve --port 8765 # the page; then `toolbus top URL`

Each round is one batch: slow reads (more than `max_parallel`, so some wait,
and more than their rate limit lets start at once, so some are throttled), a
quick lookup with a secret argument (cached: the same few SKUs come back), a
flaky call that succeeds on its retry, a payment that is refused every fifth
round, and every third round a call that hangs past its deadline (abandoned;
its late result comes back). Policies at work: a call to a rates service that
is down, whose circuit breaker opens at its first failure and tries again
three seconds later (the next rounds' calls are refused meanwhile, however
slow a loaded machine makes a round); every other round a refund that waits for approval, approved
(and run) in the next round.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from toolbus import Executor, RetryPolicy, ToolCall, ToolContext, ToolError, ToolRegistry
from toolbus.policies import (
    ApprovalDecision,
    cache,
    circuit_breaker,
    rate_limit,
    requires_approval,
)

SECRET = "sk-live-Zq8Workload4711"  # an api_key/token value: must never reach a screen
MAX_PARALLEL = 3


def build_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True, policies=[rate_limit("5/second")])
    def fetch_page(url: str) -> int:
        """Fetch a page (0.15 to 0.55 s)."""
        time.sleep(0.15 + (zlib.crc32(url.encode()) % 5) / 10)  # tool under test: takes a while
        return len(url)

    @registry.tool(read_only=True, policies=[cache(ttl=60)])
    def lookup(sku: str, api_key: str) -> dict[str, str]:
        """Look a product up with a key."""
        time.sleep(0.02)  # tool under test: takes a while
        return {"sku": sku, "stock": "12"}

    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=0.05))
    def flaky(n: int, ctx: ToolContext) -> int:
        """Fails its first attempt on even n."""
        time.sleep(0.05)  # tool under test: takes a while
        if n % 2 == 0 and ctx.attempt == 1:
            raise ConnectionError("upstream reset the connection")
        return n

    @registry.tool
    def charge(amount: int, token: str) -> str:
        """Charge a card (mutating); refuses large amounts."""
        time.sleep(0.05)  # tool under test: takes a while
        if amount > 900:
            raise ToolError(f"amount {amount} is over the limit")
        return f"charged {amount}"

    @registry.tool(read_only=True, timeout=0.3)
    def stuck(seconds: float) -> str:
        """Hangs past its deadline: abandoned at 0.3 s."""
        time.sleep(seconds)  # tool under test: takes a while
        return "late"

    @registry.tool(read_only=True, policies=[circuit_breaker(failures=1, reset_after=3.0)])
    def rates(currency: str) -> float:
        """Exchange rates from a service that is down: its breaker opens."""
        time.sleep(0.02)  # tool under test: takes a while
        raise ToolError("rates service unavailable (503)")

    @registry.tool(policies=[requires_approval(reason="refunds need a person")])
    def refund(order: str) -> str:
        """Refund an order (mutating): only once a person approved it."""
        return f"refunded {order}"

    return registry


def round_calls(i: int) -> list[ToolCall]:
    calls = [
        ToolCall(name="fetch_page", arguments={"url": f"https://example.org/{i}/{k}"})
        for k in range(4)
    ]
    calls += [
        ToolCall(name="lookup", arguments={"sku": f"SKU-{i % 3}", "api_key": SECRET}),
        ToolCall(name="flaky", arguments={"n": i}),
        ToolCall(name="rates", arguments={"currency": "EUR"}),
    ]
    if i % 3 == 0:
        calls.append(ToolCall(name="stuck", arguments={"seconds": 0.6}))
    calls.append(
        ToolCall(name="charge", arguments={"amount": 1000 if i % 5 == 4 else 10, "token": SECRET})
    )
    if i % 2 == 0:  # last: a mutating call holds back those after it, and this one waits
        calls.append(ToolCall(name="refund", arguments={"order": f"o-{i}"}))
    return calls


def run_rounds(executor: Executor, should_stop: Callable[[], bool], pause: float = 0.1) -> int:
    """Batches until `should_stop()`; the number of rounds run."""
    i = 0
    held: list[ToolCall] = []
    approvals: dict[str, ApprovalDecision] = {}
    while not should_stop():
        calls = round_calls(i) + held
        batch = executor.execute_batch(calls, approvals=approvals)
        # A person approves what this round deferred: it runs in the next one.
        held = [c for c, r in zip(calls, batch, strict=True) if r.status == "deferred"]
        approvals = {
            r.call_id: r.approval_request.approve() for r in batch if r.approval_request is not None
        }
        i += 1
        time.sleep(pause)  # a breath between turns, as an agent's model call would be
    return i


def make_executor() -> Executor:
    return Executor(build_registry(), name="demo-agent", max_parallel=MAX_PARALLEL, timeout=10)


def _live(stop_file: Path | None, seconds: float) -> None:
    from toolbus.observe import live

    end = time.monotonic() + seconds

    def should_stop() -> bool:
        return time.monotonic() > end or (stop_file is not None and stop_file.exists())

    with make_executor() as executor, live(executor, refresh_per_second=8):
        rounds = run_rounds(executor, should_stop)
    print(f"workload done: {rounds} rounds")


def _serve(port: int, token: str | None) -> None:
    from toolbus.observe import serve_status

    stop = threading.Event()
    with make_executor() as executor, serve_status(executor, port=port, token=token) as server:
        print(f"serving {server.url}  (Ctrl-C stops)", flush=True)
        worker = threading.Thread(target=run_rounds, args=(executor, stop.is_set), daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.5)
        except KeyboardInterrupt:
            stop.set()
            worker.join(5)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("live", "serve"))
    parser.add_argument("--stop-file", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", default=None)
    args = parser.parse_args(argv)
    if args.mode == "live":
        _live(args.stop_file, args.seconds)
    else:
        _serve(args.port, args.token)


if __name__ == "__main__":
    main(sys.argv[1:])
