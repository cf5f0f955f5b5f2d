"""Upstream's own Go allocator as a third allocator: ``--allocator upstream`` and ``compare``.

``tools/upstream-allocator`` wraps ``structured.NewAllocator(...).Allocate(...)`` of
k8s.io/dynamic-resource-allocation at the pinned version (``tools/upstream-versions.env``)
behind a JSON-lines protocol (its package comment is the contract); ``scripts/build-upstream.sh
upstream-allocator`` builds it into the same cache as the control-plane binaries. This module
finds that binary, turns an ``AllocationRequest`` into the wrapper's request, runs it in a
subprocess with a bounded time, and reads the answer back into the core's types.

API:
- ``binary(*, build=False) -> Path``: the wrapper; ``UpstreamNotBuilt`` (a one-line message
  saying how to build it) when it is not there. ``build=True`` runs the build script first.
- ``request_document(request) -> dict``: the wrapper's JSON request for an ``AllocationRequest``.
- ``UpstreamAllocator``: one long-lived wrapper process; ``run(document)`` answers one request,
  ``run_many(documents)`` a batch; a context manager.
- ``UpstreamAnswer``: verdict, results (Go's JSON and decoded), error text, elapsed seconds
  measured by Go around ``Allocate`` only, tier, allocateOne steps.
- ``allocate_upstream(request, *, allocator=None, validate=True) -> AllocationOutcome``: the
  same contract as ``model.allocate`` (API validation first, then raises
  ``AllocationError`` / ``SolveTimeout`` as the other allocators do).

Why a subprocess and not a shared library: the wrapper stays a plain ``go build`` of upstream's
module, with nothing of ours linked into it, and a crash or hang there cannot take the caller
down; one process serves many requests, so tests and benchmarks do not pay a start per case.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from dra_solver.model import (
    AllocationError,
    AllocationOutcome,
    AllocationRequest,
    DraSolverError,
    NodeLocalError,
    SolveStats,
    SolveTimeout,
    first_available_score,
    validate_objects,
)
from dra_solver.model import objects as o

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-upstream.sh"
VERSIONS_FILE = REPO_ROOT / "tools" / "upstream-versions.env"
BINARY_NAME = "upstream-allocator"
DEFAULT_KUBERNETES_VERSION = "v1.37.2"
BUILD_HINT = "run scripts/build-upstream.sh upstream-allocator (needs Go 1.26 or newer)"

GRACE_SECONDS = 10.0
"""How long past the request's own deadline the wrapper may take to answer before it is
killed (process start, decoding, CEL compilation happen outside the deadline upstream honours)."""

NO_DEADLINE_SECONDS = 600.0
"""Bound on one answer when the request itself has no time limit."""


class UpstreamNotBuilt(DraSolverError):
    """The wrapper binary is not there; the message says how to build it."""


class UpstreamFailed(DraSolverError):
    """The wrapper process died, hung or answered something unreadable."""


def kubernetes_version() -> str:
    """The pinned Kubernetes version (``tools/upstream-versions.env``), which names the cache."""
    try:
        text = VERSIONS_FILE.read_text(encoding="utf-8")
    except OSError:
        return DEFAULT_KUBERNETES_VERSION
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "KUBERNETES_VERSION":
            return value.strip()
    return DEFAULT_KUBERNETES_VERSION


def binary_dir() -> Path:
    """Where the build script puts binaries (``DRA_SOLVER_K8S_BIN`` overrides it)."""
    ready = os.environ.get("DRA_SOLVER_K8S_BIN")
    if ready:
        return Path(ready)
    cache = os.environ.get("DRA_SOLVER_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dra-solver"
    )
    return Path(cache) / f"k8s-{kubernetes_version()}" / "bin"


def binary(*, build: bool = False) -> Path:
    """The wrapper binary; with ``build`` the build script runs first (fast when up to date)."""
    directory = binary_dir()
    if build and not os.environ.get("DRA_SOLVER_K8S_BIN"):
        if not BUILD_SCRIPT.is_file():
            raise UpstreamNotBuilt(f"{BUILD_SCRIPT} not found: set DRA_SOLVER_K8S_BIN to a directory holding {BINARY_NAME}")
        proc = subprocess.run(
            [str(BUILD_SCRIPT), "--print-dir", BINARY_NAME],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UpstreamNotBuilt(f"building the upstream allocator failed (exit {proc.returncode}): {last}")
        printed = proc.stdout.strip().splitlines()
        if printed:
            directory = Path(printed[-1])
    path = directory / BINARY_NAME
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UpstreamNotBuilt(f"the upstream allocator is not built ({path} is missing): {BUILD_HINT}")
    return path


# --- requests ---------------------------------------------------------------------------------


def request_document(request: AllocationRequest, *, request_id: str = "") -> dict[str, Any]:
    """The wrapper's request: objects in their API JSON, in-use state, gates, deadline.

    Claims with ``status.allocation`` in the inventory are sent as allocated claims, so the Go
    side gathers in-use devices, shares and consumed capacity the way the scheduler's claim
    tracker does; ``extra_allocated`` travels as device IDs.
    """
    inventory = request.inventory
    extra = inventory.extra_allocated
    doc: dict[str, Any] = {
        "node": request.node.to_api(),
        "classes": [c.to_api() for c in inventory.classes],
        "slices": [s.to_api() for s in inventory.slices],
        "taintRules": [r.to_api() for r in inventory.taint_rules],
        "claims": [c.to_api() for c in request.claims],
        "allocatedClaims": [c.to_api() for c in inventory.claims if c.allocated],
        "allocatedDevices": [
            {"driver": d.driver, "pool": d.pool, "device": d.device} for d in sorted(extra.devices)
        ],
        "allocatedSharedDevices": [
            {"driver": d.driver, "pool": d.pool, "device": d.device, "shareID": share}
            for d, share in sorted(extra.shared)
        ],
        "allocatedCapacity": [
            {"driver": d.driver, "pool": d.pool, "device": d.device,
             "capacity": {name: str(amount) for name, amount in sorted(amounts.items())}}
            for d, amounts in sorted(extra.capacity.items())
        ],
        "features": request.gates.to_mapping(),
        "timeoutSeconds": request.time_limit or 0,
    }
    if request_id:
        doc["id"] = request_id
    return doc


# --- answers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamAnswer:
    verdict: str
    """allocated | unsatisfiable | error | timeout"""
    raw_results: tuple[dict[str, Any], ...] = ()
    """AllocationResults exactly as Go marshalled them, one per claim."""
    error: str = ""
    node_local: bool = False
    """The error wraps ErrFailedAllocationOnNode: the scheduler tries other nodes."""
    elapsed_seconds: float = 0.0
    """Time inside ``Allocate`` only, measured by Go."""
    tier: str = ""
    """stable | incubating | experimental: the implementation NewAllocator picked."""
    steps: int | None = None
    """allocateOne invocations (upstream's own search-step counter)."""
    request_id: str = ""
    results: tuple[o.AllocationResult, ...] = field(default=(), compare=False)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> UpstreamAnswer:
        verdict = str(doc.get("verdict") or "")
        if verdict not in ("allocated", "unsatisfiable", "error", "timeout"):
            raise UpstreamFailed(f"the upstream allocator answered an unknown verdict {verdict!r}")
        raw = tuple(doc.get("results") or ())
        steps = doc.get("steps")
        return cls(
            verdict=verdict,
            raw_results=raw,
            error=str(doc.get("error") or ""),
            node_local=bool(doc.get("nodeLocal")),
            elapsed_seconds=float(doc.get("elapsedSeconds") or 0.0),
            tier=str(doc.get("tier") or ""),
            steps=int(steps) if steps is not None else None,
            request_id=str(doc.get("id") or ""),
            results=tuple(o.AllocationResult.model_validate(r) for r in raw),
        )


class UpstreamAllocator:
    """One wrapper process serving requests in order; close it (or use ``with``) when done."""

    def __init__(self, path: Path | None = None, *, grace_seconds: float = GRACE_SECONDS) -> None:
        self.path = path or binary()
        self.grace_seconds = grace_seconds
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def __enter__(self) -> UpstreamAllocator:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._buffer = b""
            self._proc = subprocess.Popen(
                [str(self.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )
        return self._proc

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):  # unflushed input to a dead process
                        pipe.close()

    def run(self, document: dict[str, Any]) -> UpstreamAnswer:
        """Send one request and wait for its answer, at most its deadline plus a grace period."""
        limit = float(document.get("timeoutSeconds") or 0)
        budget = (limit + self.grace_seconds) if limit > 0 else NO_DEADLINE_SECONDS
        proc = self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(document, separators=(",", ":")).encode() + b"\n")
            proc.stdin.flush()
        except OSError as err:
            code = proc.poll()
            self._kill()
            status = f" (it exited with status {code})" if code is not None else ""
            raise UpstreamFailed(f"the upstream allocator stopped reading requests{status}: {err}") from err
        line = self._read_line(budget)
        try:
            doc = json.loads(line)
        except ValueError as err:
            self._kill()
            raise UpstreamFailed(f"the upstream allocator answered something that is not JSON: {line[:200]!r}") from err
        return UpstreamAnswer.from_json(doc)

    def run_many(self, documents: Iterable[dict[str, Any]]) -> list[UpstreamAnswer]:
        return [self.run(doc) for doc in documents]

    def _read_line(self, budget: float) -> bytes:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + budget
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self._kill()
                    raise UpstreamFailed(f"the upstream allocator gave no answer within {budget:.0f}s and was stopped")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = proc.wait()
                    self._proc = None
                    raise UpstreamFailed(f"the upstream allocator exited (status {code}) without an answer")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line


# --- the core's contract ----------------------------------------------------------------------


def outcome_from_answer(request: AllocationRequest, answer: UpstreamAnswer) -> AllocationOutcome:
    """``AllocationOutcome`` for an answer, raising as the other allocators do."""
    if answer.verdict == "timeout":
        raise SolveTimeout(f"upstream allocator: {answer.error}")
    if answer.verdict == "error":
        raise (NodeLocalError if answer.node_local else AllocationError)(answer.error)
    stats = SolveStats(
        allocator="upstream",
        status=answer.tier,
        wall_seconds=answer.elapsed_seconds,
        steps=answer.steps or 0,
    )
    if answer.verdict == "unsatisfiable":
        return AllocationOutcome(False, (), 0, stats, reason="cannot allocate all claims")
    results = answer.results
    if len(results) != len(request.claims):
        raise UpstreamFailed(f"the upstream allocator returned {len(results)} results for {len(request.claims)} claims")
    return AllocationOutcome(True, results, first_available_score(request.claims, results), stats)


def validate_request(request: AllocationRequest) -> None:
    """API-server validation of what the attempt reads, as ``model.allocate`` does for the other
    allocators: upstream's allocator validates nothing, and objects a cluster could never hold
    must fail the same way whichever allocator a caller picked."""
    inventory = request.inventory
    validate_objects(
        [*request.claims, *inventory.classes, *inventory.slices, *inventory.taint_rules, request.node]
    )


def allocate_upstream(
    request: AllocationRequest, *, allocator: UpstreamAllocator | None = None, validate: bool = True
) -> AllocationOutcome:
    """Allocate with upstream's Go allocator (``model.allocate``'s contract; see the module doc)."""
    if validate:
        validate_request(request)
    document = request_document(request)
    if allocator is not None:
        return outcome_from_answer(request, allocator.run(document))
    with UpstreamAllocator() as own:
        return outcome_from_answer(request, own.run(document))


def answers_for(documents: Sequence[dict[str, Any]], *, path: Path | None = None) -> list[UpstreamAnswer]:
    """A whole batch through one process."""
    with UpstreamAllocator(path) as allocator:
        return allocator.run_many(documents)
