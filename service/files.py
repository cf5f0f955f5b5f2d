"""Reading Kubernetes objects from files, directories and stdin for the CLI and file inventory.

The only place in the shell that touches the filesystem for inputs; decoding itself is pure
(``model.decode``, the one bounded decoder). Every problem becomes an ``InvalidInput`` naming
the file, so commands can print one clean line and exit 2. What the commands read must say
something: an argument that holds no objects, and an object defined twice (the same file given
twice), are errors, as ``kubectl apply`` treats them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from dra_solver.model import (
    DEFAULT_LIMITS,
    DOCUMENT_API_VERSIONS,
    VALIDATION_MODES,
    DecodeLimits,
    InvalidInput,
    InvalidInputs,
    StrictDecodingError,
    ValidationMode,
    decode_document,
    decode_object,
    iter_documents,
    validate_document,
)
from dra_solver.model import objects as o

SUFFIXES = (".yaml", ".yml", ".json")

Warn = Callable[[str], None]
"""Where ``--validate=warn`` problems go (one line each)."""


def add_validate_argument(parser: argparse.ArgumentParser, *, what: str = "input objects") -> None:
    """kubectl's ``--validate`` flag, with its spelling and default."""
    parser.add_argument(
        "--validate", choices=VALIDATION_MODES, default="strict",
        help=f"{what}: strict (default) rejects unknown and duplicate fields and invalid objects "
             "as the API server does; warn reports unknown and duplicate fields on stderr and goes "
             "on; ignore skips both checks (objects already accepted by an API server)",
    )


def warn_on_stderr(line: str) -> None:
    print(f"warning: {one_line(line)}", file=sys.stderr)


