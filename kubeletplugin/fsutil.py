"""Crash-safe file writes and private directories, shared by checkpoint, CDI and publishing.

Every file the plugin writes is written the same way: a temporary file next to the target,
``fsync``, ``os.replace``, then ``fsync`` of the directory. A reader (the container runtime
scanning the CDI directory, the plugin reading its checkpoint after a crash) therefore sees the
old content or the new, never a torn file, and a rename that returned has reached the disk.
Temporary names start with a dot and end in ``.tmp`` so no scanner mistakes them for specs.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
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


def ensure_dir(path: Path, *, mode: int, enforce: bool) -> None:
    """Create ``path`` (and parents) with ``mode``; with ``enforce``, also tighten an existing one.

    Directories the plugin owns (its socket and checkpoint directories) are enforced; shared
    ones such as the kubelet's plugins_registry are only created, never re-permissioned.
    """
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path}: exists and is not a directory")
    if not path.exists():
        # makedirs applies the umask to every level; fix the leaf below.
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True, mode=mode)
        os.chmod(path, mode)
    elif enforce and stat.S_IMODE(path.stat().st_mode) != mode:
        os.chmod(path, mode)
