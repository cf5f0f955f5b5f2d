"""Side-by-side runs of the CP-SAT allocator, our backtracking port and, when it is built,
upstream's own Go allocator (``service.upstream``).

For each (scenario, node) every allocator gets the same ``AllocationRequest``; a row records
the verdicts, whether they agree, the FirstAvailable score each reached, whether the chosen
devices differ, wall time, search steps and CP-SAT status and model size. With upstream
present a row also says whether the port chose exactly upstream's devices, and why CP-SAT's
answer differs from upstream's (``why``: a timeout, a documented upstream deviation, a higher
FirstAvailable score, or CP-SAT's placement policy against upstream's first fit). Timing is the
shell's business (the core never reads clocks), which is why this lives in ``service``.
Upstream's time is measured by Go around ``Allocate`` alone.

Timing measures the work: before the timed runs on a node, each allocator runs once untimed
(``warm_allocators``), so imports, OR-Tools' one-time set-up, compiled selectors and the CEL
match cache are in place for both sides and the side that runs first is not penalised.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dra_solver.model import (
    AllocationError,
    AllocationOutcome,
    AllocationRequest,
    AllocatorName,
    CelEnvironment,
    DraSolverError,
    FeatureGates,
    InvalidInput,
    InvalidInputs,
    Inventory,
    SolveTimeout,
    allocate,
    warm_up,
)
from dra_solver.model import objects as o
from dra_solver.service import deviations
from dra_solver.service.upstream import (
    UpstreamAllocator,
    UpstreamFailed,
    outcome_from_answer,
    request_document,
    validate_request,
)

Verdict = str  # "allocated" | "unsatisfiable" | "error" | "timeout"

WARM_UP_SECONDS = 0.05
"""Time limit of the untimed run each allocator gets on a node before it is timed."""


@dataclass(frozen=True, slots=True)
class SideResult:
    """One allocator's answer to one (scenario, node)."""

    allocator: str
    verdict: Verdict
    score: int = 0
    seconds: float = 0.0
    steps: int = 0
    status: str = ""
    variables: int = 0
    constraints: int = 0
    devices: tuple[str, ...] = ()
    """``claim/request=driver/pool/device`` per allocated device, sorted."""
    message: str = ""
    outcome: AllocationOutcome | None = field(default=None, compare=False, repr=False)
    warmup: bool = field(default=False, compare=False)
    """The measurement paid for one-time start-up work (imports, first model of the process):
    the report leaves it out of the time plot and says so."""

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "score": self.score,
            "seconds": self.seconds,
            "steps": self.steps,
            "status": self.status,
            "variables": self.variables,
            "constraints": self.constraints,
            "devices": list(self.devices),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class CompareRow:
    scenario: str
    node: str
    devices_on_node: int
    cpsat: SideResult
    backtracking: SideResult
    upstream: SideResult | None = None
    why: str = ""
    """With upstream: why CP-SAT's answer differs from upstream's ("" when it does not)."""
    why_port: str = ""
    """With upstream: why the backtracking port's answer differs from upstream's ("" when not)."""

    @property
    def agree(self) -> bool:
        """Every allocator that ran reached the same verdict."""
        verdicts = {self.cpsat.verdict, self.backtracking.verdict}
        if self.upstream is not None:
            verdicts.add(self.upstream.verdict)
        return len(verdicts) == 1

    @property
    def devices_differ(self) -> bool:
        return self.cpsat.devices != self.backtracking.devices

    @property
    def port_matches_upstream(self) -> bool | None:
        """The backtracking port gave upstream's verdict and devices (None without upstream)."""
        if self.upstream is None:
            return None
        return (self.backtracking.verdict, self.backtracking.devices) == (self.upstream.verdict, self.upstream.devices)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "scenario": self.scenario,
            "node": self.node,
            "devicesOnNode": self.devices_on_node,
            "agree": self.agree,
            "devicesDiffer": self.devices_differ,
            "scoreDelta": self.cpsat.score - self.backtracking.score,
            "cpsat": self.cpsat.to_json(),
            "backtracking": self.backtracking.to_json(),
        }
        if self.upstream is not None:
            doc["upstream"] = self.upstream.to_json()
            doc["backtrackingMatchesUpstream"] = self.port_matches_upstream
            doc["why"] = self.why
            doc["whyBacktrackingDiffers"] = self.why_port
        return doc


def chosen_devices(claims: Sequence[o.ResourceClaim], outcome: AllocationOutcome) -> tuple[str, ...]:
    out: list[str] = []
    for claim, result in zip(claims, outcome.results, strict=False):
        for r in (result.devices.results or []) if result.devices else []:
            out.append(f"{claim.ref}/{r.request}={r.driver}/{r.pool}/{r.device}")
    return tuple(sorted(out))


