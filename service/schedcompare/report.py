"""The comparison of two runs of one workload: figures side by side, and why pods differ.

For every pod placed differently (bound by one side only, on another node, with other devices
or another FirstAvailable subrequest) :func:`differences` names a reason and the evidence for
it, checked per pod on each side's timeline (:mod:`.evidence`: what the side's claims held when
it placed the pod, and whether the other side's choice would have fitted there):

- ``firstAvailable``: the sides used different subrequests; one side's preferred one was still
  free somewhere (or on its own node) when the other took a later one;
- ``node choice``: different nodes, and at least one side could have used the other's node
  when it placed the pod (kube-scheduler's scoring, least allocated first with ties at random,
  against dra-solver's policy, pack: the fullest node that fits);
- ``device choice``: same node and subrequests, other devices, and the other side's devices
  were free too (upstream's first fit in slice order against pack's smallest device that
  fits, partitions on GPUs already in use);
- ``capacity``: the other side's node, devices or subrequest had no room on this side by then
  (its earlier pods went elsewhere), or a pod one side left pending fitted on no node of that
  side at the end;
- ``order``: as capacity, and both sides placed as many pods of this size: the schedulers took
  pending pods in different orders (kube-scheduler one at a time, dra-solver several at once);
- ``upstream deviation N (...)``: kube-scheduler left the pod pending and the pod's claim, on
  the node dra-solver used with kube-scheduler's devices in use, reaches one of README's
  "Where upstream deviates" items v0.37.2 still has (:mod:`service.deviations`);
- ``timeout``: the side left the pod pending without a verdict when the run ended;
- ``pending with room``: the side gave the pod an Unschedulable verdict, yet a node had room
  for it when the run ended (a scheduler bug, or a retry that had not come yet).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_solver.model import AllocatedState, AllocationRequest, Inventory
from dra_solver.service import deviations
from dra_solver.service.compare import render_table
from dra_solver.service.schedcompare import split
from dra_solver.service.schedcompare.evidence import Probe, Timeline
from dra_solver.service.schedcompare.runner import PodOutcome, SideResult
from dra_solver.service.schedcompare.workloads import Workload

UPSTREAM = "kube-scheduler"
OURS = "dra-solver"

FIRST_AVAILABLE = "firstAvailable"
NODE_CHOICE = "node choice"
DEVICE_CHOICE = "device choice"
CAPACITY = "capacity"
ORDER = "order"
TIMEOUT = "timeout"
PENDING_WITH_ROOM = "pending with room"
REASONS = (FIRST_AVAILABLE, NODE_CHOICE, DEVICE_CHOICE, CAPACITY, ORDER, TIMEOUT, PENDING_WITH_ROOM)
"""Every reason but ``upstream deviation N (...)``."""


@dataclass(frozen=True)
class Difference:
    pod: str
    kind: str
    """only-upstream, only-ours, node, devices, subrequest."""
    reason: str
    """One of :data:`REASONS` or ``upstream deviation N (title)``."""
    evidence: str
    """What was checked for this pod, in a sentence."""
    upstream: PodOutcome
    ours: PodOutcome

    def to_json(self) -> dict[str, Any]:
        return {"pod": self.pod, "kind": self.kind, "reason": self.reason, "evidence": self.evidence,
                "upstream": self.upstream.to_json(), "ours": self.ours.to_json()}


def _subs(pod: PodOutcome) -> str:
    return "+".join(sorted({s.partition("/")[2] or s for s in pod.subrequests})) or "-"


def _short(devices: Sequence[str]) -> str:
    return ",".join(d.rsplit("/", 1)[-1] for d in devices)


class _Explainer:
    def __init__(self, workload: Workload, upstream: SideResult, ours: SideResult) -> None:
        self.probe = Probe(workload)
        self.workload = workload
        self.sides = {UPSTREAM: upstream, OURS: ours}
        self.timelines = {k: Timeline(v, workload, self.probe.node_of_pool) for k, v in self.sides.items()}
        self.counts = {k: v.placed_by_size() for k, v in self.sides.items()}

    def fits_other(self, side: str, pod: PodOutcome, other: PodOutcome, *, node: str = "",
                   only: tuple[str, ...] = ()) -> bool:
        """Whether ``other``'s choice (its node or ``node``, its subrequests, ``only`` devices)
        had room on ``side`` when ``side`` placed ``pod``."""
        where = node or other.node
        held = self.timelines[side].held(where, pod.placed_at, but=pod.name)
        return self.probe.fits(pod.name, where, held, subrequests=other.subrequests, only=only)

    def both_bound(self, name: str, up: PodOutcome, us: PodOutcome) -> Difference | None:
        pods = {UPSTREAM: up, OURS: us}
        if up.subrequests != us.subrequests:
            rank = {k: self.probe.subrequest_rank(name, p.subrequests) for k, p in pods.items()}
            worse = UPSTREAM if rank[UPSTREAM] > rank[OURS] else OURS
            better = OURS if worse == UPSTREAM else UPSTREAM
            w, b = pods[worse], pods[better]
            taken = f"{worse} took {_subs(w)} on {w.node}, {better} {_subs(b)} on {b.node}"
            if self.fits_other(worse, w, b, node=w.node):
                return Difference(name, "subrequest", FIRST_AVAILABLE, evidence=(
                    f"{taken}; {_subs(b)} was still free on {w.node} on {worse}'s side"), upstream=up, ours=us)
            room = self.probe.room_anywhere(name, self.timelines[worse], w.placed_at, subrequests=b.subrequests)
            if room:
                return Difference(name, "subrequest", FIRST_AVAILABLE, evidence=(
                    f"{taken}; {w.node} had no {_subs(b)} left on {worse}'s side, {room} had"), upstream=up, ours=us)
            return Difference(name, "subrequest", CAPACITY, evidence=(
                f"{taken}; no node had {_subs(b)} left on {worse}'s side by then"), upstream=up, ours=us)
        if up.node != us.node:
            ours_could = self.fits_other(OURS, us, up)
            theirs_could = self.fits_other(UPSTREAM, up, us)
            chose = f"kube-scheduler chose {up.node}, dra-solver {us.node}"
            if ours_could and theirs_could:
                why = "each node had room for it on both sides when it was placed"
            elif ours_could:
                why = f"{up.node} had room on dra-solver's side too; {us.node} was full on kube-scheduler's side"
            elif theirs_could:
                why = f"{us.node} had room on kube-scheduler's side too; {up.node} was full on dra-solver's side"
            else:
                return Difference(name, "node", CAPACITY, evidence=(
                    f"{chose}; neither node had room for it on the other side by then"), upstream=up, ours=us)
            return Difference(name, "node", NODE_CHOICE, evidence=f"{chose}; {why}", upstream=up, ours=us)
        if up.devices != us.devices:
            ours_could = self.fits_other(OURS, us, up, only=up.devices)
            theirs_could = self.fits_other(UPSTREAM, up, us, only=us.devices)
            took = f"on {up.node} kube-scheduler took {_short(up.devices)}, dra-solver {_short(us.devices)}"
            if not (ours_could or theirs_could):
                return Difference(name, "devices", CAPACITY, evidence=(
                    f"{took}; each side's devices were in use on the other side by then"), upstream=up, ours=us)
            free = [f"{_short(up.devices)} on dra-solver's side"] if ours_could else []
            free += [f"{_short(us.devices)} on kube-scheduler's side"] if theirs_could else []
            return Difference(name, "devices", DEVICE_CHOICE, evidence=f"{took}; free too: {', '.join(free)}",
                              upstream=up, ours=us)
        return None

    def one_bound(self, name: str, up: PodOutcome, us: PodOutcome) -> Difference:
        pending_side = OURS if up.bound_at is not None else UPSTREAM
        bound_side = UPSTREAM if pending_side == OURS else OURS
        kind = "only-upstream" if pending_side == OURS else "only-ours"
        pending, bound = (us, up) if pending_side == OURS else (up, us)
        placed = f"{bound_side} placed it on {bound.node}"
        if not pending.unschedulable:
            return Difference(name, kind, TIMEOUT, evidence=(
                f"{placed}; {pending_side} left it pending without a verdict when the run ended"), upstream=up, ours=us)
        timeline = self.timelines[pending_side]
        if pending_side == UPSTREAM:
            deviation = self._deviation(name, bound, timeline)
            if deviation:
                return Difference(name, kind, deviation, evidence=(
                    f"{placed}; on {bound.node} with kube-scheduler's devices in use its claim reaches it"),
                    upstream=up, ours=us)
        room = self.probe.room_anywhere(name, timeline, None)
        if room:
            return Difference(name, kind, PENDING_WITH_ROOM, evidence=(
                f"{placed}; {pending_side} found it unschedulable, yet {room} had room for it at the end"),
                upstream=up, ours=us)
        size = pending.size
        same = self.counts[UPSTREAM].get(size) == self.counts[OURS].get(size)
        return Difference(name, kind, ORDER if same else CAPACITY, evidence=(
            f"{placed}; no node had room for it on {pending_side}'s side at the end"
            + (f" (both placed {self.counts[OURS][size][0]} {size} pods)" if same else "")), upstream=up, ours=us)

    def _deviation(self, name: str, bound: PodOutcome, timeline: Timeline) -> str:
        """A README deviation upstream v0.37.2 still has that the pod's claim reaches on
        ``bound.node`` with upstream's devices in use (ours allocated it, upstream did not)."""
        probe = self.probe
        decoded = probe.node(bound.node)
        if decoded is None:
            return ""
        node, slices = decoded
        request = AllocationRequest(
            claims=(probe.claim(name),), node=node,
            inventory=Inventory(classes=probe.classes, slices=tuple(slices), nodes=(node,),
                                extra_allocated=AllocatedState(devices=timeline.held(bound.node, None, but=name))),
        )
        found = deviations.explain(request, ours="allocated", theirs="unsatisfiable",
                                   numbers=deviations.still_in_pinned_upstream())
        return found[0].describe() if found else ""


