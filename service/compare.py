"""Side-by-side runs of the CP-SAT and the upstream-style backtracking allocator.

For each (scenario, node) both allocators get the same ``AllocationRequest``; a row records
both verdicts, whether they agree, the FirstAvailable score each reached, whether the chosen
devices differ, wall time, backtracking steps and CP-SAT status and model size. Timing is the
shell's business (the core never reads clocks), which is why this lives in ``service``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from model import objects as o
from model.allocate import allocate
from model.allocation import AllocationOutcome, AllocationRequest, AllocatorName, Inventory
from model.cel import CelEnvironment
from model.errors import AllocationError, DraSolverError, InvalidInput, SolveTimeout
from model.features import FeatureGates

Verdict = str  # "allocated" | "unsatisfiable" | "error" | "timeout"


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

    @property
    def agree(self) -> bool:
        return self.cpsat.verdict == self.backtracking.verdict

    @property
    def devices_differ(self) -> bool:
        return self.cpsat.devices != self.backtracking.devices

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "node": self.node,
            "devicesOnNode": self.devices_on_node,
            "agree": self.agree,
            "devicesDiffer": self.devices_differ,
            "scoreDelta": self.cpsat.score - self.backtracking.score,
            "cpsat": self.cpsat.to_json(),
            "backtracking": self.backtracking.to_json(),
        }


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
) -> SideResult:
    """Run one allocator and classify its answer; never raises for allocation problems."""
    start = clock()
    try:
        outcome = allocate(request, cel=cel)
    except SolveTimeout as err:
        stats = getattr(err, "stats", None)  # backtracking attaches how far it got
        steps = stats.steps if stats is not None else 0
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
) -> list[CompareRow]:
    """Rows for every requested node (default: every node the scenario knows)."""
    inventory = Inventory.from_objects(objects)
    pending = tuple(c for c in inventory.claims if not c.allocated)
    rows: list[CompareRow] = []
    for node_name in nodes or inventory.node_names():
        sides: dict[str, SideResult] = {}
        allocator: AllocatorName
        for allocator in ("cpsat", "backtracking"):
            request = AllocationRequest(
                claims=pending,
                node=inventory.node(node_name),
                inventory=inventory,
                gates=gates,
                allocator=allocator,
                time_limit=time_limit,
                policy=policy,
            )
            sides[allocator] = run_side(request, cel=cel)
        rows.append(
            CompareRow(name, node_name, devices_on_node(inventory, node_name), sides["cpsat"], sides["backtracking"])
        )
    return rows


def format_table(rows: Sequence[CompareRow]) -> str:
    """The terminal table: one line per (scenario, node)."""
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
