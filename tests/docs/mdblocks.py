"""The shell examples in README.md and docs/*.md, read so that tests can run every one.

Convention (also in README.md, "Writing docs"):

- A fenced block with the info string ``console`` is an example to run. Lines starting with
  ``$ `` are commands (a trailing backslash continues a command on the next line); the other
  lines are the output it shows. Shown output is checked loosely: each shown line must appear,
  in order, inside the real output (stdout and stderr together); a line ``...`` skips anything
  and ``...`` inside a line is a wildcard. A block without output lines checks only the exit
  status; runs of spaces match any run of spaces, so table columns may shift. Blocks with
  other info strings (``shell``, ``yaml``, ``text``) are not run.
- An HTML comment right above the fence (blank lines between are fine) says how to run it:
  ``<!-- doctest: exit=1 timeout=60 -->``. Keys:

  ``exit=N``         expected exit status of the last command (default 0; earlier commands
                     in the block must succeed).
  ``timeout=S``      seconds for the whole block (default 60).
  ``background``     the block's one command is a server: it is started, the test waits for
                     its first line of output (checked against the shown first line), and it
                     keeps running for the blocks below it in the same file.
  ``ports=A,B``      the fixed ports A, B shown in this file are replaced by free ports in
                     every later command and shown output, so examples can say
                     ``localhost:50051`` and tests can run in parallel.
  ``cluster``        needs a Kubernetes cluster or a container engine: not executed, but each
                     command is checked against the repository instead (manifests render, the
                     objects it names exist, the image it loads is the one deployed).
  ``skip=REASON``    not run at all; the reason is required (for instance the README's
                     ``./scripts/test.sh``, which is this test suite).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doctest:(.*?)-->\s*$")
KNOWN_KEYS = {"exit", "timeout", "background", "ports", "cluster", "skip"}


@dataclass(frozen=True)
class Command:
    """One ``$ `` command and the output shown under it."""

    text: str
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """One runnable ``console`` block."""

    path: Path
    line: int
    commands: tuple[Command, ...]
    options: dict[str, str] = field(default_factory=dict)

    @property
    def ident(self) -> str:
        return f"{self.path.name}:{self.line}"


class DocSyntaxError(Exception):
    """A docs file breaks the convention (unknown directive key, unterminated block, ...)."""


def parse_directive(text: str, *, where: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for token in shlex.split(text):
        key, sep, value = token.partition("=")
        if key not in KNOWN_KEYS:
            raise DocSyntaxError(f"{where}: unknown doctest key {key!r}")
        options[key] = value if sep else "true"
    if "skip" in options and options["skip"] in {"", "true"}:
        raise DocSyntaxError(f"{where}: skip needs a reason, as skip=\"why\"")
    return options


def blocks(path: Path) -> list[Block]:
    """Every ``console`` block of a Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    pending: dict[str, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := _DIRECTIVE.match(line):
            pending = parse_directive(m.group(1), where=f"{path.name}:{i + 1}")
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if line.strip():
                pending = None
            i += 1
            continue
        marker, info = fence.group(2), fence.group(3)
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise DocSyntaxError(f"{path.name}:{start + 1}: unterminated code block")
        i += 1
        indent = len(fence.group(1))
        body = [b[indent:] if b[:indent].strip() == "" else b for b in body]
        if info == "console":
            commands = _commands(body, where=f"{path.name}:{start + 1}")
            out.append(Block(path, start + 1, commands, pending or {}))
        elif pending is not None:
            raise DocSyntaxError(
                f"{path.name}:{start + 1}: a doctest directive above a {info or 'plain'} block "
                "(only console blocks run)"
            )
        pending = None
    return out


def _commands(body: list[str], *, where: str) -> tuple[Command, ...]:
    commands: list[Command] = []
    current: list[str] | None = None
    shown: list[str] = []
    continuing = False
    for raw in body:
        if continuing and current is not None:
            current.append(raw)
            continuing = raw.rstrip().endswith("\\")
            continue
        if raw.startswith("$ "):
            if current is not None:
                commands.append(Command("\n".join(current), tuple(shown)))
            current, shown = [raw[2:]], []
            continuing = raw.rstrip().endswith("\\")
        elif current is None:
            if raw.strip():
                raise DocSyntaxError(f"{where}: output before the first $ command")
        else:
            shown.append(raw)
    if current is None:
        raise DocSyntaxError(f"{where}: console block without a $ command")
    commands.append(Command("\n".join(current), tuple(shown)))
    return tuple(commands)


def shown_matches(shown: tuple[str, ...], actual: str) -> str | None:
    """None when every shown line appears in order in ``actual``; else what is missing."""
    actual_lines = actual.splitlines()
    pos = 0
    for want in shown:
        want = want.strip()
        if not want or want == "...":
            continue
        # Column widths in tables vary with their content: any run of spaces matches any other.
        pattern = re.compile(
            ".*".join(r"\s+".join(re.escape(w) for w in part.split()) for part in want.split("..."))
        )
        while pos < len(actual_lines) and not pattern.search(actual_lines[pos]):
            pos += 1
        if pos >= len(actual_lines):
            return want
        pos += 1
    return None
