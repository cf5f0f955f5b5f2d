"""``dra-solver explain``: why claims do not fit on a node, from files, a service or a cluster.

    dra-solver explain --node NAME [--timeout S] [--feature-gates G] [-o text|json]
                       [--validate MODE] FILE...                         (here, on files)
    dra-solver explain --server HOST:PORT --node NAME [...] FILE...      (a running service)
    dra-solver explain [--kubeconfig FILE | --in-cluster] [-n NAMESPACE] [--node NAME]
                       pod/NAME | resourceclaim/NAME                     (a live cluster)

Files are read as ``dra-solver allocate`` reads them (the unallocated claims are the question;
everything else is the inventory). With ``--server`` the claims go to the service, which
explains against its own inventory (the files then hold only claims). ``pod/NAME`` and
``resourceclaim/NAME`` (kubectl's spellings; a file at such a path is ``./pod/NAME``) read the
pod, its claims (made from their templates when not created yet), the DeviceClasses,
ResourceSlices, DeviceTaintRules, allocated claims and Nodes, filter the nodes as the scheduler
does before devices (node selector and affinity, taints, unschedulable) and explain each
candidate node; nodes with the same devices in the same state are explained once.

Prints, per node, the first blocking reason, then the smallest set of reasons that together
block the claims and the fewest changes that would let them fit, or that no change does, or
that the deadline came before the reasons were proven the fewest.

Exit status: 0 the claims fit (on the node, or on a candidate node); 1 they do not (the output
says why); 2 invalid input (a bad file, flag, unknown node, a missing pod or claim, a
kubeconfig that does not work); 3 (``--server``) the deadline passed; 4 the service or the API
server could not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc

from dra_solver.model import (
    AllocationRequest,
    DraSolverError,
    FeatureGates,
    InvalidInput,
    InvalidInputs,
    Inventory,
    default_cel,
    headline,
)
from dra_solver.service import messages
from dra_solver.service.clusterinputs import Live, Target, parse_target
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands import liveopts
from dra_solver.service.commands.allocate import known_node, print_input_errors
from dra_solver.service.commands.clientopts import (
    add_client_arguments,
    answer_json,
    check_client_arguments,
    connect,
    rpc_error,
)
from dra_solver.service.commands.gateflag import add_feature_gates_argument
from dra_solver.service.files import add_validate_argument, one_line, read_inputs, read_objects
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.localexplain import UNSATISFIABLE, explain_on_node
from dra_solver.service.nodefilter import nodes_summary

EXIT_FITS = 0
EXIT_DOES_NOT_FIT = 1
EXIT_INVALID = 2

MIN_SECONDS = 0.05
"""A node reached after the deadline still gets this long (its answer then says so)."""

LIMITS = {
    "deadline": "deadline reached: these reasons suffice but may not be the fewest (a longer --timeout may give fewer)",
    "budget": "search limit reached: these reasons suffice but may not be the fewest",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="FILE | pod/NAME | resourceclaim/NAME",
                        help="YAML/JSON files as for allocate (- for stdin); or one pod or claim of a live cluster")
    parser.add_argument("--node", metavar="NAME",
                        help="the node to explain (required with FILEs); with pod/NAME, only this candidate node")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help=f"time limit for solving and explaining (with --server: the call's deadline), at most {checks.MAX_SECONDS:g} (default 30)")
    add_feature_gates_argument(parser, what="this call")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    add_validate_argument(parser, what="the input files (with --server, the service checks the same way)")
    liveopts.add_live_arguments(parser)
    server = parser.add_argument_group("a running service (--server)")
    add_client_arguments(server, server_help="ask the service at HOST:PORT or unix:PATH (default: explain here, "
                                             "no service needed)", timeout=False)


def run(args: argparse.Namespace) -> int:
    if args.server is not None:
        check_client_arguments(args)  # --timeout too
    else:
        checks.check(args, {"--timeout": checks.seconds()})
        tls = (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--server-name", args.server_name))
        flag = next((f for f, v in tls if v), None)
        if flag:
            raise checks.FlagError(f"{flag}: Forbidden: only with --server (explaining here needs no TLS)")
    try:
        gates = FeatureGates.parse(args.feature_gates)
        targets = [parse_target(x) for x in args.inputs]
        if any(targets):
            target = liveopts.one_target(targets)
            if args.server:
                raise InvalidInput("", ("--server",), "Forbidden: pod/NAME and resourceclaim/NAME are read from the cluster, not sent to a service")
            return _run_live(args, target, gates)
        liveopts.refuse_without_target(args)
        if not args.node:
            raise InvalidInput("", ("--node",), "Required value: the node to explain")
        if args.server:
            return _run_server(args)
        return _run_files(args, gates)
    except InvalidInputs as err:
        print_input_errors(err)
        return EXIT_INVALID
    except DraSolverError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INVALID


# --- files, here -------------------------------------------------------------------------------


def _run_files(args: argparse.Namespace, gates: FeatureGates) -> int:
    sources: dict[str, str] = {}
    try:
        inputs = read_inputs(args.inputs, validate=args.validate)
        sources.update(inputs.sources)
        inventory = Inventory.from_objects(inputs.objects)
        request = AllocationRequest(
            claims=tuple(c for c in inventory.claims if not c.allocated),
            node=known_node(inventory, args.node),
            inventory=inventory,
            gates=gates,
            time_limit=args.timeout,
        )
        answer = explain_on_node(request, cel=default_cel(request), validate=args.validate != "ignore")
    except (InvalidInputs, InvalidInput) as err:
        print_input_errors(err, sources)
        return EXIT_INVALID
    return _print_one(messages.explain_response(answer), args.output)


# --- a running service -------------------------------------------------------------------------


def _run_server(args: argparse.Namespace) -> int:
    claims = [c.to_api() for c in read_objects(args.inputs, validate=args.validate)]
    try:
        with connect(args) as solver:
            answer = solver.explain(claims, args.node, feature_gates=args.feature_gates, validate=args.validate)
    except grpc.RpcError as err:
        return rpc_error(err)
    return _print_one(answer, args.output)


def _print_one(answer: pb.ExplainResponse, output: str) -> int:
    print(answer_json(answer) if output == "json" else render(answer))
    return EXIT_FITS if answer.allocatable else EXIT_DOES_NOT_FIT


def render(answer: pb.ExplainResponse, *, nodes: str = "") -> str:
    """One node's answer for people; ``nodes`` names the nodes it stands for (default: its own)."""
    where = nodes or f"node {answer.node}"
    if answer.allocatable:
        return f"{where}: the claims fit; nothing blocks them."
    lines = [f"{where}: the claims do not fit: {headline(answer.reasons) or answer.summary}"]
    if answer.reasons:
        lines.append("reasons (together they block the claims; each one is needed):")
        lines.extend(f"  - [{r.kind}] {r.message}" for r in answer.reasons)
    if answer.fixes:
        lines.append("fewest changes that would make them fit:")
        lines.extend(f"  - [{r.kind}] {r.message}" for r in answer.fixes)
    elif answer.no_fix:
        lines.append("no change makes them fit on this node: what the claims ask is more than it has")
    if not answer.minimal:
        lines.append(f"({LIMITS.get(answer.limit, LIMITS['deadline'])})")
    return "\n".join(lines)


