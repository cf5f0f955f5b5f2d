"""The comparison of two runs of one workload: figures side by side, and why pods differ.

For every pod placed differently (bound by one side only, another node, other devices, another
FirstAvailable subrequest) :func:`differences` gives a reason from a fixed vocabulary, so a
reader can tell policy from a bug:

- ``timeout``: the side left the pod pending without a verdict when the run ended;
- ``upstream deviation N``: the claim's input reaches one of README's "Where upstream
  deviates" items that upstream v0.37.2 still has (:mod:`service.deviations`);
- ``node choice``: kube-scheduler scores nodes (default plugins: least allocated first, ties
  broken at random) where dra-solver's policy picks (pack: the fullest node that fits);
- ``device choice``: on the same node, upstream takes the first devices in slice order that
  fit, dra-solver's policy picks (pack: the smallest device that fits, partitions on GPUs
  already in use);
- ``firstAvailable``: the two chose different subrequests (upstream's first fit per node vs
  our best score over the cluster);
- ``order``: both placed as many pods of this size, but not the same ones (each scheduler
  takes pending pods in its own order: kube-scheduler one at a time by queue order,
  dra-solver several at once);
- ``capacity``: one side found no room because of where earlier pods went (the sum of the
  choices above), the other did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_solver.service.compare import render_table
from dra_solver.service.deviations import BY_NUMBER, still_in_pinned_upstream
from dra_solver.service.schedcompare.runner import PodOutcome, SideResult
from dra_solver.service.schedcompare.workloads import Workload

UPSTREAM = "kube-scheduler"
OURS = "dra-solver"

NODE_CHOICE = ("node choice: kube-scheduler's default scoring (least allocated first, ties at random) "
               "vs dra-solver's policy (pack: fullest node that fits)")
DEVICE_CHOICE = ("device choice: upstream's first fit in slice order vs dra-solver's policy "
                 "(pack: smallest device that fits, partitions on GPUs already in use)")
FIRST_AVAILABLE = "firstAvailable: upstream's first fit on its node vs dra-solver's best score over the cluster"
TIMEOUT = "timeout: still pending without a verdict when the run ended"
ORDER = "order: both placed as many pods of this size, not the same ones"


@dataclass(frozen=True)
class Difference:
    pod: str
    kind: str
    """only-upstream, only-ours, node, devices, subrequest."""
    reason: str
    upstream: PodOutcome
    ours: PodOutcome

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "kind": self.kind, "reason": self.reason,
                "upstream": self.upstream.to_json(), "ours": self.ours.to_json()}


def _deviation_reason(workload: Workload) -> str:
    """A listed upstream deviation the workload's claims can reach (admin access, counters
    overdrawn by claims already allocated), or ""."""
    remaining = still_in_pinned_upstream()
    admin = any(
        (req.get("exactly") or {}).get("adminAccess")
        for obj in workload.namespaced if obj["kind"] == "ResourceClaimTemplate"
        for req in obj["spec"]["spec"]["devices"]["requests"]
    )
    for number in sorted(remaining):
        if admin and number in (5, 6):
            return BY_NUMBER[number].describe()
    return ""


def _pending_reason(pod: PodOutcome, side: str, deviation: str, same_count: bool) -> str:
    if not pod.unschedulable:
        return f"{side}: {TIMEOUT}"
    if deviation and side == UPSTREAM:
        return deviation
    if same_count:
        return ORDER
    return f"capacity: {side} found no room after its earlier choices ({pod.unschedulable.split('.')[0]})"


def differences(workload: Workload, upstream: SideResult, ours: SideResult) -> list[Difference]:
    """Every pod placed differently, with the reason (empty for churn workloads, where the
    same pod meets a different cluster on each side)."""
    if workload.churn is not None:
        return []
    deviation = _deviation_reason(workload)
    up_sizes, our_sizes = upstream.placed_by_size(), ours.placed_by_size()
    out: list[Difference] = []
    for name in sorted(upstream.pods):
        theirs, mine = upstream.pods[name], ours.pods.get(name)
        if mine is None:
            continue
        if theirs.bound_at is None and mine.bound_at is None:
            continue
        same_count = up_sizes.get(theirs.size) == our_sizes.get(theirs.size)
        if mine.bound_at is None:
            out.append(Difference(name, "only-upstream", _pending_reason(mine, OURS, deviation, same_count),
                                  theirs, mine))
        elif theirs.bound_at is None:
            out.append(Difference(name, "only-ours", _pending_reason(theirs, UPSTREAM, deviation, same_count),
                                  theirs, mine))
        elif theirs.node != mine.node:
            out.append(Difference(name, "node", NODE_CHOICE, theirs, mine))
        elif theirs.subrequests != mine.subrequests:
            out.append(Difference(name, "subrequest", FIRST_AVAILABLE, theirs, mine))
        elif theirs.devices != mine.devices:
            out.append(Difference(name, "devices", DEVICE_CHOICE, theirs, mine))
    return out


def reason_summary(diffs: Sequence[Difference]) -> dict[str, int]:
    """Reason class (the text before the first colon, with the side for pending pods) -> pods."""
    counts: Counter[str] = Counter()
    for d in diffs:
        head = d.reason.split(":", 1)[0]
        if d.kind in ("only-upstream", "only-ours"):
            head = f"{d.kind}: {d.reason.split(' (', 1)[0]}"
        counts[head] += 1
    return dict(sorted(counts.items()))


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 2) if theirs > 0 else None


@dataclass
class WorkloadComparison:
    workload: Workload
    sides: dict[str, SideResult]

    @property
    def diffs(self) -> list[Difference]:
        if UPSTREAM not in self.sides or OURS not in self.sides:
            return []
        return differences(self.workload, self.sides[UPSTREAM], self.sides[OURS])

    def to_json(self, *, pods: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "workload": self.workload.name, "description": self.workload.description,
            "nodes": len(self.workload.nodes), "pods": len(self.workload.pods),
            "sides": {k: v.to_json() for k, v in self.sides.items()},
        }
        if UPSTREAM in self.sides and OURS in self.sides:
            up, us = self.sides[UPSTREAM], self.sides[OURS]
            diffs = self.diffs
            doc["ratio"] = {"podsPerSecond": _ratio(us.pods_per_second, up.pods_per_second),
                            "bound": _ratio(us.bound, up.bound)}
            doc["differences"] = {"pods": len(diffs), "byReason": reason_summary(diffs)}
            if pods:
                doc["differences"]["details"] = [d.to_json() for d in diffs]
        return doc


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def format_table(comparisons: Sequence[WorkloadComparison]) -> str:
    body: list[list[str]] = []
    for c in comparisons:
        up = c.sides.get(UPSTREAM)
        for name, side in c.sides.items():
            ratio = ""
            if name == OURS and up is not None:
                r = _ratio(side.pods_per_second, up.pods_per_second)
                ratio = "-" if r is None else f"{r:.2f}x"
            sizes = " ".join(f"{k}:{v[0]}/{v[1]}" if v[1] else f"{k}:{v[0]}"
                             for k, v in side.placed_by_size().items())
            body.append([
                c.workload.name, name, str(len(side.pods)), str(side.bound) + (" (timeout)" if side.timed_out else ""),
                f"{side.pods_per_second:.1f}", ratio, _seconds(side.latency_quantile(0.5)),
                _seconds(side.latency_quantile(0.99)), sizes, str(len(side.double_allocated)),
            ])
    lines = [render_table(["WORKLOAD", "SCHEDULER", "PODS", "BOUND", "PODS/S", "RATIO", "BIND P50", "BIND P99",
                           "PLACED BY SIZE", "DEVICES TWICE"], body)]
    for c in comparisons:
        diffs = c.diffs
        if diffs:
            lines.append("")
            lines.append(f"{c.workload.name}: {len(diffs)} pod(s) placed differently")
            for reason, count in reason_summary(diffs).items():
                lines.append(f"  {count:>5}  {reason}")
    return "\n".join(lines)
