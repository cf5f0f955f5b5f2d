"""``dra-solver schedule --group NAMESPACE/PODGROUP FILE...``: place a PodGroup whole, offline.

FILEs hold what a cluster would: Nodes, ResourceSlices, DeviceClasses, DeviceTaintRules, the
PodGroup (scheduling.k8s.io/v1beta1), its Pods, their ResourceClaims and ResourceClaimTemplates,
and claims already allocated (in use). Pods with ``spec.nodeName`` use up their node's room;
the group's members are the pods whose ``spec.schedulingGroup.podGroupName`` names the
PodGroup and that are not bound yet. Claims from templates are made here, named
``<pod|podgroup>-<claim>-<5 hex>`` (deterministic), as the claim controller would.

The answer comes from the same path as the service's ``ScheduleGroup``: the gang placed in one
CP-SAT model over the files' snapshot, and checked by the independent validator
(``model.check_group``) before it is shown.

Output: text for people, or ``-o json``::

    {"podGroup": "ns/name", "placed": true, "domain": {"key": "<label>", "value": "<value>"},
     "pods": [{"name": "...", "node": "...", "claims": [<ResourceClaim with status.allocation>]}],
     "sharedClaims": [<ResourceClaim with status.allocation>], "minCount": 2, "podsPlaced": 2,
     "score": 0, "stats": {...}}

(``domain`` is null without a topology key; when not placed the lists are empty and
``explanation`` says which domain came closest and what blocks it.)

Exit status: 0 placed; 1 not placeable (the summary, then the reasons, on stderr); 2 invalid
input (a missing PodGroup, no member pods, a policy that is not gang, a missing claim or
template: one line each); 3 the deadline passed before any placement was found.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from dra_solver import model
from dra_solver.model import (
    AllocationError,
    DraSolverError,
    GroupOutcome,
    InvalidInput,
    InvalidInputs,
    ResolvedGroup,
)
from dra_solver.model import objects as o
from dra_solver.service import engine as e
from dra_solver.service import groups
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands.allocate import print_input_errors
from dra_solver.service.commands.clientopts import DEFAULT_SERVER
from dra_solver.service.files import one_line, read_with_documents
from dra_solver.service.quoting import SHOWN_CHARS, clip, shown

EXIT_PLACED, EXIT_NOT_PLACEABLE, EXIT_INVALID, EXIT_DEADLINE, EXIT_OTHER = 0, 1, 2, 3, 4

Obj = dict[str, Any]


class Invalid(Exception):
    """Input problems, one line each (exit 2)."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = list(lines)


