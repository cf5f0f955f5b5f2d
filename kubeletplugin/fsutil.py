"""Crash-safe file writes, confined paths and private directories, shared by checkpoint, CDI and
publishing.

Every file the plugin writes is written the same way: a temporary file next to the target,
``fsync``, ``os.replace``, then ``fsync`` of the directory. A reader (the container runtime
scanning the CDI directory, the plugin reading its checkpoint after a crash) therefore sees the
old content or the new, never a torn file, and a rename that returned has reached the disk.
Temporary names start with a dot and end in ``.tmp`` so no scanner mistakes them for specs; a
crash between create and rename leaves one behind, which :func:`remove_temp_files` clears at
start-up.

Paths built from what a caller sent (a claim UID, a device or share name) go through
:func:`confined`: each piece must be one plain path component, and the result must stay inside
its base directory even after symlinks are resolved. Modes are always set explicitly
(``fchmod``/``chmod`` after creation), because the mode given to ``open``/``mkdir`` is filtered
by the process umask, and a umask of 000 would otherwise give world-writable files.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

NAME_MAX = 255
"""Bytes in one path component on Linux file systems."""

TEMP_SUFFIX = ".tmp"


class UnsafePathError(OSError):
    """A path built from untrusted input would leave its directory or is not a plain name.

    An ``OSError`` on purpose: every caller already turns file-system failures into a per-claim
    error, so an unsafe path is reported the same way and never escapes as a crash.
    """


def short(value: str, limit: int = 64) -> str:
    """``value`` quoted for an error message, at most ``limit`` characters of it."""
    if len(value) <= limit:
        return f'"{value}"'
    return f'"{value[:limit]}"... ({len(value)} characters)'


def component_problem(name: str) -> str:
    """Why ``name`` is not one plain path component; empty if it is."""
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if "/" in name or "\0" in name:
        return "must not contain '/' or NUL"
    if len(os.fsencode(name)) > NAME_MAX:
        return f"must be no more than {NAME_MAX} bytes"
    return ""


def confined(base: Path, *names: str) -> Path:
    """``base/names[0]/names[1]/...``, refused unless every name is one plain component and the
    result (symlinks resolved) stays inside ``base``."""
    for name in names:
        problem = component_problem(name)
        if problem:
            raise UnsafePathError(f"path component {short(name)} under {base}: {problem}")
    path = base.joinpath(*names)
    try:
        root = base.resolve()
        resolved = path.resolve()
    except RuntimeError as err:  # a symlink loop (Python < 3.13 raises RuntimeError)
        raise UnsafePathError(f"{path}: {err}") from None
    if resolved != root and root not in resolved.parents:
        raise UnsafePathError(f"{path}: resolves to {resolved}, outside {base}")
    return path


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{TEMP_SUFFIX}")


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably; the file gets exactly ``mode``."""
    tmp = _temp_path(path)
    # O_NOFOLLOW: a symlink planted at the temporary name must not redirect the write.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask; be exact
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def remove_durably(path: Path) -> bool:
    """Unlink ``path`` (missing is fine) and sync the directory; True if something was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_temp_files(directory: Path, *, prefix: str = "", recursive: bool = False) -> list[Path]:
    """Delete the temporary files :func:`write_atomic` leaves behind when a crash interrupts it.

    Only regular files named ``.<prefix>*.tmp`` are removed (symlinks are never followed, into
    directories or otherwise), so other programs' files in a shared directory such as the CDI
    directory are left alone. Returns what was removed, sorted.
    """
    removed: list[Path] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if recursive:
                removed.extend(remove_temp_files(Path(entry.path), prefix=prefix, recursive=True))
            continue
        name = entry.name
        if (
            entry.is_file(follow_symlinks=False)
            and name.startswith(f".{prefix}")
            and name.endswith(TEMP_SUFFIX)
        ):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    if removed:
        fsync_dir(directory)
    return sorted(removed)


def ensure_dir(path: Path, *, mode: int, enforce: bool) -> None:
    """Create ``path`` (and missing parents) with exactly ``mode``; with ``enforce``, also tighten
    an existing one.

    Every level this call creates gets ``mode`` whatever the umask. Directories the plugin owns
    (its socket and checkpoint directories) are enforced; shared ones such as the kubelet's
    plugins_registry or the CDI directory are only created, never re-permissioned.
    """
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path}: exists and is not a directory")
    if not path.exists():
        missing: list[Path] = []
        level = path
        while not level.exists():
            missing.append(level)
            if level.parent == level:
                break
            level = level.parent
        for directory in reversed(missing):
            try:
                directory.mkdir(mode=mode)
            except FileExistsError:  # created concurrently (another plugin process): theirs
                if not directory.is_dir():
                    raise NotADirectoryError(f"{directory}: exists and is not a directory") from None
                continue
            os.chmod(directory, mode)
    if enforce and stat.S_IMODE(path.stat().st_mode) != mode:
        os.chmod(path, mode)
