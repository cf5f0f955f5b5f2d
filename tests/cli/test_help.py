"""Every flag of every command has help text and shows its default (docs/cli.md, conventions)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from dra_solver import __version__, cli
from dra_solver.cli.helpformat import shows_default


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out: list[tuple[str, argparse.ArgumentParser]] = []
    for command in sorted(cli.SUBCOMMANDS):
        parser = cli.build_parser([command])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out.append((f"dra-solver {command}", sub.choices[command]))
    out.append(("dra-solver", cli.build_parser([])))
    return out


def _problems(name: str, parser: argparse.ArgumentParser) -> list[str]:
    problems = []
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        flag = "/".join(action.option_strings) or action.dest
        if not action.help or action.help is argparse.SUPPRESS:
            problems.append(f"{name} {flag}: no help text")
            continue
        if action.choices is not None and any(c == "" for c in action.choices):
            problems.append(f"{name} {flag}: an empty choice shows as nothing in --help")
        shown = formatter._expand_help(action)
        if shows_default(action) and "default" not in shown.lower():
            problems.append(f"{name} {flag}: default {action.default!r} not shown")
        if isinstance(action.default, str) and action.default == "" and action.option_strings and "default" not in shown.lower():
            problems.append(f"{name} {flag}: help does not say what the empty default means")
    return problems


def test_every_flag_has_help_and_shows_its_default() -> None:
    problems = [p for name, parser in _parsers() for p in _problems(name, parser)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "dra_solver", *argv], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"dra-solver {__version__}"