# --- a live cluster ----------------------------------------------------------------------------


def _run_live(args: argparse.Namespace, target: Target, gates: FeatureGates) -> int:
    live = liveopts.read(args, target)
    if isinstance(live, int):
        return live
    candidates = liveopts.nodes_asked(live, args.node)
    deadline = time.monotonic() + args.timeout
    groups = explain_groups(live, candidates, gates=gates, deadline=deadline) if live.claims.to_allocate else []
    fits = [n for answer, nodes in groups if answer.allocatable for n in nodes] if live.claims.to_allocate else list(candidates)
    doc = _live_json(live, candidates, groups, fits, node=args.node)
    if args.output == "json":
        print(json.dumps(doc, indent=2))
    else:
        print(render_live(live, candidates, groups, fits, summary=doc["summary"]))
    return EXIT_FITS if fits and not live.claims.wait else EXIT_DOES_NOT_FIT


Group = tuple[pb.ExplainResponse, tuple[str, ...]]
"""One explanation and the nodes it answers for (the first explained, the rest alike)."""


def explain_groups(live: Live, candidates: Sequence[str], *, gates: FeatureGates, deadline: float) -> list[Group]:
    """Explain each candidate node once per group of alike nodes (``Live.alike``)."""
    holders = live.holders()
    groups: list[Group] = []
    cel = None
    for nodes in live.alike(candidates):
        request = live.request_for(nodes[0], gates=gates, time_limit=max(deadline - time.monotonic(), MIN_SECONDS))
        cel = cel or default_cel(request)
        answer = explain_on_node(request, cel=cel, held_by=holders, validate=False)  # the API server validated them
        groups.append((messages.explain_response(answer), nodes))
    return groups


