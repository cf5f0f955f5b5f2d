"""``dra-solver controllers``: run the ResourceClaim controller, the dra-solver scheduler and the
device-taint eviction controller against a cluster.

    dra-solver controllers (--kubeconfig FILE | --in-cluster) --solver HOST:PORT
                           [--enable claim,scheduler,eviction] [--leader-elect ...]

The first line on stdout is ``metrics=HOST:PORT`` (``--metrics-port 0`` picks a free port).
Exit codes: 0 after SIGTERM/SIGINT, 1 when leadership was lost (restart clean) or the caches
never synced (API server unreachable, RBAC missing), 2 for bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from dra_solver.controllers import features
from dra_solver.controllers.manager import (
    CONTROLLERS,
    Manager,
    Options,
    default_identity,
    parse_enable,
)
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.model import POLICIES
from dra_solver.service.api import (
    ArgumentParser,
    Client,
    HttpEndpoint,
    hold_full_collections,
    kube,
    logsetup,
)

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)")
    src.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    parser.add_argument("--solver", metavar="ADDRESS", default="", help="the solver service's gRPC address HOST:PORT (needed by the scheduler; no default)")
    parser.add_argument("--solver-ca", metavar="FILE", help="CA certificate to verify the solver (enables TLS)")
    parser.add_argument("--solver-cert", metavar="FILE", help="client certificate for mTLS")
    parser.add_argument("--solver-key", metavar="FILE", help="client key for mTLS")
    parser.add_argument("--solver-server-name", default=None, help="TLS server name to expect from the solver")
    parser.add_argument("--solver-timeout", type=float, default=10.0, help="seconds per solver call (default 10)")
    parser.add_argument("--enable", default=",".join(CONTROLLERS), help=f"controllers to run, comma-separated (default {','.join(CONTROLLERS)})")
    parser.add_argument("--scheduler-name", default="dra-solver", help="spec.schedulerName of the pods to schedule")
    parser.add_argument("--scheduler-workers", type=int, default=Options.scheduler_workers,
                        help=f"pods scheduled concurrently (default {Options.scheduler_workers})")
    parser.add_argument("--scheduler-binders", type=int, default=Options.scheduler_binders,
                        help=f"pods whose claims are written and binding sent concurrently, off the scheduling workers; 0 = on the worker (default {Options.scheduler_binders})")
    parser.add_argument("--solver-in-flight", action="store_true",
                        help="send the claims being written with every Schedule, so solver replicas behind a round-robin "
                             "balancer answer alike (docs/replicas.md); off by default: with one connection the replica's "
                             "own reservations suffice, and at 1,000 pods sending them cost 2-3x in throughput")
    parser.add_argument("--claim-workers", type=int, default=Options.claim_workers,
                        help=f"ResourceClaim controller workers (default {Options.claim_workers})")
    parser.add_argument("--eviction-workers", type=int, default=2, help="pods checked for device taints concurrently")
    parser.add_argument("--reservation-ttl", type=float, default=60.0, help="seconds the solver holds devices for an attempt")
    parser.add_argument("--policy", default="", choices=POLICIES, metavar="NAME",
                        help="placement policy for the solver: pack (default), spread, first-fit, score")
    parser.add_argument("--no-explain", action="store_true", help="do not ask the solver why a pod does not fit")
    parser.add_argument("--feature-gates", default="", metavar="NAME=BOOL,...",
                        help="Kubernetes feature gates: DRADeviceBindingConditions (default true); DRAExtendedResource and "
                             "DRAResourceClaimDeviceStatus are GA and locked to true in v1.37")
    parser.add_argument("--binding-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="how long the scheduler waits for a device's binding conditions before it gives up and "
                             "reschedules the pod (kube-scheduler's bindingTimeout; default 600, at least 1)")
    parser.add_argument("--device-taint-rule-version", default="v1", choices=["v1", "v1beta2", "v1alpha3"], help="resource.k8s.io version serving DeviceTaintRules")
    parser.add_argument("--no-admin-access", action="store_true", help="refuse templates that request admin access (DRAAdminAccess off)")
    parser.add_argument("--leader-elect", action="store_true", help="hold a coordination.k8s.io Lease; only the holder acts")
    parser.add_argument("--lease-namespace", default="kube-system", help="namespace of the leader-election Lease")
    parser.add_argument("--lease-name", default="dra-solver-controllers", help="name of the leader-election Lease")
    parser.add_argument("--identity", default="", help="this replica's name in the Lease (default: hostname + random suffix)")
    parser.add_argument("--lease-duration", type=float, default=15.0, help="seconds a Lease holds without renewal before others may take it")
    parser.add_argument("--renew-deadline", type=float, default=10.0, help="seconds the leader keeps trying to renew before it gives up leading")
    parser.add_argument("--retry-period", type=float, default=2.0, help="seconds between attempts to acquire or renew the Lease")
    parser.add_argument("--metrics-address", default="0.0.0.0", help="address the metrics endpoint listens on")
    parser.add_argument("--metrics-port", type=int, default=9090, help="Prometheus /metrics port (0 = any free port, -1 = off)")
    parser.add_argument("--no-events", action="store_true", help="do not record core/v1 Events")
    logsetup.add_logging_arguments(parser)


def options_from(args: argparse.Namespace) -> Options:
    if args.scheduler_binders < 0:
        raise ValueError(f"--scheduler-binders: Invalid value: {args.scheduler_binders}: must be 0 or more")
    if not args.binding_timeout >= 1:
        raise ValueError(f"--binding-timeout: Invalid value: {args.binding_timeout:g}: must be at least 1 second")
    return Options(
        enable=parse_enable(args.enable),
        scheduler_name=args.scheduler_name,
        claim_workers=args.claim_workers,
        scheduler_workers=args.scheduler_workers,
        scheduler_binders=args.scheduler_binders,
        solver_in_flight=args.solver_in_flight,
        eviction_workers=args.eviction_workers,
        leader_elect=args.leader_elect,
        lease_namespace=args.lease_namespace,
        lease_name=args.lease_name,
        identity=args.identity or default_identity(),
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        solver_timeout=args.solver_timeout,
        reservation_ttl=args.reservation_ttl,
        policy=args.policy,
        explain=not args.no_explain,
        admin_access=not args.no_admin_access,
        events=not args.no_events,
        features=features.parse(args.feature_gates),
        binding_timeout=args.binding_timeout,
    )


def solver_client(args: argparse.Namespace) -> Any:
    return Client(
        args.solver,
        timeout=args.solver_timeout,
        tls_ca=args.solver_ca,
        tls_cert=args.solver_cert,
        tls_key=args.solver_key,
        server_name=args.solver_server_name,
    )


def readiness(manager: Any) -> str | None:
    """/readyz: ready once the informers' caches are synced (a standby replica too: it takes
    over at once); not ready after a failure."""
    if manager.failure:
        return str(manager.failure)
    pending = sorted(name for name, informer in manager.cluster.informers.items() if not informer.has_synced())
    return f"caches not synced: {', '.join(pending)}" if pending else None


def settle_collector() -> None:
    """Once the caches hold the cluster: what they hold is taken out of the cyclic collector's
    scans (``gc.freeze``; still freed by reference counting when replaced).

    Why, with full collections on a clock from the start (``hold_full_collections``, as in
    ``dra-solver serve``): the caches keep every pod and claim of the cluster. Left to its
    defaults, the collector rescanned everything kept whenever it grew by a quarter, several
    times while the first lists filled the caches and again as a busy scheduler replaced
    their objects: about 8% of the scheduler's CPU in the 5,000-pod backlog
    (docs/comparing.md, "What bounds the backlog now")."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info("caches synced: %d objects left out of garbage collection scans (%.2f s); full collections on a clock",
             gc.get_freeze_count(), time.perf_counter() - started)


