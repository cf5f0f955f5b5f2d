"""Flags and helpers shared by the subcommands that read one pod or claim of a live cluster
(``explain pod/NAME``, ``compare pod/NAME``): where the cluster is, which namespace, and one
exit status per way a read can fail."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dra_solver.model import InvalidInput
from dra_solver.service.clusterinputs import Live, Target, default_namespace, read_live
from dra_solver.service.files import one_line
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.quoting import shown

EXIT_INVALID = 2
EXIT_UNAVAILABLE = 4


def add_live_arguments(parser: argparse.ArgumentParser) -> None:
    live = parser.add_argument_group("a live cluster (pod/NAME or resourceclaim/NAME)")
    live.add_argument("--kubeconfig", metavar="FILE",
                      help="the cluster (default: $KUBECONFIG or ~/.kube/config, as kubectl)")
    live.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    live.add_argument("-n", "--namespace", metavar="NAMESPACE",
                      help="the namespace of the pod or claim (default: the kubeconfig context's, else default)")


def one_target(targets: Sequence[Target | None]) -> Target:
    """The one live object asked about (never mixed with FILEs or another object)."""
    if len(targets) > 1 or targets[0] is None:
        raise InvalidInput("", (), "Invalid value: give one pod/NAME or resourceclaim/NAME and no FILEs with it")
    return targets[0]


def refuse_without_target(args: argparse.Namespace) -> None:
    """``--kubeconfig``/``--in-cluster``/``--namespace`` with FILEs: a mistake, not something
    to ignore (the files' objects carry their own namespaces)."""
    if args.kubeconfig or args.in_cluster or args.namespace:
        flag = "--kubeconfig" if args.kubeconfig else "--in-cluster" if args.in_cluster else "--namespace"
        raise InvalidInput("", (flag,), "Forbidden: a live cluster is asked about pod/NAME or resourceclaim/NAME, not FILEs")


def read(args: argparse.Namespace, target: Target) -> Live | int:
    """The target's inputs, or the exit status after a one-line error: 2 for a target that
    does not exist or a kubeconfig that does not work (unreadable, credentials refused), 4 when
    the API server does not answer (unreachable, timed out) or refuses a read."""
    namespace = args.namespace or default_namespace(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster)
    try:
        api = kube.api_client(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster, user_agent="dra-solver-cli")
        try:
            return read_live(kube.Kube(api), target, namespace=namespace)
        finally:
            api.close()
    except kube.Unreachable as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (kube.NotFound, kube.ConfigError) as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_INVALID
    except kube.ApiError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return EXIT_UNAVAILABLE


def nodes_asked(live: Live, node: str | None) -> tuple[str, ...]:
    """The candidate nodes, or ``--node`` alone when it is one (none when the node filter ruled
    it out: its reason is listed); an error when it is not a node of the cluster."""
    if not node:
        return live.nodes.candidates
    if node in live.nodes.candidates:
        return (node,)
    if node not in live.nodes.reasons and node not in live.raw_nodes:
        raise InvalidInput("", ("--node",), f"Not found: {shown(node)}: not a node of the cluster")
    return ()