def _claims_line(live: Live) -> str:
    asked = live.claims.to_allocate
    if live.claims.wait:
        return f"{live.subject}: cannot be scheduled yet: {live.claims.wait}"
    if not asked:
        return f"{live.subject}: no claims to allocate"
    refs = ", ".join(c.ref for c in asked)
    return f"{live.subject}: {len(asked)} claim{'s' if len(asked) != 1 else ''} to allocate: {refs}"


def _summary(live: Live, asked: Sequence[str], fits: Sequence[str], node: str | None) -> str:
    """One line, as the scheduler would put it (``0/4 nodes are available: ...``)."""
    total = len(live.nodes.candidates) + len(live.nodes.reasons)
    if live.claims.wait:
        return live.claims.wait
    if node:
        if node in live.nodes.reasons:
            return f"node {node}: {live.nodes.reasons[node]}"
        return f"node {node}: the claims {'fit' if fits else 'do not fit'}"
    if not live.claims.to_allocate:
        return f"nothing to allocate; {len(asked)} of {total} nodes are candidates"
    if fits:
        shown = ", ".join(fits[:5]) + (f" and {len(fits) - 5} more" if len(fits) > 5 else "")
        return f"the claims fit on {len(fits)} of {total} nodes: {shown}"
    return nodes_summary(total, [*live.nodes.reasons.values(), *[UNSATISFIABLE] * len(asked)])


def _group_name(nodes: Sequence[str]) -> str:
    if len(nodes) == 1:
        return f"node {nodes[0]}"
    shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    return f"nodes {shown} (alike: the same devices in the same state; explained on {nodes[0]})"


def render_live(live: Live, candidates: Sequence[str], groups: Sequence[Group], fits: Sequence[str], *, summary: str) -> str:
    lines = [_claims_line(live)]
    lines.extend(f"  {note}" for note in live.claims.notes)
    if live.bound_to:
        lines.append(f"  bound to node {live.bound_to}")
    lines.append(summary)
    if live.claims.wait or not live.claims.to_allocate:
        return "\n".join(lines)
    for node, why in sorted(live.nodes.reasons.items()):
        lines.append(f"node {node}: {why}")
    for answer, nodes in groups:
        lines.append("")
        lines.append(render(answer, nodes=_group_name(nodes)))
    return "\n".join(lines)


def _live_json(live: Live, candidates: Sequence[str], groups: Sequence[Group], fits: Sequence[str], *, node: str | None) -> dict[str, Any]:
    return {
        "subject": live.subject,
        "claims": [c.ref for c in live.claims.to_allocate],
        "notes": list(live.claims.notes),
        "wait": live.claims.wait,
        "boundTo": live.bound_to,
        "nodes": {
            "total": len(live.nodes.candidates) + len(live.nodes.reasons),
            "candidates": list(live.nodes.candidates),
            "filtered": dict(sorted(live.nodes.reasons.items())),
        },
        "explained": [{"nodes": list(nodes), "answer": json.loads(answer_json(answer))} for answer, nodes in groups],
        "fits": list(fits),
        "summary": _summary(live, candidates, fits, node),
    }
