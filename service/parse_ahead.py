"""A large YAML inventory parsed in a second process while this one decodes what is parsed.

API:
- ``documents(text, *, source, progress=None, min_chars=None) -> Iterator[dict]``: what
  ``model.iter_documents(text, source=source, progress=progress)`` yields, in the same order,
  raising the same error at the same point. YAML of at least ``min_chars`` characters (default
  ``MIN_CHARS``) is parsed by a forked child process when this thread may run on two CPUs or
  more; anything else, here. ``progress`` is told per batch of documents then.

Why: ``serve`` on a 53 MB YAML inventory (21,869 nodes) spent about 6 s parsing and 4 s
decoding, one after the other, on one core. Parsed ahead, the decoding runs beside the parsing.

How it stays the same as parsing here: the child runs ``iter_documents`` on the very same text
(a fork holds it already: nothing is sent, nothing imported) and sends the documents back in
batches through a pipe (``marshal``; ``pickle`` for a batch holding a mapping that named a key
twice, which strict field validation reports). If the child fails in any way (a YAML error, a
limit, a crash, a minute without a word), this process parses the text itself, skips the documents it already gave, and
so raises what parsing here raises, where it raises it.

Forking a process that runs other threads (gRPC's) is safe only for a child that touches
nothing those threads hold: this one parses, writes to its pipe and leaves with ``os._exit``
(no exit handlers, no gRPC, no logging); a signal ends it the default way, not through
``serve``'s handlers (which stop gRPC).
"""

from __future__ import annotations

import marshal
import os
import pickle
import re
import select
import signal
import struct
import warnings
from collections.abc import Callable, Iterator
from typing import IO, Any

from dra_solver.model import iter_documents

MIN_CHARS = 8_000_000
"""Smaller texts parse in under a second: not worth a second process."""

BATCH = 256
"""Documents per message from the child."""

SILENCE = 60.0
"""Seconds without a message after which the child counts as hung (it sends a batch every
few milliseconds)."""

_HEADER = struct.Struct("<cQ")
_DOCS_MARSHAL, _DOCS_PICKLE, _END = b"m", b"p", b"e"


def documents(
    text: str, *, source: str, progress: Callable[[int], None] | None = None, min_chars: int | None = None
) -> Iterator[dict[str, Any]]:
    if not _worth_it(text, MIN_CHARS if min_chars is None else min_chars):
        yield from iter_documents(text, source=source, progress=progress)
        return
    try:
        read_end, write_end = os.pipe()
    except OSError:  # out of file descriptors
        yield from iter_documents(text, source=source, progress=progress)
        return
    try:
        with warnings.catch_warnings():  # Python 3.12+ warns of fork in a threaded process: see the docstring
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:  # out of processes or memory
        os.close(read_end)
        os.close(write_end)
        yield from iter_documents(text, source=source, progress=progress)
        return
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        try:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # not serve's handlers: they stop gRPC
                signal.signal(sig, signal.SIG_DFL)
            os.close(read_end)
            with os.fdopen(write_end, "wb") as out:
                _parse_into(out, text, source)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    given = 0
    furthest = 0
    stream = _Batches(read_end)
    try:
        for position, batch in stream:
            for doc in batch:
                given += 1
                yield doc
            furthest = position
            if progress is not None:
                progress(position)
    finally:
        stream.close()
        _reap(pid)
    if stream.finished:
        return

    def onward(position: int) -> None:  # progress does not go back over what was given
        if progress is not None and position > furthest:
            progress(position)

    # The child did not finish (an error in the text, or it died): parse here, from the start.
    for index, doc in enumerate(iter_documents(text, source=source, progress=onward)):
        if index >= given:
            yield doc


_JSON_START = re.compile(r"\s*[{\[]")


def _worth_it(text: str, min_chars: int) -> bool:
    if len(text) < min_chars or _JSON_START.match(text):  # JSON: parsed in C, fast
        return False
    if not hasattr(os, "fork") or not hasattr(os, "sched_getaffinity"):
        return False
    return len(os.sched_getaffinity(0)) >= 2


def _reap(pid: int) -> None:
    """The child ended (killed if it still runs: the caller stopped early or it was cut off)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):
        pass


def _parse_into(out: IO[bytes], text: str, source: str) -> None:
    """The child's work: every document in batches, then the end mark; an error in the text
    ends the stream without it (the parent parses again and reports it in its own words)."""
    position = 0

    def at(chars: int) -> None:
        nonlocal position
        position = chars

    batch: list[dict[str, Any]] = []
    try:
        for doc in iter_documents(text, source=source, progress=at):
            batch.append(doc)
            if len(batch) >= BATCH:
                _send(out, position, batch)
                batch = []
    except Exception:
        return
    if batch:
        _send(out, position, batch)
    out.write(_HEADER.pack(_END, 0))


def _send(out: IO[bytes], position: int, batch: list[dict[str, Any]]) -> None:
    try:
        kind, payload = _DOCS_MARSHAL, marshal.dumps((position, batch))
    except ValueError:  # a mapping that named a key twice (a dict subclass): only pickle keeps it
        kind, payload = _DOCS_PICKLE, pickle.dumps((position, batch), protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(kind, len(payload)))
    out.write(payload)


class _Batches:
    """The child's messages as (position, documents) from the pipe's read end; ``finished``
    once its end mark came. An unfinished or garbled stream just stops, and so does one that
    stays silent for ``SILENCE`` seconds (a child that hangs must not hang the load: the
    caller kills it and parses here)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.finished = False
        # poll, not select: a busy serve holds more than 1,024 descriptors, beyond select's reach.
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    def __iter__(self) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        while True:
            head = self._read(_HEADER.size)
            if head is None:
                return
            kind, size = _HEADER.unpack(head)
            payload = self._read(size)
            if payload is None:
                return
            if kind == _END:
                self.finished = True
                return
            try:
                if kind == _DOCS_MARSHAL:
                    position, batch = marshal.loads(payload)
                elif kind == _DOCS_PICKLE:
                    position, batch = pickle.loads(payload)
                else:
                    return
            except (EOFError, ValueError, TypeError, pickle.UnpicklingError):
                return
            yield position, batch

    def _read(self, size: int) -> bytes | None:
        """Exactly ``size`` bytes; None at the end of the stream or after ``SILENCE``."""
        chunks: list[bytes] = []
        left = size
        while left:
            if not self._poller.poll(SILENCE * 1000):
                return None
            chunk = os.read(self._fd, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        os.close(self._fd)