def run(args: argparse.Namespace) -> int:
    logsetup.setup_from_args(args)

    try:
        options = options_from(args)
        if "scheduler" in options.enable and not args.solver:
            raise ValueError("--solver ADDRESS is required when the scheduler is enabled")
        if bool(args.solver_cert) != bool(args.solver_key):
            raise ValueError("--solver-cert and --solver-key go together")
        api = kube.api_client(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster, user_agent=f"dra-solver-controllers/{options.identity}",
                             connections=options.connections())
        kube_api = kube.Kube(api, taint_rule_version=args.device_taint_rule_version)
        client = solver_client(args) if "scheduler" in options.enable else None
        metrics = ControllerMetrics()
        manager = Manager(kube_api, options, solver_client=client, metrics=metrics)
    except Exception as err:  # bad flags, unreadable kubeconfig: one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)  # before the metrics= line that says we are up
    metrics_server = None
    if args.metrics_port >= 0:
        try:
            metrics_server = HttpEndpoint(
                metrics.registry, address=args.metrics_address, port=args.metrics_port, readiness=lambda: readiness(manager)
            )
        except OSError as err:
            print(f"error: metrics endpoint {args.metrics_address}:{args.metrics_port}: {err}", file=sys.stderr)
            return 2
        print(f"metrics={args.metrics_address}:{metrics_server.port}", flush=True)
    else:
        print("metrics=off", flush=True)
    release_collector = hold_full_collections()
    try:
        manager.start()
        settled = False
        while not stop.is_set() and not manager.wait(0.5):
            if not settled and readiness(manager) is None:
                settle_collector()
                settled = True
    finally:
        release_collector()
    lost = manager.lost_leadership.is_set()
    failure = manager.failure
    manager.stop()
    if client is not None:
        client.close()
    if metrics_server is not None:
        metrics_server.stop()
    if lost:
        print("error: leadership lost; exiting so that a fresh start rebuilds all state", file=sys.stderr)
        return 1
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="dra-solver controllers", description="run the companion controllers")
    add_arguments(parser)
    return run(parser.parse_args(argv))
