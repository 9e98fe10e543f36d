"""`toolbus demo` and the command line around it."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from toolbus import ToolCall, ToolError, __version__
from toolbus.cli import app
from toolbus.demo import DEMO_TOKEN, SCRIPT, _policies
from toolbus.demo._turn import current_token, inject_auth

# The slow tier (tests/README.md): the demo run as a program.
pytestmark = pytest.mark.slow

# Signals the scripted turn produces every time, whatever the timing.
EXPECTED_SIGNALS = (
    "tool:executing",
    "tool:executed",
    "tool:error",
    "tool:timeout",
    "tool:retry-attempt",
    "tool:retry-success",
    "tool:batch-start",
    "tool:batch-complete",
    "tool:parallel-start",
    "tool:parallel-complete",
    "tool:rejected",
    "tool:progress",
    "tool:finished",
    "tool:late-result",
    "tool:killed",
    "tool:throttled",
    "tool:cache-hit",
    "tool:circuit-open",
    "tool:circuit-half-open",
    "tool:circuit-closed",
)

# Colour and terminal detection come from the environment; pin them so the
# output is plain text whatever CI sets.
PLAIN_ENV: dict[str, str | None] = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "NO_COLOR": "1"}


def run_demo(columns: str | None) -> Result:
    runner = CliRunner(env={**PLAIN_ENV, "COLUMNS": columns})
    return runner.invoke(app, ["demo", "--plain"])


@pytest.fixture(scope="module")
def wide() -> Result:
    """One plain run with no width given (as in a pipe), shared by the tests below."""
    return run_demo(None)


def summary_of(output: str) -> str:
    return output[output.index(" Summary ") :]


def row(summary: str, call_id: str) -> str:
    """The results-table line of one call."""
    return next(line for line in summary.splitlines() if re.search(rf"\b{call_id}\b", line))


def test_demo_exits_zero(wide: Result) -> None:
    assert wide.exit_code == 0, wide.output


@pytest.mark.parametrize("signal", EXPECTED_SIGNALS)
def test_demo_shows_signal(wide: Result, signal: str) -> None:
    assert signal in wide.output


def test_demo_never_shows_the_token(wide: Result) -> None:
    for text in (wide.output, wide.stderr):
        assert DEMO_TOKEN not in text
        # A truncated token is a leak too.
        assert DEMO_TOKEN[4:14] not in text
    assert '"auth": "***"' in wide.output  # `auth` is a secret-looking name: hidden whole
    assert "token *** lacks scope" in wide.output
    assert "Bearer ***" in wide.output


def test_demo_summary_has_every_status(wide: Result) -> None:
    summary = summary_of(wide.output)
    for step in SCRIPT:
        line = row(summary, step.call.id)
        assert re.search(rf"\b{step.expect}\b", line), line
    for status in ("ok", "error", "timeout", "rejected"):
        assert re.search(rf"│ {status} +│", summary), status
    for code in ("TOOL_NOT_FOUND", "INVALID_ARGUMENTS", "EXECUTION_TIMEOUT", "TOOL_ERROR"):
        assert code in summary


def test_demo_summary_has_counts(wide: Result) -> None:
    summary = summary_of(wide.output)
    for name in ("BatchSummary", "executor.stats()", "succeeded", "peak_in_flight"):
        assert name in summary
    assert "11 of 11 calls ended as scripted" in summary
    assert "bearer token found in 0 of" in summary


def test_demo_keeps_the_write_between_reads(wide: Result) -> None:
    lines = wide.output.splitlines()

    def first(signal: str, call_id: str) -> int:
        return next(
            i
            for i, line in enumerate(lines)
            if signal in line and re.search(rf"\b{call_id}\b", line)
        )

    write_starts = first("tool:executing", "c7")
    write_ends = first("tool:finished", "c7")
    for earlier in ("c1", "c4", "c5", "c6"):
        assert first("tool:finished", earlier) < write_starts
    for later in ("c8", "c10", "c11"):
        assert first("tool:executing", later) > write_ends
    # The read after the write saw what it wrote.
    assert '["Oslo 4°C' in lines[first("tool:finished", "c8")]


def hung_part_of(output: str) -> str:
    return output[output.index(" A hung tool") : output.index(" Policies: ")]


def test_demo_kills_the_hung_process_tool_and_abandons_the_thread(wide: Result) -> None:
    part = hung_part_of(wide.output)
    lines = part.splitlines()

    def line(signal: str, call_id: str) -> str:
        return next(x for x in lines if signal in x and re.search(rf"\b{call_id}\b", x))

    # The same hung client: on a thread abandoned (and back late), in a process killed.
    assert "abandoned" in line("tool:timeout", "h1")
    assert "late-result" in line("tool:late-result", "h1")
    killed = line("tool:killed", "h2")
    pid = re.search(r"worker pid (\d+)", killed)
    assert pid, killed
    assert "killed" in line("tool:timeout", "h2")
    assert not any("tool:killed" in x and re.search(r"\bh1\b", x) for x in lines)
    assert f"worker pid {pid.group(1)} and its process group; gone" in part
    assert re.search(r"killed_workers +│ +1 ", part)
    assert re.search(r"late_results +│ +1 ", part)
    # The next call ran in a fresh worker; every check holds.
    assert re.search(r"h3 +│ inventory_process +│ process +│ ok ", part)
    fresh = re.search(r"a fresh worker, pid (\d+)", part)
    assert fresh and fresh.group(1) != pid.group(1)
    assert " ✗" not in part
    assert part.count(" ✓") == 3


def policies_part_of(output: str) -> str:
    return output[output.index(" Policies: ") : output.index(" A caller cancels: ")]


def cancel_part_of(output: str) -> str:
    return output[output.index(" A caller cancels: ") :]


def test_demo_shows_a_sync_caller_cancelling_a_running_batch(wide: Result) -> None:
    part = cancel_part_of(wide.output)
    finished = [x for x in part.splitlines() if " ms tool:finished " in x]
    assert len(finished) == 6, finished
    assert " ✗" not in part and part.count(" ✓") == 4
    assert "the three quick pages: ok, ok, ok" in part
    assert "handle.cancel() stopped the slow ones: cancelled, cancelled, cancelled" in part
    assert "nothing left held: in_flight=0, queued=0" in part
    # A queued call is a line of its own, not the event's repr (found by review).
    assert "CallQueued(" not in wide.output


def test_demo_shows_the_policies_at_work(wide: Result) -> None:
    part = policies_part_of(wide.output)
    lines = part.splitlines()

    def lines_of(signal: str, call_id: str | None = None) -> list[str]:
        pattern = rf"\b{call_id}\b" if call_id else r"\b[rkbag]\d\b"
        return [x for x in lines if f"{signal} " in x and re.search(pattern, x)]

    # rate_limit("2/second"): of four calls in one batch, two waited their turn, then ran.
    throttled = lines_of("tool:throttled")
    waited = {m.group(1) for x in throttled if (m := re.search(r"\b(r\d)\b", x))}
    assert len(waited) == 2, throttled
    assert all(
        re.search(r"waits \d+ ms for its turn: at most 2 per 1 second", x) for x in throttled
    )
    for cid in ("r1", "r2", "r3", "r4"):
        assert "OK after" in lines_of("tool:finished", cid)[0]
    # cache(ttl=60): the second identical call is a hit and never runs.
    assert lines_of("tool:executing", "k1") and not lines_of("tool:executing", "k2")
    assert "answered from the cache" in lines_of("tool:cache-hit", "k2")[0]
    assert "cache=hit, attempts 0" in part
    # circuit_breaker: two failures open it; the next call is refused; a trial closes it.
    assert len(lines_of("tool:error")) == 2
    assert "2 failures in a row: open" in lines_of("tool:circuit-open", "b2")[0]
    assert (
        "CIRCUIT_OPEN: Tool 'status_page' is not being called" in lines_of("tool:rejected", "b3")[0]
    )
    assert not lines_of("tool:executing", "b3")
    assert lines_of("tool:circuit-half-open", "b4") and lines_of("tool:circuit-closed", "b4")
    # requires_approval: deferred with a request (secrets masked), approved with an edit, run.
    finished = lines_of("tool:finished", "a1")
    assert "DEFERRED APPROVAL_REQUIRED" in finished[0]
    assert "OK after" in finished[1] and '"version": "2.4.2"' in finished[1]
    flat = " ".join(part.split())  # the note wraps
    assert 'reviews deploy {"service": "billing", "version": "2.4.1", "auth": "***"}' in flat
    assert re.search(r"\(digest [0-9a-f]{12}…\) and approves it with an edit", flat)
    assert len(lines_of("tool:executing", "a1")) == 1
    # The edit is published masked.
    assert 'args {"service": "billing", "version": "2.4.2", "auth": "***"}' in flat
    # A guardrail trips on the production table: the agent run is halted.
    assert (
        "guardrail no_production_tables (input) tripped"
        in lines_of("tool:guardrail-tripped", "g2")[0]
    )
    assert "agent run demo-run halted" in lines_of("tool:run-halted", "g2")[0]
    for cid in ("g2", "g3", "g4"):
        assert "CANCELLED HALTED" in lines_of("tool:finished", cid)[0]
    assert not lines_of("tool:executing", "g2") and not lines_of("tool:executing", "g4")
    # A line per policy, each checked; and no token.
    assert " ✗" not in part
    assert part.count(" ✓") == 6
    assert "bearer token found in 0 of" in part


def test_demo_policies_part_fails_when_a_policy_does_not_act(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rate no batch of four reaches: nothing is throttled, so the part says so and fails.
    monkeypatch.setattr(_policies, "RATE", "100/second")
    console = Console(width=120, record=True, force_terminal=False, no_color=True)
    assert _policies.policies_part(console, wide=True) == 1
    text = console.export_text()
    assert ' ✗ rate_limit("100/second"): r1, r2, r3, r4 started at once' in text
    assert text.count(" ✓") == 5


def test_demo_narrow_console() -> None:
    result = run_demo("80")
    assert result.exit_code == 0, result.output
    assert " ✗" not in policies_part_of(result.output)
    summary = summary_of(result.output)
    assert "Outputs and errors" in summary
    for step in SCRIPT:
        assert re.search(rf"\b{step.expect}\b", row(summary, step.call.id))
    assert DEMO_TOKEN not in result.output


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"toolbus {__version__}"


def test_inject_auth_adds_the_turns_token_only_where_needed() -> None:
    reset = current_token.set("tok-123456")
    try:
        call = inject_auth(
            ToolCall(
                name="deploy_status", arguments={"service": "x", "auth": {"bearer_token": "g"}}
            )
        )
        assert call.arguments == {"service": "x", "auth": {"bearer_token": "tok-123456"}}
        plain = ToolCall(name="get_weather", arguments={"city": "Oslo"})
        assert inject_auth(plain) is plain
    finally:
        current_token.reset(reset)


def test_inject_auth_without_a_token_refuses() -> None:
    with pytest.raises(ToolError, match="no credentials"):
        inject_auth(ToolCall(name="read_private_repo", arguments={"repo": "a/b"}))
