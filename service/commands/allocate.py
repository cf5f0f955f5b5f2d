"""``dra-solver allocate``: allocate the unallocated claims of some files on one node.

    dra-solver allocate --node NAME [--allocator cpsat|backtracking|upstream] [--timeout SECONDS]
                        [--feature-gates Name=bool,...] [--policy NAME] [-o yaml|json]
                        [--validate strict|warn|ignore] FILE...

Other tools script against this command, so its contract is fixed (issue 2):

- FILE: YAML (multi-document) or JSON, ``-`` for stdin, holding DeviceClasses, ResourceSlices,
  ResourceClaims, DeviceTaintRules, Nodes, or ``List`` objects of them. Objects get the API
  server's defaults, strict field validation and validation (``--validate``, kubectl's
  spelling: ``strict`` by default, ``warn`` reports unknown/duplicate fields and goes on,
  ``ignore`` skips both checks). Every FILE must hold an object, no object may appear twice,
  and NAME must be a node the input knows (a Node, or a ResourceSlice on that node).
- Claims with ``status.allocation`` are already allocated (their devices are in use); all the
  others are allocated together on node NAME in one call. NAME's labels come from a Node of
  that name, if one is given.
- stdout: a ``kind: List`` (apiVersion v1) of the newly allocated claims, in input order, each
  with ``status.allocation``.
- exit status: 0 all allocated; 1 not possible on this node (stderr starts with ``cannot
  allocate all claims``, then names the first blocking reason, as ``dra-solver explain``'s
  one-line summary does); 2 invalid input or an allocation error (one line per problem on
  stderr, naming the file, the object and the field; never a traceback); 3 the deadline passed
  without an answer. 1 means nothing but "does not fit".

This module is the shell: it reads files and prints; the decision is ``model.allocate``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from dra_solver.model import (
    ALLOCATORS,
    AllocationOutcome,
    AllocationRequest,
    DraSolverError,
    FeatureGates,
    InvalidInput,
    InvalidInputs,
    Inventory,
    SolveTimeout,
    allocate,
    default_cel,
)
from dra_solver.model import objects as o
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands.gateflag import add_feature_gates_argument
from dra_solver.service.files import (
    add_validate_argument,
    one_line,
    progress_on_stderr,
    read_inputs,
)
from dra_solver.service.localexplain import why_not
from dra_solver.service.quoting import SHOWN_CHARS, clip, shown
from dra_solver.service.upstream import allocate_upstream, binary

EXIT_ALLOCATED = 0
EXIT_UNSATISFIABLE = 1
EXIT_ERROR = 2
EXIT_DEADLINE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML or JSON files, - for stdin")
    parser.add_argument("--node", required=True, metavar="NAME", help="the node to allocate on")
    parser.add_argument("--allocator", choices=(*ALLOCATORS, "upstream"), default="cpsat",
                        help="cpsat (default), backtracking (our port of upstream's search) or "
                             "upstream (upstream's own Go allocator; build it with "
                             "scripts/build-upstream.sh upstream-allocator)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help=f"time limit for the search, at most {checks.MAX_SECONDS:g} (default 10)")
    add_feature_gates_argument(parser)
    parser.add_argument("--policy", default="", metavar="NAME",
                        help="cpsat: quality objective after the FirstAvailable score: "
                             "pack (default), spread, first-fit (upstream's devices), score")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                        help="output format (default yaml)")
    add_validate_argument(parser)


def run(args: argparse.Namespace) -> int:
    checks.check(args, {"--timeout": checks.seconds()})
    sources: dict[str, str] = {}
    try:
        gates = FeatureGates.parse(args.feature_gates)
        upstream = args.allocator == "upstream"
        if upstream:
            binary()  # not built: say how to build it before reading anything
        inputs = read_inputs(args.files, validate=args.validate, progress=progress_on_stderr)
        sources.update(inputs.sources)
        inventory = Inventory.from_objects(inputs.objects)
        claims = tuple(c for c in inventory.claims if not c.allocated)
        request = AllocationRequest(
            claims=claims,
            node=known_node(inventory, args.node),
            inventory=inventory,
            gates=gates,
            allocator="cpsat" if upstream else args.allocator,
            time_limit=args.timeout,
            policy=args.policy,
        )
        cel = default_cel(request)
        if upstream:
            outcome = allocate_upstream(request, validate=args.validate != "ignore")
        else:
            outcome = allocate(request, cel=cel, validate=args.validate != "ignore")
        reason = "" if outcome.allocated else why_not(request, outcome, cel=cel)
    except SolveTimeout as err:
        print(f"deadline reached: {err}", file=sys.stderr)
        return EXIT_DEADLINE
    except (InvalidInputs, InvalidInput) as err:
        print_input_errors(err, sources)
        return EXIT_ERROR
    except DraSolverError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_ERROR
    if not outcome.allocated:
        print(reason, file=sys.stderr)
        return EXIT_UNSATISFIABLE
    _print(_allocated_list(claims, outcome), args.output)
    print(describe_solve(outcome), file=sys.stderr)
    return EXIT_ALLOCATED


def describe_solve(outcome: AllocationOutcome) -> str:
    """One line for people: which allocator and policy answered, and whether it is proven best."""
    stats = outcome.stats
    if stats is None:
        return f"allocated: score {outcome.score}"
    who = stats.allocator + (f", policy {stats.policy}" if stats.policy else "")
    if stats.allocator == "upstream":
        who += f" ({stats.status} tier)"
    if stats.status in ("OPTIMAL", "TRIVIAL"):
        verdict = "proven optimal"
    elif stats.status == "FEASIBLE":
        verdict = f"not proven optimal (gap {100 * (stats.gap or 0.0):.1f}%)" if stats.gap is not None else "not proven optimal"
    else:
        verdict = "first answer of the search"
    return f"allocated by {who}: {verdict}, score {outcome.score}, {1000 * stats.wall_seconds:.1f} ms"


def known_node(inventory: Inventory, name: str, *, flag: str = "--node") -> o.Node:
    """The node ``name`` as the input describes it; an error if the input never mentions it
    (no Node object and no ResourceSlice on it), rather than an empty node that cannot fit."""
    known = inventory.node_names()
    if name not in known:
        listed = ", ".join(clip(n, SHOWN_CHARS) for n in known[:10]) + (f", ... ({len(known)} nodes)" if len(known) > 10 else "")
        hint = f"known nodes: {listed}" if known else "the input has no Node and no node-local ResourceSlice"
        raise InvalidInput("", (flag,), f"Not found: {shown(name)}: {hint}")
    return inventory.node(name)


def print_input_errors(err: InvalidInput | InvalidInputs, sources: dict[str, str] | None = None) -> None:
    """``error: ...`` on stderr, one line per problem, each naming its file when known."""
    for each in err.errors if isinstance(err, InvalidInputs) else [err]:
        print(f"error: {one_line(with_source(each, sources or {}))}", file=sys.stderr)


def with_source(err: InvalidInput, sources: dict[str, str]) -> str:
    """The error with the file its object came from, when it does not say it already."""
    if err.source or not err.obj:
        return str(err)
    source = sources.get(err.obj)
    return f"{source}: {err}" if source else str(err)


def _allocated_list(claims: tuple[o.ResourceClaim, ...], outcome: AllocationOutcome) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for claim, result in zip(claims, outcome.results, strict=True):
        done = claim.model_copy(deep=True)
        status = done.status.model_copy(deep=True) if done.status is not None else o.ResourceClaimStatus()
        status.allocation = result
        done.status = status
        items.append(done.to_api())
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _print(document: dict[str, Any], output: str) -> None:
    if output == "json":
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        yaml.safe_dump(document, sys.stdout, sort_keys=False, default_flow_style=False)
