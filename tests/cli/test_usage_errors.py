"""A usage error is one line and exit 2, on every command line the project ships: argparse's own
error prints the usage block first, so every parser is ``service.argparsing.ArgumentParser``.

In process (``main`` of each entry point, argparse exiting through ``SystemExit``); one real
process checks what a shell sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from dra_solver import cli
from dra_solver.controllers import cli as controllers_cli
from dra_solver.kubeletplugin import __main__ as kubeletplugin_main
from dra_solver.service import healthcheck
from dra_solver.service.localcluster import kubeup

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys: pytest.CaptureFixture[str], main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as done:
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _usage_error(capsys: pytest.CaptureFixture[str], main: Callable[[Sequence[str]], int], argv: Sequence[str]) -> str:
    code, out, err = _run(capsys, main, argv)
    assert (code, out) == (2, ""), err
    lines = err.splitlines()
    assert len(lines) == 1 and "usage:" not in err, err
    return lines[0]


@pytest.mark.parametrize("command", sorted(cli.SUBCOMMANDS))
def test_every_subcommand_refuses_an_unknown_flag_in_one_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(capsys, cli.main, [command, "--no-such-flag"])
    assert line.startswith(f"dra-solver {command}: error: "), line
    assert line.endswith(f"(see dra-solver {command} --help)"), line


@pytest.mark.parametrize(("argv", "expected"), [
    (["allocate", "--node", "n", "--timeout", "x", "f.yaml"],
     "dra-solver allocate: error: argument --timeout: invalid float value: 'x' (see dra-solver allocate --help)"),
    (["allocate", "f.yaml"],
     "dra-solver allocate: error: the following arguments are required: --node (see dra-solver allocate --help)"),
    (["schedule", "--timeout", "x", "f.yaml"],
     "dra-solver schedule: error: argument --timeout: invalid float value: 'x' (see dra-solver schedule --help)"),
    (["compare", "--nodes", "many"],
     "dra-solver compare: error: argument --nodes: invalid int value: 'many' (see dra-solver compare --help)"),
    (["kubelet-plugin"],
     "dra-solver kubelet-plugin: error: the following arguments are required: --driver, --node "
     "(see dra-solver kubelet-plugin --help)"),
    (["local-cluster", "sideways"], None),
    (["no-such-command"], None),
    ([], "dra-solver: error: a COMMAND is required: " + ", ".join(cli.SUBCOMMANDS) + " (see dra-solver --help)"),
])
def test_bad_values_and_missing_arguments(argv: list[str], expected: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(capsys, cli.main, argv)
    if expected is not None:
        assert line == expected
    else:  # argparse's quoting of the choices differs between Python versions
        assert "invalid choice: " in line and line.endswith("--help)"), line


@pytest.mark.parametrize(("main", "argv", "prog"), [
    (controllers_cli.main, ["--workers", "x"], "dra-solver controllers"),
    (kubeletplugin_main.main, ["--driver", "d"], "python -m dra_solver.kubeletplugin"),
    (healthcheck.main, ["--timeout", "soon"], "python -m dra_solver.service.healthcheck"),
    (kubeup.main, ["sideways"], "kube-up"),
])
def test_the_other_entry_points_too(main: Callable[[Sequence[str]], int], argv: list[str], prog: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    line = _usage_error(capsys, main, argv)
    assert line.startswith(f"{prog}: error: ") and line.endswith(f"(see {prog} --help)"), line


def test_help_is_still_the_whole_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, cli.main, ["allocate", "--help"])
    assert (code, err) == (0, "") and out.startswith("usage: dra-solver allocate")


def test_the_real_process_prints_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "dra_solver.cli", "serve", "--port", "eighty"], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("dra-solver serve: error: argument --port: invalid int value: 'eighty' "
                           "(see dra-solver serve --help)\n")
