"""The core's error hierarchy.

Callers distinguish three outcomes of an allocation attempt, exactly as upstream's allocator
contract does: success, "does not fit on this node" (not an error at all, see
``AllocationOutcome``), and an error that stops the attempt (bad input, CEL runtime error,
fatal pool problem). Everything raised by ``model`` derives from :class:`DraSolverError`, so
shells can turn any of them into a clean message instead of a traceback.

Hierarchy::

    DraSolverError
    ├── InvalidInput            an object fails decoding or API validation (field path)
    │   └── StrictDecodingError unknown or duplicate fields
    ├── InvalidInputs           several of them at once
    ├── AllocationError         stops the attempt on every node (upstream's wording)
    │   └── NodeLocalError      stops it on this node only (upstream's ErrFailedAllocationOnNode)
    └── SolveTimeout            the time limit passed without an answer

``AllocationError`` and ``SolveTimeout`` may carry the ``SolveStats`` of the attempt so far.
"""

from __future__ import annotations

import json

from dra_solver.model.stats import SolveStats

FieldPath = tuple[str | int, ...]

QUOTED_CHARS = 64
"""Characters of a caller's value a message quotes; a longer value shows these and its length,
so that a megabyte-long name cannot make a megabyte-long error."""

MAX_STRUCTURED_CHARS = 256
"""A list or object quoted in a message (as compact JSON) is cut here, saying how long it was."""

MAX_FIELD_CHARS = 256
"""A field path longer than this (map keys are the caller's) is shown as a prefix."""

MAX_REF_CHARS = 317
"""The longest valid ``namespace/name`` (a 63-character label, a 253-character subdomain)."""


def quote(text: str, *, ascii_only: bool = False) -> str:
    """``text`` JSON-quoted for a message: ``"abc"``, or ``"first 64 characters..." (N characters)``."""
    if len(text) > QUOTED_CHARS:
        return json.dumps(text[:QUOTED_CHARS], ensure_ascii=ascii_only)[:-1] + f'..." ({len(text)} characters)'
    return json.dumps(text, ensure_ascii=ascii_only)


def clip(text: str, limit: int = QUOTED_CHARS) -> str:
    """Unquoted text (JSON of a value, a line of a compiler message) cut to ``limit`` characters,
    saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def clip_lines(text: str, limit: int = 2 * QUOTED_CHARS) -> str:
    """Each line of ``text`` cut to ``limit`` characters: CEL's compile errors echo the
    expression's source line under the message."""
    return "\n".join(clip(line, limit) for line in text.split("\n"))


def _clip_ref(obj: str) -> str:
    """``Kind namespace/name`` with an impossibly long name shown as a prefix and its length."""
    kind, sep, ref = obj.partition(" ")
    if sep and len(ref) > MAX_REF_CHARS:
        return f"{kind} {clip(ref)}"
    return obj


def format_field_path(path: FieldPath) -> str:
    """Render ``("spec", "devices", "requests", 0, "count")`` as ``spec.devices.requests[0].count``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = part
    return out


class DraSolverError(Exception):
    """Base of every error the core raises."""


class InvalidInput(DraSolverError):
    """An object fails decoding or API-server validation.

    ``obj`` names the object like ``ResourceClaim default/c1``; ``field_path`` points at the
    offending field; ``detail`` is the API server style reason (``Invalid value: 0: must be
    greater than zero``).
    """

    def __init__(self, obj: str, field_path: FieldPath, detail: str, *, source: str = "") -> None:
        self.obj = obj
        self.field_path = field_path
        self.detail = detail
        self.source = source
        super().__init__(self._render())

    @property
    def field(self) -> str:
        return format_field_path(self.field_path)

    def _render(self) -> str:
        where = f"{self.source}: " if self.source else ""
        obj = f"{_clip_ref(self.obj)}: " if self.obj else ""
        field = f"{clip(self.field, MAX_FIELD_CHARS)}: " if self.field_path else ""
        return f"{where}{obj}{field}{self.detail}"


class StrictDecodingError(InvalidInput):
    """Unknown or duplicate fields, reported as the API server's strict field validation words
    them: ``strict decoding error: unknown field "spec.devices.requests[0].exactly.cout"``.

    ``problems`` holds (field path, ``"unknown field"`` or ``"duplicate field"``); the path of
    the first one is ``field_path``. Paths use the decoder's form: map keys as ``.key``.
    """

    def __init__(
        self, obj: str, problems: list[tuple[FieldPath, str]], *, source: str = ""
    ) -> None:
        self.problems = tuple(problems)
        detail = "strict decoding error: " + self._listed()
        super().__init__(obj, problems[0][0] if problems else (), detail, source=source)

    def lines(self) -> list[str]:
        """One ``unknown field "path"`` text per problem (what ``warn`` prints)."""
        return [f"{what} {quote(format_field_path(path))}" for path, what in self.problems]

    def _listed(self) -> str:
        # The decoder reports at most 100 problems an object, as the API server does.
        return ", ".join(self.lines())

    def warning(self) -> str:
        """The problems as ``--validate=warn`` reports them (without the error prefix)."""
        where = f"{self.source}: " if self.source else ""
        obj = f"{_clip_ref(self.obj)}: " if self.obj else ""
        return f"{where}{obj}{self._listed()}"

    def _render(self) -> str:
        where = f"{self.source}: " if self.source else ""
        obj = f"{_clip_ref(self.obj)}: " if self.obj else ""
        return f"{where}{obj}{self.detail}"


class InvalidInputs(DraSolverError):
    """Several validation failures at once (the API server reports all of them)."""

    def __init__(self, errors: list[InvalidInput]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


class AllocationError(DraSolverError):
    """A fatal problem that aborts the whole allocation attempt, like an error from upstream's
    ``Allocate``: unknown DeviceClass, CEL runtime error, a fatal pool problem, a disabled
    feature being requested. The message follows upstream's wording."""

    def __init__(self, message: str, *, stats: SolveStats | None = None) -> None:
        super().__init__(message)
        self.stats = stats
        """How far the attempt got, when an allocator raised it after searching."""


class NodeLocalError(AllocationError):
    """An error for this node only: the claims cannot be allocated here and the reason is not
    "they do not fit" (upstream: "invalid resource pools were encountered", wrapped in its
    ``ErrFailedAllocationOnNode``). A caller choosing among nodes records it as this node's
    verdict and goes on with the others; a caller asking about one node reports it."""


class SolveTimeout(DraSolverError):
    """The deadline passed before any answer was found."""

    def __init__(self, message: str, *, stats: SolveStats | None = None) -> None:
        super().__init__(message)
        self.stats = stats
        """The attempt's statistics at the deadline (status UNKNOWN or DEADLINE)."""