def one_line(text: str) -> str:
    """A message on one line (CEL compile errors draw a caret under the expression on lines of
    their own); CLI errors are one line each."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


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


def read_text(path: str, *, stdin: TextIO | None = None, limits: DecodeLimits = DEFAULT_LIMITS) -> str:
    """The text of ``path`` (``-``: stdin), refusing more than ``limits.max_chars`` before
    reading it all."""
    if path == "-":
        text = _read_bounded(stdin or sys.stdin, limits.max_chars)
        _check_size(len(text), limits, source="<stdin>")
        return text
    try:
        _check_size(Path(path).stat().st_size // 4, limits, source=path)  # at most 4 bytes a character
        with open(path, encoding="utf-8") as handle:
            text = _read_bounded(handle, limits.max_chars)
    except FileNotFoundError:
        raise InvalidInput("", (), "no such file or directory", source=path) from None
    except IsADirectoryError:
        raise InvalidInput("", (), "is a directory", source=path) from None
    except UnicodeDecodeError as err:
        raise InvalidInput("", (), f"not UTF-8 text (byte {err.start})", source=path) from None
    except OSError as err:
        raise InvalidInput("", (), f"cannot read: {err.strerror or err}", source=path) from None
    _check_size(len(text), limits, source=path)
    return text


READ_CHUNK = 1 << 16
"""Characters read at a time: ``read(n)`` sets aside room for ``n`` characters up front, so one
read of the whole limit would cost 64 MiB for a ten-byte file."""


def _read_bounded(handle: TextIO, limit: int) -> str:
    """At most ``limit + 1`` characters of ``handle`` (one more than allowed shows it is too big)."""
    chunks: list[str] = []
    total = 0
    while total <= limit:
        chunk = handle.read(min(READ_CHUNK, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return "".join(chunks)


def _check_size(chars: int, limits: DecodeLimits, *, source: str) -> None:
    if chars > limits.max_chars:
        raise InvalidInput("", (), f"input is larger than {limits.max_chars} characters", source=source)


@dataclass
class Inputs:
    """Objects of every argument in order, and which file defined each one."""

    objects: list[o.TypedObject] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    """``obj.describe()`` -> the file it came from (``<stdin>`` for ``-``)."""


PROGRESS_MIN_CHARS = 5_000_000
"""Files at least this large report progress while they are read (when asked to)."""
PROGRESS_INTERVAL = 2.0
"""Seconds between progress lines."""


def progress_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def read_inputs(
    paths: Sequence[str],
    *,
    stdin: TextIO | None = None,
    validate: ValidationMode = "strict",
    warn: Warn | None = None,
    limits: DecodeLimits = DEFAULT_LIMITS,
    progress: Warn | None = None,
    documents: list[dict[str, Any]] | None = None,
) -> Inputs:
    """All objects of all arguments (files in argument order, documents in file order).

    Each argument must hold at least one object, and no object may be defined twice (unless
    ``validate="ignore"``, which skips API validation).
    ``validate`` is the decoder's field strictness; ``warn`` receives ``--validate=warn``
    problems (default: stderr). ``progress`` receives a line every few seconds while a large
    file (:data:`PROGRESS_MIN_CHARS`) is read, and one when it is done. ``documents``: Pods
    and PodGroups are accepted too and appended there (:func:`read_with_documents`).
    """
    inputs = Inputs()
    report = warn or warn_on_stderr
    for arg in paths:
        shown_arg = "<stdin>" if arg == "-" else arg
        files = expand_paths([arg])
        if not files:
            raise InvalidInput("", (), "no .yaml, .yml or .json files in this directory", source=arg)
        found = 0
        for path in files:
            shown = "<stdin>" if path == "-" else path
            warnings: list[StrictDecodingError] = []
            errors: list[InvalidInput] = []
            text = read_text(path, stdin=stdin, limits=limits)
            before = len(documents) if documents is not None else 0
            objects = _decode_file(text, shown, validate=validate, limits=limits, warnings=warnings, documents=documents, errors=errors,
                                   progress=progress if len(text) >= PROGRESS_MIN_CHARS else None)
            found += len(documents) - before if documents is not None else 0
            for warning in warnings:  # first: a misspelt field often explains an error
                report(warning.warning())
            if errors:
                raise InvalidInputs(errors)
            for obj in objects:
                _add(inputs, obj, shown, validate=validate)
            found += len(objects)
        if not found:
            kinds = ", ".join(sorted({*o.KIND_MODELS, *(DOCUMENT_API_VERSIONS if documents is not None else ())}))
            raise InvalidInput("", (), f"no objects (expected {kinds}, or a List of them)", source=shown_arg)
    return inputs


def _decode_file(
    text: str, source: str, *, validate: ValidationMode, limits: DecodeLimits, warnings: list[StrictDecodingError],
    documents: list[dict[str, Any]] | None, errors: list[InvalidInput], progress: Warn | None,
) -> list[o.TypedObject]:
    """The typed objects of one file. ``documents``: its Pods and PodGroups are decoded as
    documents into it, and what the API server's validation says of them (unless
    ``validate="ignore"``) into ``errors`` (None: they are unknown kinds, as anywhere else).
    ``progress``: told how far the file is read every few seconds, and when it is done."""
    started = time.monotonic()
    next_line = started + PROGRESS_INTERVAL
    read = 0

    def at(position: int) -> None:
        nonlocal read
        read = position

    mb = 1_000_000
    objects: list[o.TypedObject] = []
    for doc in iter_documents(text, source=source, limits=limits, progress=at if progress is not None else None, validate=validate, warnings=warnings):
        if documents is not None and doc.get("kind") in DOCUMENT_API_VERSIONS:
            document = decode_document(doc, source=source, validate=validate, warnings=warnings)
            if validate != "ignore":
                errors.extend(validate_document(document, source=source))
            documents.append(document)
        else:
            objects.append(decode_object(doc, source=source, validate=validate, warnings=warnings))
        if progress is not None and (now := time.monotonic()) >= next_line:
            next_line = now + PROGRESS_INTERVAL
            progress(f"{source}: read {len(objects):,} objects ({read / mb:.0f}/{len(text) / mb:.0f} MB)")
    if progress is not None:
        progress(f"{source}: read {len(objects):,} objects ({len(text) / mb:.0f} MB) in {time.monotonic() - started:.1f}s")
    return objects


def _add(inputs: Inputs, obj: o.TypedObject, source: str, *, validate: ValidationMode) -> None:
    # Unique names are API validation, which `ignore` skips (upstream's test fixtures repeat
    # slice and even claim names).
    key = obj.describe()
    if validate != "ignore" and not obj.name and not obj.metadata.generate_name:
        # API validation would say so later, without the file: an object with neither has no
        # name to find its file by.
        raise InvalidInput(key, ("metadata", "name"), "Required value: name or generateName is required", source=source)
    if validate != "ignore" and obj.name and key in inputs.sources:
        raise InvalidInput(
            key,
            ("metadata", "name"),
            f"Duplicate value: {json.dumps(obj.ref)}: already defined in {inputs.sources[key]}",
            source=source,
        )
    if obj.name:
        inputs.sources[key] = source
    else:  # generateName only: errors name it ``Kind namespace/``; the first such file is told
        inputs.sources.setdefault(key, source)
    inputs.objects.append(obj)


def read_objects(
    paths: Sequence[str],
    *,
    stdin: TextIO | None = None,
    validate: ValidationMode = "strict",
    warn: Warn | None = None,
    progress: Warn | None = None,
) -> list[o.TypedObject]:
    """:func:`read_inputs`' objects."""
    return read_inputs(paths, stdin=stdin, validate=validate, warn=warn, progress=progress).objects


def read_with_documents(
    paths: Sequence[str],
    *,
    stdin: TextIO | None = None,
    validate: ValidationMode = "strict",
    warn: Warn | None = None,
) -> tuple[list[o.TypedObject], list[dict[str, Any]]]:
    """The typed objects and the documents (Pods, PodGroups: ``model.DOCUMENT_API_VERSIONS``)
    of every argument, each checked as :func:`read_inputs` checks objects: strict field
    validation per ``validate`` (``warn`` receives ``--validate=warn`` problems, default
    stderr), types always, and, unless ``validate="ignore"``, the API server's validation of a
    PodGroup (``model.validate_document``), every problem naming its file.

    What ``dra-solver schedule --group`` reads. A document whose ``kind`` is one of those kinds
    is read as a document whatever its ``apiVersion`` says (a wrong one is reported), not as an
    unsupported typed kind."""
    documents: list[dict[str, Any]] = []
    inputs = read_inputs(paths, stdin=stdin, validate=validate, warn=warn, documents=documents)
    return inputs.objects, documents