def _ref(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def resolve(group: str, typed: Sequence[o.TypedObject], raw: Sequence[Obj]) -> tuple[ResolvedGroup, list[Obj], int]:
    """The PodGroup's unbound members resolved to claims (templates' claims made here), the bound
    pods, and the quorum left: minCount less the members already bound (they count toward it,
    as upstream's gang quorum counts them)."""
    namespace, _, name = group.partition("/")
    if not namespace or not name:
        raise Invalid([f"--group: Invalid value: {shown(group)}: must be NAMESPACE/PODGROUP"])
    podgroups = [d for d in raw if d.get("kind") == "PodGroup" and _ref(d) == group]
    if not podgroups:
        raise Invalid([f"podgroups.scheduling.k8s.io {shown(name)} not found in namespace {clip(namespace, SHOWN_CHARS)} (FILEs hold no such PodGroup)"])
    podgroup = podgroups[0]
    problems = model.podgroup_problems(podgroup)
    if problems:
        raise Invalid(problems)
    pods = [d for d in raw if d.get("kind") == "Pod"]
    bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
    members = [p for p in pods if model.podgroup_ref(p) == group and not (p.get("spec") or {}).get("nodeName")]
    placed_already = sum(1 for p in bound if model.podgroup_ref(p) == group)
    if not members:
        raise Invalid([f"PodGroup {clip(group, SHOWN_CHARS)}: no pods to place: no unbound Pod in the FILEs has spec.schedulingGroup.podGroupName {shown(name)}"])
    claims = {c.ref: c for c in typed if isinstance(c, o.ResourceClaim)}
    templates = {t.ref: t for t in typed if isinstance(t, o.ResourceClaimTemplate)}
    resolved = model.resolve_group(podgroup, members, claims=claims, templates=templates, generate=True)
    if resolved.wait:
        raise Invalid([f"PodGroup {clip(group, SHOWN_CHARS)}: {w}" for w in resolved.wait])
    return resolved, bound, max(1, (model.gang_min_count(podgroup) or 1) - placed_already)


def answer_document(answer: groups.GroupAnswer) -> dict[str, Any]:
    """The issue's JSON shape (extend, never rename)."""
    request, outcome = answer.request, answer.outcome
    pods = {p.name: p for p in request.pods}
    doc: dict[str, Any] = {
        "podGroup": request.name,
        "placed": outcome.placed,
        "domain": {"key": request.topology_key, "value": outcome.domain} if request.topology_key and outcome.placed else None,
        "pods": [
            {"name": p.name, "node": p.node, "claims": [_allocated(c, r) for c, r in zip(pods[p.name].claims, p.results, strict=True)]}
            for p in outcome.pods
        ],
        "sharedClaims": [_allocated(c, r) for c, r in zip(request.shared_claims, outcome.shared, strict=True)] if outcome.placed else [],
        "minCount": request.min_count,
        "podsPlaced": outcome.pods_placed,
        "score": outcome.score,
        "stats": {"status": outcome.stats.status, "gap": outcome.stats.gap, "path": outcome.stats.path,
                  "domains": outcome.stats.domains_total, "domainsEvaluated": outcome.stats.domains_evaluated,
                  "solves": outcome.stats.solves, "wallSeconds": round(outcome.stats.wall_seconds, 6)},
    }
    x = outcome.explanation
    if x is not None:
        doc["explanation"] = {
            "summary": x.summary,
            "closest": {"key": request.topology_key, "value": x.closest} if x.closest is not None and request.topology_key else None,
            "podsPlaceable": x.pods_placeable,
            "minCount": x.min_count,
            "reasons": [{"kind": r.kind, "message": r.message, **({"claim": r.claim} if r.claim else {})} for r in x.reasons],
            "domains": [{"value": d.value, "nodes": d.nodes, "podsPlaceable": d.pods_placeable, "reason": d.reason} for d in x.domains],
        }
    return doc


def _allocated(claim: o.ResourceClaim, result: o.AllocationResult) -> dict[str, Any]:
    if claim.allocated:
        return claim.to_api()
    done = claim.model_copy(update={"status": o.ResourceClaimStatus(allocation=result)})
    return done.to_api()


def render(answer: groups.GroupAnswer) -> str:
    request, outcome = answer.request, answer.outcome
    s = outcome.stats
    where = f" in {request.topology_key}={outcome.domain}" if request.topology_key else ""
    gap = f" (gap {100 * s.gap:.1f}%)" if s.status == "FEASIBLE" else ""
    lines = [f"PodGroup {request.name}: placed {outcome.pods_placed} of {len(request.pods)} pods (minCount {request.min_count}){where}",
             f"  {s.status}{gap}, score {outcome.score}, {s.path} path, {s.wall_seconds * 1000:.1f} ms"]
    pods = {p.name: p for p in request.pods}
    for p in outcome.pods:
        lines.append(f"  {p.name} -> {p.node}")
        for claim, result in zip(pods[p.name].claims, p.results, strict=True):
            lines.append(f"    {claim.ref}: {_devices(result)}")
    for claim, result in zip(request.shared_claims, outcome.shared, strict=True):
        lines.append(f"  shared {claim.ref}: {_devices(result)}")
    return "\n".join(lines)


def _devices(result: o.AllocationResult) -> str:
    found = (result.devices.results if result.devices else None) or []
    return ", ".join(f"{d.driver}/{d.pool}/{d.device}" for d in found) or "(no devices)"


def explain_lines(outcome: GroupOutcome) -> list[str]:
    """The summary first, then each reason and domain verdict."""
    x = outcome.explanation
    if x is None:
        return [outcome.reason or "the group cannot be placed"]
    lines = [x.summary]
    lines.extend(f"  {r.kind}: {r.message}" for r in x.reasons)
    lines.extend(f"  domain {d.value}: {d.pods_placeable} of {x.min_count} pods on {d.nodes} nodes" + (f": {d.reason}" if d.reason else "")
                 for d in x.domains)
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        checks.check(args, {"--timeout": checks.seconds()})
        clashing = [flag for flag, used in (("--node", args.node), ("--reserve", args.reserve), ("--feasible-nodes", args.feasible_nodes),
                                            ("--allocator", args.allocator), ("--ttl", args.ttl)) if used]
        # The group is placed here, from the files: flags that reach the service would be ignored.
        clashing.extend(flag for flag, used in (("--server", args.server != DEFAULT_SERVER), ("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert),
                                                 ("--tls-key", args.tls_key), ("--server-name", args.server_name)) if used)
        if clashing:
            raise Invalid([f"{flag}: Forbidden: not with --group (the group is placed here from the files: its nodes come from its pods, "
                           "nothing is reserved and no service is called)" for flag in clashing])
        typed, raw = read_with_documents(args.files, validate=args.validate)
        resolved, bound, min_count = resolve(args.group, typed, raw)
        answer = groups.place_offline(resolved, typed, bound, min_count=min_count, policy=args.policy, gates=args.feature_gates, timeout=args.timeout)
    except Invalid as err:
        for line in err.lines:
            print(f"error: {one_line(line)}", file=sys.stderr)
        return EXIT_INVALID
    except InvalidInputs as err:
        print_input_errors(err)
        return EXIT_INVALID
    except (InvalidInput, AllocationError) as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INVALID
    except (e.DeadlineExceeded, model.SolveTimeout) as err:
        print(f"deadline reached: {one_line(str(err))}", file=sys.stderr)
        return EXIT_DEADLINE
    except DraSolverError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_OTHER
    if args.output == "json":
        print(json.dumps(answer_document(answer), indent=2))
    elif answer.outcome.placed:
        print(render(answer))
    if not answer.outcome.placed:
        for line in explain_lines(answer.outcome):
            print(line, file=sys.stderr)
        return EXIT_NOT_PLACEABLE
    return EXIT_PLACED
