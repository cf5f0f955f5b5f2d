"""Semantic versions as DRA uses them: blang/semver v4 parsing and precedence.

Device attributes of type ``version`` and the CEL ``semver()`` function both go through
``github.com/blang/semver/v4``'s strict ``Parse`` upstream (the API server additionally checks
the semver.org 2.0.0 pattern on input). This module re-states that parser, including its
error texts, and the Kubernetes CEL library's optional normalisation (``semver(s, true)``:
a leading ``v``, missing minor/patch and leading zeros are accepted).

Equality, ordering and hashing follow semver precedence, so build metadata is ignored
(``1.0.0+a == 1.0.0+b``), exactly as CEL's ``==`` on semver values upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["Semver", "SemverError", "parse_semver"]

_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_MAX_UINT64: Final = (1 << 64) - 1


class SemverError(ValueError):
    """A string that is not a semantic version; ``str(err)`` is blang/semver's message."""


def _contains_only(text: str, allowed: frozenset[str]) -> bool:
    return all(c in allowed for c in text)


def _has_leading_zeroes(text: str) -> bool:
    return len(text) > 1 and text[0] == "0"


def _parse_uint(text: str) -> int:
    # blang/semver hands these to strconv.ParseUint, whose errors it passes through.
    if not text:
        raise SemverError('strconv.ParseUint: parsing "": invalid syntax')
    value = int(text)
    if value > _MAX_UINT64:
        raise SemverError(f'strconv.ParseUint: parsing "{text}": value out of range')
    return value


def _go_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class _PreRelease:
    text: str
    number: int | None  # set for numeric identifiers

    def compare(self, other: _PreRelease) -> int:
        if self.number is not None and other.number is None:
            return -1
        if self.number is None and other.number is not None:
            return 1
        if self.number is not None and other.number is not None:
            return (self.number > other.number) - (self.number < other.number)
        return (self.text > other.text) - (self.text < other.text)


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """A parsed version. ``str()`` prints it back (with pre-release and build parts)."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        return parse_semver(text, normalize=normalize)

    def _pre_parts(self) -> tuple[_PreRelease, ...]:
        return tuple(
            _PreRelease(p, int(p) if _contains_only(p, _NUMBERS) else None) for p in self.pre
        )

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence (blang ``Compare``)."""
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return 1 if mine > theirs else -1
        if not self.pre and not other.pre:
            return 0
        if not self.pre:
            return 1
        if not other.pre:
            return -1
        for a, b in zip(self._pre_parts(), other._pre_parts(), strict=False):
            c = a.compare(b)
            if c:
                return c
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def _key(self) -> tuple[object, ...]:
        return (self.major, self.minor, self.patch, self._pre_parts())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) != 0

    def __lt__(self, other: Semver) -> bool:
        return self.compare(other) < 0

    def __le__(self, other: Semver) -> bool:
        return self.compare(other) <= 0

    def __gt__(self, other: Semver) -> bool:
        return self.compare(other) > 0

    def __ge__(self, other: Semver) -> bool:
        return self.compare(other) >= 0

    def __hash__(self) -> int:
        return hash(self._key())

    def precedence_key(self) -> str:
        """The version without build metadata: equal keys exactly when versions compare
        equal (strict parsing forbids the leading zeros that would break this)."""
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(self._canonical_pre())
        return text

    def _canonical_pre(self) -> tuple[str, ...]:
        return tuple(str(p.number) if p.number is not None else p.text for p in self._pre_parts())

    def __str__(self) -> str:
        text = self.precedence_key()
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


def _normalize(text: str) -> str:
    """The Kubernetes CEL library's ``normalizeAndParse`` preparation step."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or stripped[0] not in _NUMBERS:
                stripped = "0" + stripped
            parts[i] = stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend(["0"] * (3 - len(parts)))
    return ".".join(parts)


def parse_semver(text: str, *, normalize: bool = False) -> Semver:
    """blang/semver v4 ``Parse`` (strict), or the normalising variant of CEL's
    ``semver(text, true)``. Raises :class:`SemverError` with upstream's message."""
    if normalize:
        text = _normalize(text)
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major_text, minor_text, rest = parts
    if not _contains_only(major_text, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in major number {_go_quote(major_text)}")
    if _has_leading_zeroes(major_text):
        raise SemverError(f"Major number must not contain leading zeroes {_go_quote(major_text)}")
    major = _parse_uint(major_text)
    if not _contains_only(minor_text, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in minor number {_go_quote(minor_text)}")
    if _has_leading_zeroes(minor_text):
        raise SemverError(f"Minor number must not contain leading zeroes {_go_quote(minor_text)}")
    minor = _parse_uint(minor_text)

    build: list[str] = []
    pre: list[str] = []
    patch_text = rest
    if "+" in patch_text:
        patch_text, _, build_text = patch_text.partition("+")
        build = build_text.split(".")
    if "-" in patch_text:
        patch_text, _, pre_text = patch_text.partition("-")
        pre = pre_text.split(".")
    if not _contains_only(patch_text, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in patch number {_go_quote(patch_text)}")
    if _has_leading_zeroes(patch_text):
        raise SemverError(f"Patch number must not contain leading zeroes {_go_quote(patch_text)}")
    patch = _parse_uint(patch_text)

    for part in pre:
        if not part:
            raise SemverError("Prerelease is empty")
        if _contains_only(part, _NUMBERS):
            if _has_leading_zeroes(part):
                raise SemverError(
                    f"Numeric PreRelease version must not contain leading zeroes {_go_quote(part)}"
                )
            _parse_uint(part)
        elif not _contains_only(part, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in prerelease {_go_quote(part)}")
    for part in build:
        if not part:
            raise SemverError("Build meta data is empty")
        if not _contains_only(part, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in build meta data {_go_quote(part)}")
    return Semver(major, minor, patch, tuple(pre), tuple(build))