def differences(workload: Workload, upstream: SideResult, ours: SideResult) -> list[Difference]:
    """Every pod placed differently, with its reason and the evidence for it."""
    explainer = _Explainer(workload, upstream, ours)
    out: list[Difference] = []
    for name in sorted(upstream.pods):
        theirs, mine = upstream.pods[name], ours.pods.get(name)
        if mine is None or (theirs.bound_at is None and mine.bound_at is None):
            continue
        if theirs.bound_at is None or mine.bound_at is None:
            out.append(explainer.one_bound(name, theirs, mine))
        else:
            diff = explainer.both_bound(name, theirs, mine)
            if diff is not None:
                out.append(diff)
    return out


def reason_summary(diffs: Sequence[Difference]) -> dict[str, int]:
    """Reason (with the side that bound the pod, for pods only one side bound) -> pods."""
    return dict(sorted(Counter(_summary_key(d) for d in diffs).items()))


def _summary_key(d: Difference) -> str:
    return f"{d.kind}: {d.reason}" if d.kind in ("only-upstream", "only-ours") else d.reason


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 2) if theirs > 0 else None


@dataclass
class WorkloadComparison:
    workload: Workload
    sides: dict[str, SideResult]

    @functools.cached_property
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


def _backlog_line(name: str, side: SideResult) -> str:
    first = side.first_bind_after
    after = ("no pod bound" if first is None
             else f"first bind {first:.1f} s after its start; last bind after {side.seconds:.1f} s")
    return f"  {name}: started {side.started_after or 0.0:.0f} s after the first creation; {after}"


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
        split_lines = [line for name, side in c.sides.items()
                       for line in split.format_split(name, side.split, side.cpu, side.cpu_window,
                                                      window="scheduler started until all settled" if side.backlog
                                                      else "pods created until all settled")]
        if split_lines:
            created = {n: max(0.0, s.last_created - s.first_created) for n, s in c.sides.items()}
            lines.append("")
            lines.append(f"{c.workload.name}: where the time went (pods created in "
                         + ", ".join(f"{v:.0f} s ({n})" for n, v in created.items()) + ")")
            lines.extend(split_lines)
        if any(side.events for side in c.sides.values()):
            lines.append("")
            lines.append(f"{c.workload.name}: Events recorded, by reason (best effort: a recorder that falls behind drops some)")
            lines.extend(f"  {name}: " + (", ".join(f"{n:,} {reason}" for reason, n in side.events.items()) or "none")
                         for name, side in c.sides.items())
        backlog_lines = [_backlog_line(name, side) for name, side in c.sides.items() if side.backlog]
        if backlog_lines:
            lines.append("")
            lines.append(f"{c.workload.name}: backlog run: every pod and its claims existed before the scheduler "
                         "started; PODS/S and BIND count from its start (start-up and informer sync included)")
            lines.extend(backlog_lines)
    for c in comparisons:
        diffs = c.diffs
        if diffs:
            lines.append("")
            lines.append(f"{c.workload.name}: {len(diffs)} pod(s) placed differently")
            examples: dict[str, Difference] = {}
            for d in diffs:
                examples.setdefault(_summary_key(d), d)
            for reason, count in reason_summary(diffs).items():
                example = examples[reason]
                lines.append(f"  {count:>5}  {reason}  (e.g. {example.pod}: {example.evidence})")
    return "\n".join(lines)
