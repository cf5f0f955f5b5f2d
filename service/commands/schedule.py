"""``dra-solver schedule``: ask a running service where a pod's claims fit; or, with ``--group``,
place a whole PodGroup offline (``service.commands.schedule_group``).

    dra-solver schedule [--server HOST:PORT] [--node NAME ...] [--reserve]
                        [--validate strict|warn|ignore] FILE...
    dra-solver schedule --group NAMESPACE/PODGROUP [--policy NAME] [--feature-gates ...]
                        [--timeout SECONDS] [-o text|json] FILE...

FILEs hold the pod's ResourceClaims. Prints the chosen node, each claim's devices and the
per-node verdicts (``-o json`` for the whole answer). Exit status: 0 placed, 1 no node fits,
2 invalid input (including a ``--node`` the service does not know), 3 deadline passed, 4 other
errors (service unreachable, ...).
"""

from __future__ import annotations

import argparse
import sys

import grpc

from dra_solver.model import DraSolverError
from dra_solver.service.client import Client
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands import schedule_group
from dra_solver.service.commands.clientopts import (
    add_client_arguments,
    answer_json,
    check_client_arguments,
    connect,
    rpc_error,
)
from dra_solver.service.commands.gateflag import add_feature_gates_argument
from dra_solver.service.files import (
    add_validate_argument,
    one_line,
    progress_on_stderr,
    read_objects,
)
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.quoting import node_not_found, shown

RULES = {"--ttl": checks.seconds(zero=True), "--feasible-nodes": checks.integer(least=0, most=checks.MAX_FEASIBLE_NODES)}
"""The bounds of this command's own numeric flags (the client flags: ``check_client_arguments``)."""

VERDICT = {pb.VERDICT_FEASIBLE: "feasible", pb.VERDICT_UNSCHEDULABLE: "unschedulable", pb.VERDICT_NOT_EVALUATED: "not evaluated"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="ResourceClaims of the pod (YAML/JSON; - for stdin); with --group, the whole cluster and the PodGroup")
    parser.add_argument("--group", metavar="NAMESPACE/PODGROUP", default="",
                        help="place this PodGroup whole, offline, from the FILEs (Nodes, slices, classes, the PodGroup, its Pods, "
                             "claims and templates); no service involved. Exit 0 placed, 1 not placeable, 2 invalid input, 3 deadline "
                             "(default: none, one pod through the service)")
    parser.add_argument("--node", action="append", default=[], help="candidate node (repeat; default: every node)")
    parser.add_argument("--reserve", action="store_true", help="hold the chosen devices until released or expired")
    parser.add_argument("--ttl", type=float, default=0.0, help="reservation lifetime in seconds (default 0: the service's --reservation-ttl; the service holds a reservation at most 600)")
    parser.add_argument("--allocator", default="", choices=["cpsat", "backtracking"],
                        help="cpsat or backtracking (our port of upstream's search) (default: the service's, cpsat)")
    parser.add_argument("--policy", default="", metavar="NAME",
                        help="placement policy: pack, spread, first-fit or score (default: the service's, pack)")
    add_feature_gates_argument(parser, what="this call (on top of the service's)")
    parser.add_argument("--feasible-nodes", type=int, default=0, help=f"evaluate until this many nodes fit (0 = until the best score; at most {checks.MAX_FEASIBLE_NODES})")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text",
                        help="output format: text for people, json for the whole answer (allocations as objects)")
    add_validate_argument(parser, what="the claims (checked here, and by the service)")
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.group:
        return schedule_group.run(args)
    check_client_arguments(args)
    checks.check(args, RULES)
    try:
        claims = [c.to_api() for c in read_objects(args.files, validate=args.validate, progress=progress_on_stderr)]
    except DraSolverError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    try:
        with connect(args) as solver:
            answer = solver.schedule(
                claims, args.node, allocator=args.allocator, policy=args.policy, feature_gates=args.feature_gates,
                reserve=args.reserve, ttl=args.ttl, feasible_nodes_wanted=args.feasible_nodes, validate=args.validate,
            )
            unknown = unknown_nodes(answer)
            if unknown and answer.HasField("reservation"):
                solver.unreserve(answer.reservation.id)  # the answer is not used: hold nothing
    except grpc.RpcError as err:
        return rpc_error(err)
    if unknown:
        # Over gRPC an unknown candidate is one more node that does not fit (the scheduler
        # passes Nodes the service may not have seen yet); a name typed here is a typo.
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        print(f"error: --node: Not found: {shown(unknown[0])}{more}: the service's inventory has no such node",
              file=sys.stderr)
        return 2
    if args.output == "json":
        print(answer_json(answer))
    else:
        print(render(answer))
    return 0 if answer.node else 1


def unknown_nodes(answer: pb.ScheduleResponse) -> list[str]:
    """Candidates the service reported as not in its inventory."""
    return [v.node for v in answer.nodes
            if v.verdict == pb.VERDICT_UNSCHEDULABLE and v.reason == node_not_found(v.node)]


def render(answer: pb.ScheduleResponse) -> str:
    lines = []
    if answer.node:
        st = answer.stats
        policy = f"policy {st.policy}, " if st.policy else ""
        gap = f" (gap {100 * st.gap:.1f}%)" if st.status == "FEASIBLE" and st.HasField("gap") else ""
        lines.append(f"node: {answer.node} (score {answer.score}, {policy}{st.status}{gap} in {st.wall_seconds * 1000:.1f} ms)")
        lines.extend(f"  {d}" for d in Client.devices(answer))
        if answer.HasField("reservation"):
            lines.append(f"  reserved as {answer.reservation.id} for {answer.reservation.expires_in_seconds:.0f}s")
    else:
        lines.append(answer.reason)
    s = answer.schedule_stats
    lines.append(
        f"nodes: {s.nodes_total} candidates, {s.nodes_evaluated} evaluated, {s.nodes_pruned} pruned, {s.nodes_feasible} feasible; "
        f"{s.solves} solves, {s.cache_hits} cache hits, {s.wall_seconds * 1000:.1f} ms"
    )
    for v in answer.nodes[:20]:
        extra = f" score {v.score}" if v.verdict == pb.VERDICT_FEASIBLE else f": {v.reason}" if v.reason else ""
        lines.append(f"  {v.node}: {VERDICT.get(v.verdict, '?')}{extra}")
    if len(answer.nodes) > 20:
        lines.append(f"  ... {len(answer.nodes) - 20} more")
    return "\n".join(lines)
