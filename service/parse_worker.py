"""A large YAML inventory file parsed on two cores: this process and a worker process.

Parsing is most of loading a large single-file inventory, and one Python thread does it.
``iter_documents(..., parallel=start_part)`` hands the second part of the text (from a document
start, ``model.yaml_split_point``) to a worker (``python -m dra_solver.service.parse_worker``,
started afresh: forking a process that runs gRPC threads is not safe) and parses the first part
meanwhile. The worker gets its text in an unnamed temporary file and writes its plain documents
back pickled, a batch at a time, to another, unpickled here one batch at a time once the first
part is done. Only when a CPU is free (:func:`cpu_free`): on a busy machine the worker would
take the loading thread's CPU rather than an idle one. Anything amiss (the worker cannot
start, dies, or its part does not parse) and the caller parses the whole text itself, so the
objects and every error are those of a single parse.

Frames of the worker's output: an 8-byte big-endian length, then that many bytes. Each frame is
a pickled list of (document, characters read) pairs, the last one a pickled ``("end",
alias values)``, or ``("failed",)`` when the part did not parse.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import dra_solver
from dra_solver.model import DecodeLimits, StartPart, YamlCounts, parse_yaml_part

PARALLEL_MIN_CHARS = 16_000_000
"""Texts at least this large are parsed in two parts at once: the worker's start (about a
second of imports, on the other core) is then paid back."""
BATCH = 500
"""Documents per frame: large enough that framing costs nothing, small enough that the worker
holds few raw documents at once."""
_LENGTH = 8


class WorkerPart:
    """A part of a YAML text being parsed by a worker process (``model.PartParse``)."""

    def __init__(self, text: str, limits: DecodeLimits) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None
        root = str(Path(next(iter(dra_solver.__path__))).resolve().parent)  # this very code
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        limits_arg = json.dumps({"max_depth": limits.max_depth, "max_alias_values": limits.max_alias_values})
        # Unnamed temporary files, not pipes: a pipe moves 64 KiB at a time, and each time
        # the thread feeding or draining it would wait for the interpreter lock, which the
        # loading thread holds: the worker would mostly wait. The worker closes its input once
        # read, so the two files' space is never taken at once.
        try:
            self._out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by result() or close())
            with tempfile.TemporaryFile() as given:
                given.write(text.encode("utf-8", "surrogatepass"))
                given.seek(0)
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "dra_solver.service.parse_worker", limits_arg],
                    stdin=given, stdout=self._out, stderr=subprocess.DEVNULL, env=env,
                )
        except OSError:  # no worker: result() says so and the caller parses it all
            self._proc = None

    def result(self) -> tuple[int, Iterator[tuple[Any, int]]] | None:
        proc, self._proc = self._proc, None
        out = self._out
        if proc is None or out is None or proc.wait() != 0:
            return None
        out.seek(0)
        frames: list[bytes] = []
        while len(head := out.read(_LENGTH)) == _LENGTH:
            frames.append(out.read(int.from_bytes(head, "big")))
        out.close()
        try:
            end = pickle.loads(frames[-1]) if frames else None
        except Exception:  # a torn last frame: the worker died while writing it
            return None
        if not (isinstance(end, tuple) and len(end) == 2 and end[0] == "end" and isinstance(end[1], int)):
            return None
        return end[1], _documents(frames)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self._out is not None:
            self._out.close()


def _documents(frames: list[bytes]) -> Iterator[tuple[Any, int]]:
    for index in range(len(frames) - 1):
        batch, frames[index] = frames[index], b""  # each batch's bytes go once unpickled
        yield from pickle.loads(batch)


def start_part(text: str, limits: DecodeLimits) -> WorkerPart:
    """``model.StartPart``: the worker starts parsing ``text`` at once."""
    return WorkerPart(text, limits)


def parallel_for(text: str) -> StartPart | None:
    """``iter_documents``' ``parallel`` for ``text``: a worker when the text is large enough and
    a CPU is free for it (on a busy machine the worker would only take the loading thread's)."""
    return start_part if len(text) >= PARALLEL_MIN_CHARS and cpu_free() else None


CPU_PRESSURE_MAX = 10.0
"""Percent of the last ten seconds in which some task waited for a CPU (the kernel's pressure
stall information) above which no CPU counts as free."""


_PROC = Path("/proc")
_CGROUP = Path("/sys/fs/cgroup")


def cpu_free(*, proc: Path = _PROC, cgroup: Path = _CGROUP, cpus: int | None = None) -> bool:
    """Whether another CPU is free now: this process may use two (its affinity, ``cpus``, and
    its cgroup's quota), fewer tasks are running than there are CPUs, our own among them, and
    tasks have hardly had to wait for a CPU lately. Not the load average: it lags a minute
    behind."""
    usable = len(os.sched_getaffinity(0)) if cpus is None else cpus
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        if quota != "max" and int(quota) < 2 * int(period):
            return False
    except (OSError, ValueError):  # no cgroup v2 quota to read
        pass
    try:
        running = int((proc / "loadavg").read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        running = 1
    if usable < 2 or running > usable - 1:
        return False
    try:
        some = (proc / "pressure" / "cpu").read_text().splitlines()[0].split()
        return float(dict(f.split("=", 1) for f in some[1:])["avg10"]) < CPU_PRESSURE_MAX
    except (OSError, ValueError, IndexError, KeyError):  # no pressure information: the count it is
        return True


def _send(out: IO[bytes], value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(len(data).to_bytes(_LENGTH, "big"))
    out.write(data)


def main() -> int:
    """The worker: the part's text on stdin, frames on stdout."""
    gc.disable()  # every object made is kept until its batch is sent
    out = sys.stdout.buffer
    try:
        settings = json.loads(sys.argv[1])
        limits = DecodeLimits(max_depth=int(settings["max_depth"]), max_alias_values=int(settings["max_alias_values"]))
        text = sys.stdin.buffer.read().decode("utf-8", "surrogatepass")
        os.close(sys.stdin.fileno())  # its file's space is freed before the output takes some (sys.stdin.close() keeps the descriptor)
        counts = YamlCounts()
        batch: list[tuple[Any, int]] = []
        for item in parse_yaml_part(text, limits=limits, counts=counts):
            batch.append(item)
            if len(batch) >= BATCH:
                _send(out, batch)
                batch = []
        if batch:
            _send(out, batch)
        _send(out, ("end", counts.alias_values))
    except Exception:  # any problem: the other side parses the whole text for the exact error
        _send(out, ("failed",))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
