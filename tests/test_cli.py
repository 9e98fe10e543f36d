"""`toolbus demo` and the command line around it."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner, Result

from toolbus import ToolCall, ToolError, __version__
from toolbus.cli import app
from toolbus.demo import DEMO_TOKEN, SCRIPT
from toolbus.demo._turn import current_token, inject_auth

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
    return output[output.index(" A hung tool") :]


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


def test_demo_narrow_console() -> None:
    result = run_demo("80")
    assert result.exit_code == 0, result.output
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
