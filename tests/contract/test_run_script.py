"""`scripts/run.py test`: which arguments pick tests and which keep the tiers.

Options that take a value (`-p no:randomly`, `--randomly-seed 7`) once made
the whole suite run as one pytest run, without the tiers, their caps or the
slow tier's timeout (review of issue 19).
"""

from __future__ import annotations

import importlib.util
import re
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run.py"


@pytest.fixture(scope="module")
def run_py() -> ModuleType:
    spec = importlib.util.spec_from_file_location("toolbus_run_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-p", "no:randomly"],
        ["--randomly-seed", "123"],
        ["--randomly-seed=123"],
        ["-x", "--timeout", "100"],
        ["--deselect", "tests/bus/test_plans.py::test_x"],
        ["--quick", "-n", "0"],
        ["-n", "auto", "--dist", "loadfile"],
        ["--timeout-method", "thread", "--hypothesis-seed", "1", "-r", "a"],
        ["--durations-min", "1", "--override-ini", "log_cli=true", "--show-capture", "no"],
        ["--junit-xml", "out.xml", "--session-timeout", "3000", "--log-file", "run.log"],
        ["--verbosity", "2", "-o", "log_cli=true", "-qx", "--lf"],
    ],
)
def test_options_keep_the_tiers(run_py: ModuleType, args: list[str]) -> None:
    """An option's value (`--durations-min 1`, `-o log_cli=true`) read as a
    test to run made the suite one run without the tiers (review of issue 19)."""
    assert not run_py._names_tests(args)


@pytest.mark.parametrize(
    "args",
    [
        ["tests/bus"],
        ["tests/bus/test_plans.py::test_x", "-p", "no:randomly"],
        ["-k", "deadline"],
        ["-m", "slow"],
        ["--randomly-seed", "5", "tests/bus"],
        ["-mslow"],
        ["-m=slow"],
        ["-kdeadline"],
        ["--durations-min", "1", "tests/bus"],
    ],
)
def test_a_path_or_a_selection_runs_as_given(run_py: ModuleType, args: list[str]) -> None:
    """`-mslow` (attached) ran the slow tests inside the fast tier, whose `-m`
    it replaced (review of issue 19)."""
    assert run_py._names_tests(args)


@pytest.mark.parametrize(
    ("args", "spread"),
    [
        ([], True),
        (["-p", "no:randomly"], True),
        (["-p", "no:xdist"], False),
        (["-pno:xdist"], False),
        (["--pdb"], False),
        (["--trace"], False),
        (["-n", "0"], False),
        (["-n0"], False),
        (["--numprocesses=3"], False),
        (["--dist", "loadfile"], False),
    ],
)
def test_the_tiers_are_spread_unless_the_arguments_say_otherwise(
    run_py: ModuleType, args: list[str], spread: bool
) -> None:
    """`-p no:xdist` made pytest refuse `-n` and both tiers fail; `--pdb`
    refuses workers; a user's `-n 0` is theirs (review of issue 19)."""
    for tier in ("fast", "slow"):
        options = run_py._spread(tier, args)
        assert bool(options) is spread
        if spread:
            assert options[0] == "-n" and int(options[1]) >= 1


def test_every_option_that_takes_a_value_is_known(run_py: ModuleType) -> None:
    """Read from `pytest --help`, with the plugins installed: an option
    missing from `_TAKES_VALUE` reads its value as a test to run (43 were)."""
    import re
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, check=True
    ).stdout
    taking = set()
    for line in out.splitlines():
        spec = re.match(r"^\s{2,}(-\S.*?)(?:\s{2,}|$)", line)
        for part in spec.group(1).split(", ") if spec else ():
            option = re.match(r"^(--?[\w-]+)(=\S+| [A-Za-z_{}\[\],.|-]+)?$", part.strip())
            if option and option.group(2):
                taking.add(option.group(1))
    assert len(taking) > 40, "pytest --help no longer reads as expected"
    assert taking - {"-k", "-m"} <= run_py._TAKES_VALUE


@pytest.mark.parametrize(
    ("args", "added"),
    [
        (["--quick", "tests/bus"], ["-m", "not slow", "--timeout=240"]),
        (["--quick", "-k", "x", "-m", "slow"], ["-m", "not slow", "--timeout=240"]),
        (["tests/bus", "--timeout", "9"], []),
        (["-m", "slow"], ["--timeout=240"]),
    ],
)
def test_named_tests_run_as_given_with_the_tiers_defaults(
    run_py: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    added: list[str],
) -> None:
    """`--quick tests/backends` ran the slow tests there too, and any named
    run had the fast timeout (review of issue 19); a `-m` of one's own still
    wins, being last. The order's seed is chosen and printed first, whatever
    `-q` hides."""
    commands: list[list[str]] = []
    monkeypatch.setattr(run_py, "lint_and_types", lambda: None)
    monkeypatch.setattr(run_py, "_sh", lambda *command: commands.append(list(map(str, command))))
    run_py.test(list(args))
    (command,) = commands
    seed = re.search(r"seed (\d+)", capsys.readouterr().out)
    assert seed is not None
    given = [a for a in args if a != "--quick"]
    assert command[1:] == ["-m", "pytest", *added, *given, f"--randomly-seed={seed[1]}"]
    assert run_py._Args(["-p", "no:randomly"]).seeded and run_py._Args(["--randomly-seed=3"]).seeded


class _Collecting:
    """`_warm`'s background collection, as `_beside_lint` sees it."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def kill(self) -> None:
        self.done.append("kill")

    def wait(self) -> int:
        self.done.append("wait")
        return 0


def test_an_npm_install_that_raises_stops_the_run_before_the_tests(
    run_py: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install runs on a thread beside the lint: its error, which a
    thread only prints, is raised once the lint is over, as it was when the
    install came after the lint (not a slow tier that skips, later)."""

    def broken(root: Path) -> None:
        raise OSError("npm broke")

    ran: list[object] = []
    collecting = _Collecting()
    monkeypatch.setattr(run_py, "_npm_peers", lambda: SimpleNamespace(ensure_npm_peers=broken))
    monkeypatch.setattr(run_py, "_warm", lambda: collecting)
    monkeypatch.setattr(run_py, "lint_and_types", lambda: ran.append("lint"))
    monkeypatch.setattr(run_py, "_run_tier", lambda *a: ran.append(a) or True)
    monkeypatch.setattr(run_py, "_sh", lambda *a: ran.append(a))
    with pytest.raises(OSError, match="npm broke"):
        run_py.test([])
    assert ran == ["lint"]  # (no tier ran)
    assert collecting.done == ["wait"]


def test_a_failing_lint_kills_the_collection_and_lets_the_npm_install_finish(
    run_py: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    linting = threading.Event()
    installed: list[str] = []

    def install(root: Path) -> None:
        assert linting.wait(30)  # (still installing while the lint fails)
        installed.append("installed")
        raise OSError("npm broke too")

    def lint() -> None:
        linting.set()
        raise SystemExit(1)

    collecting = _Collecting()
    monkeypatch.setattr(run_py, "_npm_peers", lambda: SimpleNamespace(ensure_npm_peers=install))
    monkeypatch.setattr(run_py, "_warm", lambda: collecting)
    monkeypatch.setattr(run_py, "lint_and_types", lint)
    with pytest.raises(SystemExit):
        run_py.test([])
    assert installed == ["installed"]  # (joined: an install cut short would look installed)
    assert collecting.done == ["kill", "wait"]
    assert "npm broke too" in capsys.readouterr().err  # (shown, the lint's failure raised)
