"""docs/cli.md documents every subcommand and every flag the parsers define, and no others."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from dra_solver import cli

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"


def _flags(command: str) -> set[str]:
    parser = cli.build_parser([command])
    sub = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    flags: set[str] = set()
    for action in sub.choices[command]._actions:
        flags.update(o for o in action.option_strings if o.startswith("--") and o != "--help")
    return flags


def _sections() -> dict[str, str]:
    """The text of each ``## dra-solver <command>`` section of docs/cli.md."""
    text = CLI_DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## `?dra-solver ([\w-]+)`?\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_subcommand_has_a_section() -> None:
    assert set(_sections()) == set(cli.SUBCOMMANDS)


@pytest.mark.parametrize("command", sorted(cli.SUBCOMMANDS))
def test_every_flag_is_documented_and_exists(command: str) -> None:
    try:
        flags = _flags(command)
    except ModuleNotFoundError as err:
        pytest.fail(f"dra-solver {command}: its module is missing ({err})")
    section = _sections().get(command, "")
    documented = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", section))
    assert sorted(flags - documented) == [], f"dra-solver {command}: undocumented flags"
    assert sorted(documented - flags) == [], f"dra-solver {command}: documented but not defined"
