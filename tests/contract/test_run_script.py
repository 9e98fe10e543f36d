"""`scripts/run.py test`: which arguments pick tests and which keep the tiers.

Options that take a value (`-p no:randomly`, `--randomly-seed 7`) once made
the whole suite run as one pytest run, without the tiers, their caps or the
slow tier's timeout (review of issue 19).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

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
    ],
)
def test_options_keep_the_tiers(run_py: ModuleType, args: list[str]) -> None:
    assert not run_py._names_tests(args)


@pytest.mark.parametrize(
    "args",
    [
        ["tests/bus"],
        ["tests/bus/test_plans.py::test_x", "-p", "no:randomly"],
        ["-k", "deadline"],
        ["-m", "slow"],
        ["--randomly-seed", "5", "tests/bus"],
    ],
)
def test_a_path_or_a_selection_runs_as_given(run_py: ModuleType, args: list[str]) -> None:
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
