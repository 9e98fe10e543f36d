"""`toolbus tools list`, `toolbus call` and `toolbus bench`: through typer's runner
and as processes (`python -m toolbus`), each command and each exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.cli_registries.escapes import CLEAR, OSC52, RAW
from tests.cli_registries.tools import registry
from toolbus._cli import bench as bench_command
from toolbus.cli import app
from toolbus.mcp import mcp_tool
from toolbus.providers import anthropic, openai

# The slow tier (tests/README.md): the command line run in subprocesses.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests.cli_registries.tools:registry"
# No width from the environment (pytest-xdist's workers set COLUMNS=80): a pipe's own 120.
PLAIN_ENV: dict[str, str | None] = {
    "FORCE_COLOR": None,
    "TTY_COMPATIBLE": None,
    "NO_COLOR": "1",
    "COLUMNS": None,
    "LINES": None,
}


def invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner(env=PLAIN_ENV).invoke(app, list(args), input=stdin)


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python -m toolbus ARGS` in a process of its own, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "toolbus", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# -- the command list ---------------------------------------------------------------


def test_help_lists_every_command() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("demo", "tools", "call", "bench", "mcp"):
        assert f" {command} " in result.output, command
    assert "serve" in invoke("mcp", "--help").output
    assert "list" in invoke("tools", "--help").output


def test_no_command_shows_the_help_and_exits_2() -> None:
    result = invoke()
    assert result.exit_code == 2
    assert "Usage" in result.output


def test_an_unknown_command_is_one_line_exit_2() -> None:
    result = invoke("nosuch")
    assert result.exit_code == 2
    assert one_line(result.stderr) == "toolbus: No such command 'nosuch'. (see 'toolbus --help')"


# -- toolbus tools list -------------------------------------------------------------


def test_tools_list_table() -> None:
    result = invoke("tools", "list", SPEC)
    assert result.exit_code == 0, result.output
    assert f"{SPEC}: 5 tools" in result.output
    for name in registry.names():
        assert name in result.output
    add_row = next(line for line in result.output.splitlines() if "│ add " in line)
    assert "read-only" in add_row and "5 s" in add_row and "a*, b" in add_row
    assert "free text" in result.output  # the custom tool


@pytest.mark.parametrize(
    ("format", "expected"),
    [
        ("openai", registry.to_openai),
        ("anthropic", lambda: anthropic.tool_definitions(registry)),
        (
            "mcp",
            lambda: [
                mcp_tool(t).model_dump(mode="json", by_alias=True, exclude_none=True)
                for t in registry.list()
            ],
        ),
    ],
)
def test_tools_list_formats_are_the_converters_output(
    format: str, expected: Callable[[], object]
) -> None:
    result = invoke("tools", "list", SPEC, "--format", format)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected()


def test_tools_list_json_has_every_option() -> None:
    result = invoke("tools", "list", SPEC, "-f", "json")
    assert result.exit_code == 0, result.output
    tools = {t["name"]: t for t in json.loads(result.stdout)}
    assert list(tools) == registry.names()
    add = tools["add"]
    assert (add["read_only"], add["timeout"], add["retry"]["max_retries"]) == (True, 5, 2)
    assert add["parameters"]["properties"]["a"]["description"] == "The first addend."
    assert add["parameters"]["properties"]["b"]["description"] == "The second addend."
    assert (tools["fail"]["read_only"], tools["fail"]["retry"]) == (False, None)
    assert tools["shout"]["type"] == "custom"


def test_tools_list_a_factory_is_called() -> None:
    result = invoke("tools", "list", "tests.cli_registries.tools:make_registry", "-f", "json")
    assert result.exit_code == 0, result.output
    assert [t["name"] for t in json.loads(result.stdout)] == ["add"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "expected module:attribute (e.g. myapp.tools:registry), got 'no_colon'"),
        ("no.such.module:x", "cannot import 'no.such.module': No module named 'no'"),
        ("tests.cli_registries.broken:registry", "RuntimeError: this module is broken"),
        ("tests.cli_registries.tools:nothing", "has no attribute 'nothing'"),
        ("tests.cli_registries.tools:NOT_A_REGISTRY", "is a int, not a ToolRegistry"),
        ("tests.cli_registries.tools:broken_factory", "raised RuntimeError: no registry today"),
        # A script's sys.exit(0) at import: not a quiet success with nothing listed.
        ("tests.cli_registries.exits:registry", "cannot import 'tests.cli_registries.exits'"),
        ("tests.cli_registries.tools:exiting_factory", "called sys.exit(3)"),
    ],
)
def test_tools_list_a_bad_registry_is_one_line_exit_2(spec: str, message: str) -> None:
    result = invoke("tools", "list", spec)
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert line.startswith("toolbus tools list: ")
    assert message in line
    assert result.stdout == ""


@pytest.mark.parametrize(("format", "provider"), [("openai", "OpenAI"), ("anthropic", "Anthropic")])
def test_tools_list_a_name_the_provider_refuses_is_one_line_exit_2(
    format: str, provider: str
) -> None:
    """A traceback, exit 1, for a dotted name (which MCP takes)."""
    result = invoke("tools", "list", NUMBERS, "--format", format)
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert line.startswith(f"toolbus tools list: --format {format}: tool 'ns.dotted': {provider}")
    assert result.stdout == ""
    assert invoke("tools", "list", NUMBERS, "--format", "mcp").exit_code == 0


def test_tools_list_an_unknown_format_is_one_line_exit_2() -> None:
    result = invoke("tools", "list", SPEC, "--format", "yaml")
    assert result.exit_code == 2
    assert "'yaml' is not one of" in one_line(result.stderr)


# -- toolbus call ---------------------------------------------------------------------


def test_call_ok_prints_events_and_result_exit_0() -> None:
    result = invoke("call", SPEC, "add", "--args", '{"a": 2, "b": 3}')
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "tool:executing" in out and "tool:executed" in out and "tool:finished" in out
    assert 'arguments={"a":2,"b":3}' in out
    assert "result: ok · 1 attempt" in out
    assert out.rstrip().endswith("5")  # what the model reads


def test_call_json_has_the_result_and_every_event_in_order() -> None:
    result = invoke("call", SPEC, "add", "--args", '{"a": 2}', "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["result"]["status"] == "ok"
    assert data["result"]["output"] == 3
    signals = [e["signal"] for e in data["events"]]
    assert signals == ["tool:executing", "tool:executed", "tool:finished"]
    seqs = [e["seq"] for e in data["events"]]
    assert seqs == sorted(seqs) and seqs[0] >= 1
    assert data["events"][0]["arguments"] == {"a": 2}
    assert data["events"][-1]["result"]["output"] == 3


def test_call_leaves_out_the_events_private_fields() -> None:
    """`_run` is toolbus's own, not the event's data: no surface shows it (review 10b)."""
    text = invoke("call", SPEC, "add", "--args", '{"a": 1}')
    assert text.exit_code == 0 and "_run" not in text.stdout
    as_json = json.loads(invoke("call", SPEC, "add", "--args", '{"a": 1}', "--json").stdout)
    assert not [key for e in as_json["events"] for key in e if key.startswith("_")]


# -- text a tool wrote reaches the terminal written out (review 10b) ---------------

ESCAPES = "tests.cli_registries.escapes:registry"


def test_tools_list_writes_out_the_control_characters_of_a_tools_text() -> None:
    """A tool's description is its author's (an MCP server's)."""
    result = invoke("tools", "list", ESCAPES)
    assert result.exit_code == 0, result.output
    assert not [raw for raw in RAW if raw in result.stdout]
    assert "peek" in result.stdout
    assert "\\x1b[2J" in result.stdout and "\\x9b2J" in result.stdout  # the description's


def test_call_writes_out_the_control_characters_of_a_tools_text() -> None:
    failed = invoke("call", ESCAPES, "fetch", "--args", '{"url": "u"}')
    assert failed.exit_code == 1
    assert not [raw for raw in RAW if raw in failed.stdout]
    assert "\\x1b]52;c;cHduZWQ=\\x1b\\ \\x1b[2J \\x9b31m" in failed.stdout
    # The output keeps its lines and tabs (CRLF as a newline); the rest is written out.
    ok = invoke("call", ESCAPES, "peek", "--args", '{"url": "u"}')
    assert ok.exit_code == 0, ok.output
    assert not [raw for raw in RAW if raw in ok.stdout]
    assert "page:\n\\x1b]52;c;cHduZWQ=\\x1b\\" in ok.stdout
    assert "done\\x7f\n" in ok.stdout
    # --json: JSON escapes C0 controls itself, and DEL and C1 too here; the data is intact.
    as_json = invoke("call", ESCAPES, "fetch", "--args", '{"url": "u"}', "--json")
    assert not [raw for raw in RAW if raw in as_json.stdout]
    assert "\\u009b31m" in as_json.stdout
    assert json.loads(as_json.stdout)["result"]["error"].startswith("page said: \x1b]52;c;")
    # A usage error that quotes the name asked for.
    unknown = invoke("call", ESCAPES, "nope\x1b[8m")
    assert unknown.exit_code == 2
    assert not [raw for raw in RAW if raw in unknown.output] and "\\x1b[8m" in unknown.output


def test_call_json_writes_a_lone_surrogate_as_a_replacement_character() -> None:
    """`--json` raised UnicodeEncodeError writing such an output (bug hunt)."""
    result = invoke("call", "tests.cli_registries.escapes:odd_names", "listing", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"]["output"] == {"names": ["report-\ufffd.txt"]}


def test_call_json_keeps_keys_holding_a_lone_surrogate_apart() -> None:
    """`--json` raised UnicodeEncodeError (a traceback) for such a key in an
    output; in metadata the keys became U+FFFDs, two file names one key (review).
    A key's surrogate is written as its escape."""
    result = invoke("call", "tests.cli_registries.escapes:odd_names", "sizes", "--json")
    assert result.exit_code == 0, result.output
    written = json.loads(result.stdout)
    expected = {"report-\\udce9.txt": 1, "report-\\udce8.txt": 2}
    assert written["result"]["output"] == expected
    assert written["result"]["metadata"] == {"report-\\udce9.txt": "a", "report-\\udce8.txt": "b"}
    [finished] = [e for e in written["events"] if e["signal"] == "tool:finished"]
    assert finished["result"]["output"] == expected
    text = invoke("call", "tests.cli_registries.escapes:odd_names", "sizes")
    assert text.exit_code == 0 and '"report-\\\\udce8.txt": 2' in text.stdout


def test_call_reads_arguments_from_stdin() -> None:
    result = invoke("call", SPEC, "add", "--args", "-", "--json", stdin='{"a": 40, "b": 2}')
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"]["output"] == 42


def test_call_that_fails_exits_1() -> None:
    result = invoke("call", SPEC, "fail", "--args", '{"reason": "no disk"}')
    assert result.exit_code == 1
    assert "tool:error" in result.stdout
    assert "Error: cannot: no disk (TOOL_ERROR)" in result.stdout


def test_call_rejected_by_the_schema_exits_1() -> None:
    result = invoke("call", SPEC, "add", "--args", '{"a": "two"}', "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert (data["result"]["status"], data["result"]["error_code"]) == (
        "rejected",
        "INVALID_ARGUMENTS",
    )
    assert [e["signal"] for e in data["events"]] == ["tool:rejected", "tool:finished"]


def test_call_that_times_out_exits_1() -> None:
    result = invoke("call", SPEC, "hang", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert (data["result"]["status"], data["result"]["error_code"]) == (
        "timeout",
        "EXECUTION_TIMEOUT",
    )
    assert "tool:timeout" in [e["signal"] for e in data["events"]]


def test_call_timeout_option_applies_to_tools_without_their_own() -> None:
    result = invoke("call", SPEC, "add", "--args", '{"a": 1}', "--timeout", "0", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["events"][0]["timeout"] == 5  # the tool's own


def test_call_free_text_tool() -> None:
    result = invoke("call", SPEC, "shout", "--args", "hi {there", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"]["output"] == "HI {THERE"


def test_call_never_prints_a_secret() -> None:
    secret = "correct-horse-battery-42"
    for extra in ((), ("--json",)):
        result = invoke(
            "call", SPEC, "login", "--args", json.dumps({"user": "ada", "password": secret}), *extra
        )
        assert result.exit_code == 1
        assert secret not in result.output
        assert "***" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ('{"a": ', "toolbus call: --args is not valid JSON (unexpected end of data at position"),
        ("[1, 2]", "toolbus call: --args must be a JSON object, got list"),
        ("", "toolbus call: --args is not valid JSON"),
    ],
)
def test_call_bad_json_is_one_line_exit_2(args: str, message: str) -> None:
    result = invoke("call", SPEC, "add", "--args", args)
    assert result.exit_code == 2
    assert one_line(result.stderr).startswith(message)
    assert result.stdout == ""


NUMBERS = "tests.cli_registries.numbers:registry"


@pytest.mark.parametrize("number", ["123456789012345678901234567890", "1" + "0" * 400])
def test_call_reads_args_as_the_executor_does_integers_of_any_size(number: str) -> None:
    """orjson read them: a float the tool refused, or "not valid JSON"."""
    result = invoke("call", NUMBERS, "count", "--args", f'{{"n": {number}}}', "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"]["output"] == {"n": int(number), "type": "int"}


def test_call_prints_an_event_holding_an_integer_past_64_bits() -> None:
    """Text mode crashed after the call ran: "Integer exceeds 64-bit range", exit 1."""
    result = invoke("call", NUMBERS, "big_progress")
    assert result.exit_code == 0, result.output
    assert f'data={{"n":{10**30}}}' in result.stdout
    assert result.stdout.rstrip().endswith("counted")


def test_call_unknown_tool_lists_the_available_ones_exit_2() -> None:
    result = invoke("call", SPEC, "ad")
    assert result.exit_code == 2
    assert one_line(result.stderr) == (
        "toolbus call: Unknown tool 'ad'. Did you mean 'add'? "
        "Available tools: add, fail, hang, login, shout"
    )


def test_call_bad_module_is_one_line_exit_2() -> None:
    result = invoke("call", "no_such_module:registry", "add")
    assert result.exit_code == 2
    assert one_line(result.stderr) == (
        "toolbus call: cannot import 'no_such_module': No module named 'no_such_module'"
    )


def test_call_missing_tool_argument_is_one_line_exit_2() -> None:
    result = invoke("call", SPEC)
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert "Missing argument" in line and "(see 'toolbus call --help')" in line


def test_call_negative_timeout_is_one_line_exit_2() -> None:
    result = invoke("call", SPEC, "add", "--timeout", "-1")
    assert result.exit_code == 2
    assert "--timeout" in one_line(result.stderr)


# -- toolbus bench ------------------------------------------------------------------


def test_bench_finds_the_suite_in_this_clone() -> None:
    assert bench_command.suite_root() == ROOT


def test_bench_without_the_suite_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_command, "suite_root", lambda: None)
    result = invoke("bench", "--smoke")
    assert result.exit_code == 2
    assert one_line(result.stderr).startswith(
        "toolbus bench: the benchmark suite is not installed with toolbus"
    )


def test_bench_runs_the_suite(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # From another directory: the suite is found beside the package, and a
    # relative path is the caller's.
    proc = run("bench", "--smoke", "--only", "single", "--json", "bench.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-- Goals (smoke mode" in proc.stdout
    assert json.loads((tmp_path / out.name).read_text())["meta"]["mode"] == "smoke"


def test_bench_passes_the_suites_usage_errors_on() -> None:
    proc = run("bench", "--smoke", "--only", "nosuch")
    assert proc.returncode == 2
    assert "unknown scenario(s): nosuch" in proc.stderr


# -- as processes ---------------------------------------------------------------------


def test_processes_exit_codes_and_one_line_errors() -> None:
    ok = run("call", SPEC, "add", "--args", '{"a": 1, "b": 1}')
    assert (ok.returncode, ok.stderr) == (0, ""), ok.stderr
    assert "tool:finished" in ok.stdout

    failed = run("call", SPEC, "fail", "--args", '{"reason": "x"}')
    assert failed.returncode == 1, failed.stderr
    assert "Error: cannot: x (TOOL_ERROR)" in failed.stdout

    listed = run("tools", "list", SPEC, "--format", "anthropic")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == anthropic.tool_definitions(registry)

    chat = run("tools", "list", SPEC, "--format", "openai")
    assert json.loads(chat.stdout) == registry.to_openai()
    assert [t["function"]["name"] for t in json.loads(chat.stdout) if "function" in t] == [
        t["function"]["name"] for t in openai.chat_tool_definitions(registry) if "function" in t
    ]

    for args, start in [
        (("tools", "list", "nope:registry"), "toolbus tools list: cannot import 'nope'"),
        (("call", SPEC, "add", "--args", "{oops"), "toolbus call: --args is not valid JSON"),
        (("call", SPEC, "nosuch"), "toolbus call: Unknown tool 'nosuch'. Available tools: add,"),
        (("call", SPEC), "python -m toolbus call: Missing argument"),
        (("tools", "list", SPEC, "--format", "yaml"), "python -m toolbus tools list: Invalid"),
    ]:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert one_line(proc.stderr).startswith(start), proc.stderr
        assert proc.stdout == "", proc.stdout


def test_process_registry_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(
        "from toolbus import ToolRegistry\n"
        "registry = ToolRegistry()\n"
        "@registry.tool\n"
        "def greet(name: str) -> str:\n"
        "    '''Greet someone.'''\n"
        "    return f'hello {name}'\n"
    )
    proc = run("call", "my_tools:registry", "greet", "--args", '{"name": "Ada"}', cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("hello Ada")


def test_toolbus_call_does_not_pass_terminal_escapes_through() -> None:
    """`toolbus call` printed a tool error's escape sequences raw (review 10b)."""
    from toolbus.cli import app

    result = CliRunner(env={"NO_COLOR": "1"}).invoke(
        app, ["call", "tests.cli_registries.escapes:quoting", "fetch", "--args", '{"url":"u"}']
    )
    assert result.exit_code == 1, result.output
    assert OSC52 not in result.output
    assert CLEAR not in result.output


def test_toolbus_call_does_not_print_the_private_run_token() -> None:
    """`toolbus call` printed the private `CallEvent._run`, in text and in --json (review 10b).

    Every other surface leaves out CallEvent._run ("toolbus's own, not the
    event's data (no surface publishes it)"); `toolbus call` prints it, in
    text and in --json.
    """
    from toolbus.cli import app

    spec = "tests.cli_registries.tools:registry"
    runner = CliRunner(env={"NO_COLOR": "1"})
    text = runner.invoke(app, ["call", spec, "add", "--args", '{"a": 1}'])
    assert text.exit_code == 0, text.output
    assert "_run=" not in text.output
    as_json = runner.invoke(app, ["call", spec, "add", "--args", '{"a": 1}', "--json"])
    assert as_json.exit_code == 0, as_json.output
    events = json.loads(as_json.output)["events"]
    assert all("_run" not in e for e in events), events[0]