def run_side(
    request: AllocationRequest,
    *,
    cel: CelEnvironment,
    clock: Callable[[], float] = time.perf_counter,
    validate: bool = True,
) -> SideResult:
    """Run one allocator and classify its answer; never raises for allocation problems."""
    start = clock()
    try:
        outcome = allocate(request, cel=cel, validate=validate)
    except SolveTimeout as err:
        steps = err.stats.steps if err.stats is not None else 0  # backtracking: how far it got
        return SideResult(request.allocator, "timeout", seconds=clock() - start, steps=steps, message=str(err))
    except (AllocationError, InvalidInput) as err:
        return SideResult(request.allocator, "error", seconds=clock() - start, message=str(err))
    except DraSolverError as err:
        return SideResult(request.allocator, "error", seconds=clock() - start, message=str(err))
    seconds = clock() - start
    stats = outcome.stats
    return SideResult(
        allocator=request.allocator,
        verdict="allocated" if outcome.allocated else "unsatisfiable",
        score=outcome.score,
        seconds=seconds,
        steps=stats.steps,
        status=stats.status,
        variables=stats.variables,
        constraints=stats.constraints,
        devices=chosen_devices(request.claims, outcome) if outcome.allocated else (),
        message=outcome.reason,
        outcome=outcome,
    )


def warm_allocators(request: AllocationRequest, *, cel: CelEnvironment, validate: bool = True) -> None:
    """Run each allocator once, untimed and briefly, on ``request`` (see the module docstring)."""
    warm_up()
    limit = min(request.time_limit or WARM_UP_SECONDS, WARM_UP_SECONDS)
    allocator: AllocatorName
    for allocator in ("cpsat", "backtracking"):
        with contextlib.suppress(DraSolverError):
            allocate(replace(request, allocator=allocator, time_limit=limit), cel=cel, validate=validate)


def run_upstream_side(request: AllocationRequest, runner: UpstreamAllocator, *, validate: bool = True) -> SideResult:
    """Upstream's Go allocator on the same request, classified like ``run_side``.

    The input gets the same API validation first (upstream's allocator validates nothing);
    ``seconds`` is Go's own measurement around ``Allocate``, ``status`` the tier it used.
    """
    try:
        if validate:
            validate_request(request)
        answer = runner.run(request_document(request))
    except (InvalidInput, InvalidInputs, UpstreamFailed) as err:
        return SideResult("upstream", "error", message=str(err))
    if answer.verdict in ("error", "timeout"):
        return SideResult("upstream", answer.verdict, seconds=answer.elapsed_seconds,
                          steps=answer.steps or 0, status=answer.tier, message=answer.error)
    try:
        outcome = outcome_from_answer(request, answer)
    except UpstreamFailed as err:
        return SideResult("upstream", "error", message=str(err))
    return SideResult(
        allocator="upstream",
        verdict=answer.verdict,
        score=outcome.score,
        seconds=answer.elapsed_seconds,
        steps=answer.steps or 0,
        status=answer.tier,
        devices=chosen_devices(request.claims, outcome) if outcome.allocated else (),
        message=outcome.reason,
        outcome=outcome,
    )


def why_different(request: AllocationRequest, cpsat: SideResult, upstream: SideResult, policy: str) -> str:
    """Why CP-SAT's answer is not upstream's, in a few words ("" when it is the same)."""
    if (cpsat.verdict, cpsat.devices) == (upstream.verdict, upstream.devices):
        return ""
    if "timeout" in (cpsat.verdict, upstream.verdict):
        who = "CP-SAT" if cpsat.verdict == "timeout" else "upstream"
        return f"timeout ({who})"
    if cpsat.verdict != upstream.verdict or cpsat.score < upstream.score:
        found = deviations.explain(request, ours=cpsat.verdict, theirs=upstream.verdict, our_score=cpsat.score,
                                   their_score=upstream.score, numbers=deviations.still_in_pinned_upstream())
        if found:
            return "; ".join(d.describe() for d in found)
        return f"unexplained: CP-SAT {cpsat.verdict}, upstream {upstream.verdict}"
    if cpsat.score > upstream.score:
        return f"higher FirstAvailable score ({cpsat.score} vs {upstream.score})"
    return f"placement policy {policy or 'pack'} vs upstream's first fit"


def why_port_differs(port: SideResult, upstream: SideResult) -> str:
    """Why our port's answer is not upstream's ("" when it is). The port follows the pinned
    upstream, so anything but a timeout is a bug and is reported as unexplained."""
    if (port.verdict, port.devices) == (upstream.verdict, upstream.devices):
        return ""
    if "timeout" in (port.verdict, upstream.verdict):
        return "timeout (backtracking)" if port.verdict == "timeout" else "timeout (upstream)"
    return f"unexplained: backtracking {port.verdict}, upstream {upstream.verdict}"


