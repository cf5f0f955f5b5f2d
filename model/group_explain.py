"""Why a PodGroup cannot be placed, at group level: which domain came closest, what blocks it.

API:
- ``explain_group(problem, *, solve_domain) -> GroupExplanation``: ``solve_domain(domain)``
  answers how many pods fit together in one domain with the quorum dropped (the caller's
  path: the aggregated master or the joint model). At most ``MAX_DOMAINS`` domains are solved,
  the most promising first (pods that fit some node alone, then idle units).

What it says (``GroupExplanation``):
1. per domain, the pods that fit together (``DomainVerdict``); the **closest** domain has the
   most (ties: the most idle units);
2. the blockers there: a shared claim that cannot be allocated in the domain (with the
   allocator's reason), pod classes that fit alone on too few nodes ("pods like worker-0 fit
   alone on 12 of 16 nodes of rack r7; node n-3: cannot allocate all claims: ..."), and the
   quorum ("12 of 16 pods fit together, minCount is 16");
3. a summary: "0/63 domains (topology.kubernetes.io/rack) can hold PodGroup ns/train:
   closest rack r7 fits 12 of 16 pods: ...".
"""

from __future__ import annotations

from collections.abc import Callable

from dra_solver.model.cpsat.group_problem import GroupProblem, room_fits
from dra_solver.model.group_request import DomainVerdict, GroupExplanation, GroupReason

MAX_DOMAINS = 8
"""Domains solved for an explanation (the rest are ranked by the cheap bound only)."""


def _short(key: str) -> str:
    """``topology.kubernetes.io/rack`` -> ``rack``."""
    return key.rsplit("/", 1)[-1] or key


def explain_group(problem: GroupProblem, *, solve_domain: Callable[[str], int]) -> GroupExplanation:
    request = problem.request
    key = request.topology_key
    total_pods = len(problem.pods)
    if total_pods < request.min_count:
        summary = f"PodGroup {request.name} has {total_pods} pods, fewer than its minCount {request.min_count}"
        return GroupExplanation(summary, min_count=request.min_count, pods_placeable=0,
                                reasons=(GroupReason("min-count", summary),))
    if not problem.domains:
        summary = (
            f"0/0 domains ({key}) can hold PodGroup {request.name}: no node has the label {key}"
            if key else f"PodGroup {request.name} cannot be placed: the cluster has no nodes"
        )
        return GroupExplanation(summary, min_count=request.min_count, reasons=(GroupReason("domain", summary),))

    def candidates(domain: str) -> int:
        # Ties between domains where nothing fits go to the one the pods may use at all.
        return sum(1 for p in problem.pods for n in problem.domains[domain] if n in p.nodes)

    def bound(domain: str) -> tuple[int, int, int]:
        nodes = problem.domains[domain]
        fitting = sum(1 for p in problem.pods if any(problem.fits(p, n).fits for n in _reps(problem, nodes)))
        return fitting, candidates(domain), problem.domain_idle(domain)

    ranked = sorted(problem.domains, key=lambda d: (*(-v for v in bound(d)), d))
    verdicts: list[DomainVerdict] = []
    for d in ranked[:MAX_DOMAINS]:
        verdicts.append(DomainVerdict(d, len(problem.domains[d]), solve_domain(d)))
    closest = max(verdicts, key=lambda v: (v.pods_placeable, candidates(v.value), problem.domain_idle(v.value), -ranked.index(v.value)))
    reasons = _blockers(problem, closest.value)
    if closest.pods_placeable < request.min_count:
        reasons.append(GroupReason(
            "min-count",
            f"{closest.pods_placeable} of {total_pods} pods fit together, minCount is {request.min_count}",
        ))
    detail = "; ".join(r.message for r in reasons)
    if key:
        where = f"closest {_short(key)} {closest.value} fits {closest.pods_placeable} of {total_pods} pods"
        summary = f"0/{len(problem.domains)} domains ({key}) can hold PodGroup {request.name}: {where}"
    else:
        summary = f"PodGroup {request.name} cannot be placed: {closest.pods_placeable} of {total_pods} pods fit together"
    if detail:
        summary += f": {detail}"
    return GroupExplanation(
        summary=summary,
        closest=closest.value if key else None,
        pods_placeable=closest.pods_placeable,
        min_count=request.min_count,
        reasons=tuple(reasons),
        domains=tuple(verdicts),
    )


def _reps(problem: GroupProblem, nodes: list[str]) -> list[str]:
    """One node per class among ``nodes``."""
    seen: set[int] = set()
    out = []
    for n in nodes:
        cls = problem.nodes[n].cls
        if cls not in seen:
            seen.add(cls)
            out.append(n)
    return out


def _blockers(problem: GroupProblem, domain: str) -> list[GroupReason]:
    request = problem.request
    key = request.topology_key
    where = f" of {_short(key)} {domain}" if key else ""
    nodes = problem.domains[domain]
    out: list[GroupReason] = []
    claims = [c for _, c in problem.open_shared]
    if claims:
        outcome = problem.solve_on(nodes[0], claims)
        if not outcome.allocated:
            refs = ", ".join(c.ref for c in claims)
            out.append(GroupReason("shared-claim", f"shared claims {refs} cannot be allocated{where}: {outcome.reason}", claim=refs))
    for members in problem.pod_classes:
        pod = problem.pods[members[0]]
        room = 0
        refused = 0
        first_reason = ""
        per_class: dict[tuple[object, ...], int] = {}
        for n in nodes:
            verdict = problem.fits(pod, n)
            if not verdict.fits:
                refused += 1
                if not first_reason:
                    first_reason = f"node {n}: {verdict.reason}"
                continue
            same = problem.solve_keys[n]
            if same not in per_class:
                per_class[same] = how_many(problem, members, n)
            room += per_class[same]
        if room >= len(members) and not refused:
            continue
        like = f"pods like {pod.name}" if len(members) > 1 else f"pod {pod.name}"
        message = f"{like} ({len(members)}): room for {min(room, len(members))} on the {len(nodes)} nodes{where}"
        if refused:
            message += f", {refused} nodes fit none ({first_reason})"
        out.append(GroupReason("pods", message))
    return out


def how_many(problem: GroupProblem, members: list[int], node: str) -> int:
    """How many pods of one class fit together on ``node`` (at most the class)."""
    fitted = 0
    for count in range(1, len(members) + 1):
        pods = [problem.pods[i] for i in members[:count]]
        info = problem.nodes[node]
        if not room_fits(pods[0].pod, info.room, count=count):
            break
        outcome = problem.solve_on(node, [c for p in pods for c in p.pod.claims])
        if not outcome.allocated:
            break
        fitted = count
    return fitted
