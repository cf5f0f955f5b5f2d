"""``dra-solver explain``: ask a running service why claims do not fit on a node.

    dra-solver explain [--server HOST:PORT] --node NAME [--validate strict|warn|ignore] FILE...

Prints the smallest set of reasons that together block the claims, and the fewest changes that
would let them fit. Exit status: 0 explained (or the claims fit), 2 invalid input or unknown
node, 3 deadline passed, 4 other errors.
"""

from __future__ import annotations

import argparse
import sys

import grpc

from dra_solver.model import DraSolverError
from dra_solver.service.commands.clientopts import (
    add_client_arguments,
    answer_json,
    connect,
    rpc_error,
)
from dra_solver.service.commands.gateflag import add_feature_gates_argument
from dra_solver.service.files import add_validate_argument, one_line, read_objects
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="ResourceClaims (YAML/JSON; - for stdin)")
    parser.add_argument("--node", required=True, help="the node to explain")
    add_feature_gates_argument(parser, what="this call")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    add_validate_argument(parser, what="the claims (checked here, and by the service)")
    add_client_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        claims = [c.to_api() for c in read_objects(args.files, validate=args.validate)]
    except DraSolverError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    try:
        with connect(args) as solver:
            answer = solver.explain(claims, args.node, feature_gates=args.feature_gates, validate=args.validate)
    except grpc.RpcError as err:
        return rpc_error(err)
    if args.output == "json":
        print(answer_json(answer))
    else:
        print(render(answer))
    return 0


def render(answer: pb.ExplainResponse) -> str:
    if answer.allocatable:
        return f"node {answer.node}: the claims fit; nothing blocks them."
    lines = [f"node {answer.node}: the claims cannot be allocated."]
    lines.append("reasons (together they block the claims; each one is needed):")
    lines.extend(f"  - [{r.kind}] {r.message}" for r in answer.reasons)
    if answer.fixes:
        lines.append("fewest changes that would make them fit:")
        lines.extend(f"  - [{r.kind}] {r.message}" for r in answer.fixes)
    if not answer.minimal:
        lines.append("(time ran out: the reasons are sufficient but may not be the smallest set)")
    return "\n".join(lines)