def devices_on_node(inventory: Inventory, node: str) -> int:
    """Devices published for ``node`` by node-local slices (a size measure for plots)."""
    count = 0
    for s in inventory.slices:
        if s.spec.node_name == node or s.spec.all_nodes:
            count += len(s.spec.devices or [])
        elif s.spec.per_device_node_selection:
            count += sum(1 for d in s.spec.devices or [] if d.node_name == node or d.all_nodes)
    return count


def compare_scenario(
    name: str,
    objects: Iterable[o.TypedObject],
    *,
    nodes: Sequence[str] | None,
    gates: FeatureGates,
    time_limit: float,
    cel: CelEnvironment,
    policy: str = "",
    validate: bool = True,
    upstream: UpstreamAllocator | None = None,
) -> list[CompareRow]:
    """Rows for every requested node (default: every node the scenario knows); with
    ``upstream``, a third side from upstream's Go allocator."""
    inventory = Inventory.from_objects(objects)
    pending = tuple(c for c in inventory.claims if not c.allocated)
    rows: list[CompareRow] = []
    for node_name in nodes or inventory.node_names():
        sides: dict[str, SideResult] = {}
        request = AllocationRequest(
            claims=pending,
            node=inventory.node(node_name),
            inventory=inventory,
            gates=gates,
            time_limit=time_limit,
            policy=policy,
        )
        warm_allocators(request, cel=cel, validate=validate)
        allocator: AllocatorName
        for allocator in ("cpsat", "backtracking"):
            request = replace(request, allocator=allocator)
            sides[allocator] = run_side(request, cel=cel, validate=validate)
        up_side = None
        why = why_port = ""
        if upstream is not None:
            up_side = run_upstream_side(request, upstream, validate=validate)
            why = why_different(request, sides["cpsat"], up_side, policy)
            why_port = why_port_differs(sides["backtracking"], up_side)
        rows.append(
            CompareRow(name, node_name, devices_on_node(inventory, node_name), sides["cpsat"], sides["backtracking"],
                       up_side, why, why_port)
        )
    return rows


def format_table(rows: Sequence[CompareRow]) -> str:
    """The terminal table: one line per (scenario, node); upstream's columns when it ran."""
    if any(r.upstream is not None for r in rows):
        return _format_with_upstream(rows)
    header = (
        "SCENARIO", "NODE", "CPSAT", "BACKTRACKING", "AGREE", "SCORE(CP/BT)",
        "DEVICES", "CP-SAT TIME", "BT TIME", "BT STEPS", "CP-SAT STATUS", "MODEL(VARS/CONS)",
    )
    body = [
        (
            r.scenario,
            r.node,
            r.cpsat.verdict,
            r.backtracking.verdict,
            "yes" if r.agree else "NO",
            f"{r.cpsat.score}/{r.backtracking.score}",
            "differ" if r.devices_differ else "same",
            _fmt_seconds(r.cpsat.seconds),
            _fmt_seconds(r.backtracking.seconds),
            str(r.backtracking.steps),
            r.cpsat.status or "-",
            f"{r.cpsat.variables}/{r.cpsat.constraints}",
        )
        for r in rows
    ]
    return render_table(header, body)


def _format_with_upstream(rows: Sequence[CompareRow]) -> str:
    header = (
        "SCENARIO", "NODE", "CPSAT", "BACKTRACKING", "UPSTREAM", "AGREE", "SCORE(CP/BT/UP)",
        "DEVICES(CP/BT)", "BT=UP", "CP-SAT TIME", "BT TIME", "UP TIME", "BT STEPS", "UP STEPS",
        "CP-SAT STATUS", "WHY CP-SAT DIFFERS FROM UPSTREAM",
    )
    body = []
    for r in rows:
        up = r.upstream
        body.append((
            r.scenario,
            r.node,
            r.cpsat.verdict,
            r.backtracking.verdict,
            up.verdict if up else "-",
            "yes" if r.agree else "NO",
            f"{r.cpsat.score}/{r.backtracking.score}/{up.score if up else '-'}",
            "differ" if r.devices_differ else "same",
            "-" if up is None else ("yes" if r.port_matches_upstream else "NO"),
            _fmt_seconds(r.cpsat.seconds),
            _fmt_seconds(r.backtracking.seconds),
            _fmt_seconds(up.seconds) if up else "-",
            str(r.backtracking.steps),
            str(up.steps) if up else "-",
            r.cpsat.status or "-",
            r.why or "-",
        ))
    return render_table(header, body)


def render_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=False)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=False)).rstrip() for row in [header, *body]]
    return "\n".join(lines)


def _fmt_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f}ms"
    return f"{seconds:.2f}s"
