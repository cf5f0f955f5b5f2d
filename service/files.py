"""Reading Kubernetes objects from files, directories and stdin for the CLI and file inventory.

The only place in the shell that touches the filesystem for inputs; decoding itself is pure
(``model.decode``). Every problem becomes an ``InvalidInput`` naming the file, so commands can
print one clean line and exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from model import objects as o
from model.decode import decode_text
from model.errors import InvalidInput

SUFFIXES = (".yaml", ".yml", ".json")


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given; directories become their ``*.yaml|*.yml|*.json`` files in name order."""
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if path != "-" and p.is_dir():
            out.extend(str(f) for f in sorted(p.rglob("*")) if f.is_file() and f.suffix in SUFFIXES)
        else:
            out.append(path)
    return out


def read_text(path: str, *, stdin: TextIO | None = None) -> str:
    if path == "-":
        return (stdin or sys.stdin).read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput("", (), "no such file or directory", source=path) from None
    except IsADirectoryError:
        raise InvalidInput("", (), "is a directory", source=path) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput("", (), f"cannot read: {err}", source=path) from None


def read_objects(paths: Sequence[str], *, stdin: TextIO | None = None) -> list[o.TypedObject]:
    """All objects of all paths, in order (files in argument order, documents in file order)."""
    objects: list[o.TypedObject] = []
    for path in expand_paths(paths):
        objects.extend(decode_text(read_text(path, stdin=stdin), source=path))
    return objects
