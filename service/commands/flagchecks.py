"""The bounds of the commands' numeric flags, checked in one place, the same way everywhere.

argparse turns ``--timeout x`` into a usage error (``invalid float value``), but takes ``nan``,
``inf``, ``-1`` and ``1e10`` as floats, and any integer as an int. Each command lists its
numeric flags with their rule (:func:`check`, right after parsing, before any work), so a
value that parses but makes no sense is one line, ``error: FLAG: ...``, and exit 2 (the
dispatcher in ``dra_solver.cli`` prints :class:`FlagError`; ``serve`` prints it as its other
start-up errors). docs/cli.md states the bounds.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from typing import Any

MAX_SECONDS = 86_400.0
"""The longest time any flag may ask for (a day): a deadline, a time limit, a lifetime or an
interval. More is a typo, and overflows the solver's and gRPC's deadlines."""

MIN_POLL_SECONDS = 0.05
"""``serve --poll-interval``: the shortest interval between inventory file checks (less
would keep a core busy re-reading the files)."""

MAX_PORT = 65_535
MAX_MESSAGE_BYTES = 2**31 - 1
"""gRPC's message size options are C ints."""

MAX_FEASIBLE_NODES = 100_000
"""``schedule --feasible-nodes``: the service's candidate nodes per Schedule."""


class FlagError(ValueError):
    """A flag's value that parses but is out of its bounds, or flags that do not go together:
    the message names the flag; shown as ``error: MESSAGE``, exit status 2."""


Rule = Callable[[str, Any], None]
"""Checks one flag's parsed value; raises :class:`FlagError` naming the flag."""


def seconds(*, least: float = 0.0, zero: bool = False) -> Rule:
    """A number of seconds: finite, at most :data:`MAX_SECONDS`; greater than zero (``zero``: 0
    or more; ``least``: at least that)."""
    if least:
        what = f"a number of seconds of at least {least:g}"
    elif zero:
        what = "a number of seconds, 0 or more"
    else:
        what = "a positive number of seconds"

    def rule(flag: str, value: Any) -> None:
        number = float(value)
        if not least and not zero and number <= 0:
            # The spelling --timeout has always had (kept for scripts that match on it).
            raise FlagError(f"{flag}: Invalid value: {number}: must be greater than zero")
        if not math.isfinite(number) or number < least:
            raise FlagError(f"{flag}: must be {what}: {number}")
        if number > MAX_SECONDS:
            raise FlagError(f"{flag}: must be at most {MAX_SECONDS:g} seconds: {number}")

    return rule


def integer(*, least: int, most: int | None = None, too_small: str = "") -> Rule:
    """An integer from ``least`` to ``most``; ``too_small`` words the lower bound when it is
    not ``must be at least N``."""

    def rule(flag: str, value: Any) -> None:
        if value < least:
            raise FlagError(f"{flag}: {too_small or f'must be at least {least}'}: {value}")
        if most is not None and value > most:
            raise FlagError(f"{flag}: must be at most {most}: {value}")

    return rule


def port(*, off: bool = False) -> Rule:
    """A TCP port, 0 for any free one; ``off``: -1 turns the listener off."""
    what = f"a port from 0 to {MAX_PORT} (0: any free port; -1: off)" if off else f"a port from 0 to {MAX_PORT} (0: any free port)"

    def rule(flag: str, value: Any) -> None:
        if not (-1 if off else 0) <= value <= MAX_PORT:
            raise FlagError(f"{flag}: must be {what}: {value}")

    return rule


def check(args: argparse.Namespace, rules: Mapping[str, Rule], *, dests: Mapping[str, str] | None = None) -> None:
    """Every flag of ``rules`` that has a value in ``args`` (under its ``dests`` name, else
    the flag's own) obeys its rule; the first that does not raises :class:`FlagError`."""
    for flag, rule in rules.items():
        dest = (dests or {}).get(flag) or flag.lstrip("-").replace("-", "_")
        value = getattr(args, dest, None)
        if value is not None:
            rule(flag, value)


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether a flag was given: set to something other than None, False, "" or [] (the
    defaults of flags whose use must be checked against the others)."""
    value = getattr(args, dest, None)
    return value is not None and value is not False and value != "" and value != []
