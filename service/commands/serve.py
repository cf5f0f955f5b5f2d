"""``dra-solver serve``: run the gRPC allocation service.

    dra-solver serve [--inventory PATH | --kubeconfig FILE | --in-cluster]
                     [--port 50051] [--metrics-port 9090] [--address 127.0.0.1]
                     [--tls-cert FILE --tls-key FILE [--client-ca FILE]]
                     [--validate strict|warn|ignore]

The first line on stdout is ``grpc=HOST:PORT metrics=HOST:PORT`` with the ports actually bound
(``--port 0`` and ``--metrics-port 0`` pick free ones), so scripts and tests can connect. It comes
as soon as the ports are open, before the inventory is loaded: until then gRPC health says
NOT_SERVING, ``/readyz`` is not ready, calls get UNAVAILABLE, and stderr shows progress
("inventory: loaded 2,500/21,869 nodes, ..."). An inventory that cannot be loaded at all ends the
process with one line on stderr and exit code 2.
``--address unix:/path/to/socket`` listens on a unix socket instead. Plaintext is allowed only on
loopback and unix sockets unless ``--insecure`` is given; SIGTERM drains in-flight calls.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING

from dra_solver.model import DraSolverError, FeatureGates, check_mode
from dra_solver.service import engine as e
from dra_solver.service.commands import flagchecks as checks
from dra_solver.service.commands.gateflag import add_feature_gates_argument
from dra_solver.service.files import add_validate_argument, one_line
from dra_solver.service.gc_pauses import FULL_COLLECTION_INTERVAL
from dra_solver.service.inventory import FileSource, InventorySource, KubeSource
from dra_solver.service.kubeapi.client import ConfigError, api_client
from dra_solver.service.logsetup import add_logging_arguments, setup_from_args
from dra_solver.service.metrics import Metrics
from dra_solver.service.python_cpu import allowed_cpus, choose_cpu
from dra_solver.service.reservations import ReservationStore
from dra_solver.service.server import ServerDeps, Service
from dra_solver.service.tls import is_loopback, server_credentials

if TYPE_CHECKING:
    from dra_solver.service.server import Service


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--inventory", metavar="PATH", help="file or directory of YAML/JSON objects (reloaded on change)")
    src.add_argument("--kubeconfig", metavar="FILE", help="list+watch the inventory from this cluster")
    src.add_argument("--in-cluster", action="store_true", help="list+watch using the pod's service account")
    parser.add_argument("--address", default="127.0.0.1", help="listen address, or unix:PATH (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=50051, help="gRPC port, 0 to 65535 (0 = any free port; default 50051)")
    parser.add_argument("--metrics-address", default=None, help="metrics listen address (default: --address, or 127.0.0.1 for unix:)")
    parser.add_argument("--metrics-port", type=int, default=9090, help="Prometheus /metrics port, 0 to 65535 (0 = any free port, -1 = off)")
    parser.add_argument("--tls-cert", metavar="FILE", help="server certificate chain (PEM); enables TLS")
    parser.add_argument("--tls-key", metavar="FILE", help="server private key (PEM)")
    parser.add_argument("--client-ca", metavar="FILE", help="require client certificates signed by this CA (mTLS)")
    parser.add_argument("--insecure", action="store_true", help="allow plaintext on a non-loopback address")
    add_feature_gates_argument(parser, what="every request (a request's own gates apply on top)")
    parser.add_argument("--max-concurrent", type=int, default=64, help="calls in flight before RESOURCE_EXHAUSTED")
    parser.add_argument("--workers", type=int, default=16, help="threads serving calls")
    parser.add_argument("--max-streams", type=int, default=None,
                        help="ScheduleStream calls open at once, each holding a serving thread (default: half of --workers)")
    parser.add_argument("--max-message-bytes", type=int, default=64 * 1024 * 1024, help="largest gRPC message accepted or sent, in bytes (1024 to 2147483647)")
    parser.add_argument("--max-claims", type=int, default=32, help="claims per call")
    parser.add_argument("--solve-timeout", type=float, default=10.0, help="solver seconds when the caller sets no deadline")
    parser.add_argument("--max-solve-seconds", type=float, default=60.0, help="solver seconds a caller's deadline may ask for at most")
    parser.add_argument("--reservation-ttl", type=float, default=30.0, help="default reservation lifetime (seconds)")
    parser.add_argument("--max-reservations", type=int, default=10_000, help="reservations held at once before RESOURCE_EXHAUSTED (default 10000)")
    parser.add_argument("--max-reservations-per-caller", type=int, default=2_000,
                        help="reservations one caller (client certificate name, else peer host) holds at once (default 2000)")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between inventory file checks (0.05 to 86400)")
    add_validate_argument(parser, what="--inventory files")
    parser.add_argument("--no-validate", action="store_true", help="the same as --validate=ignore (kept for old scripts)")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds in-flight calls get on shutdown (0 to 86400)")
    parser.add_argument("--python-cpu", default="none", metavar="none|auto|CPU",
                        help="keep the service's Python threads on one CPU (gRPC's I/O threads stay free): none (default), "
                        "auto (the last CPU it may use, when it may use two or more) or a CPU number (docs/deploying.md)")
    add_logging_arguments(parser)


def _hostport(host: str, port: int) -> str:
    if host.startswith("unix:"):
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(args: argparse.Namespace) -> int:
    setup_from_args(args)

    try:
        service = build(args)
    except (DraSolverError, ConfigError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        service.listen()
    except OSError as err:
        service.stop(0)
        if service.server is None:  # not past the gRPC port
            print(f"error: {'--address' if args.address.startswith('unix:') else '--port'}: {err}", file=sys.stderr)
            return 2
        # The gRPC port is open: the metrics endpoint's address or port is at fault.
        where = _hostport(_metrics_host(args), args.metrics_port)
        print(f"error: {_metrics_flag(args, err)}: cannot listen on {where}: {err.strerror or err}", file=sys.stderr)
        return 2
    except (DraSolverError, RuntimeError) as err:
        service.stop(0)
        print(f"error: {err}", file=sys.stderr)
        return 2
    metrics = "off"
    if service.metrics_server is not None:
        metrics = _hostport(service.metrics_server.address, service.metrics_server.port)
    done = threading.Event()
    failed: list[BaseException] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    def on_load_failed(err: BaseException) -> None:
        failed.append(err)
        done.set()

    # Before the line that tells a caller we are up: a SIGTERM right after it must drain.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    grpc_address = _hostport(args.address, service.port)
    # The ports first, then the inventory: health says NOT_SERVING (and /readyz not ready)
    # with progress lines on stderr until it is loaded.
    print(f"grpc={grpc_address} metrics={metrics}", flush=True)
    logging.getLogger(__name__).info("listening for gRPC on %s, metrics on %s; loading the inventory", grpc_address, metrics)
    service.load_in_background(on_load_failed)
    done.wait()
    if failed:
        # The inventory's content is bad (a file that does not parse, nothing usable): one line,
        # exit 2, as before the ports were opened first.
        service.stop(0)
        problem = failed[0]
        shown = str(problem) if isinstance(problem, DraSolverError | OSError) else f"{type(problem).__name__}: {problem}"
        print(f"error: {one_line(shown)}", file=sys.stderr)
        return 2
    logging.getLogger(__name__).info("shutting down: draining in-flight calls (grace %.1fs)", args.grace)
    if not service.stop(args.grace):
        # A call still running after the grace period (stuck decoding, say) must not keep
        # the process alive: its worker thread would be joined at interpreter exit.
        logging.getLogger(__name__).warning("calls still running after the %.1fs grace period: exiting without them", args.grace)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


def _metrics_host(args: argparse.Namespace) -> str:
    return str(args.metrics_address or ("127.0.0.1" if args.address.startswith("unix:") else args.address))


def _metrics_flag(args: argparse.Namespace, err: OSError) -> str:
    """The flag to blame for a metrics endpoint that cannot listen."""
    if err.errno in (errno.EADDRINUSE, errno.EACCES):
        return "--metrics-port"
    return "--metrics-address" if args.metrics_address else "--address"


_LIMITS: dict[str, checks.Rule] = {
    "--port": checks.port(),
    "--metrics-port": checks.port(off=True),
    "--workers": checks.integer(least=1),
    "--max-concurrent": checks.integer(least=1),
    "--max-streams": checks.integer(least=0),
    "--max-message-bytes": checks.integer(least=1024, most=checks.MAX_MESSAGE_BYTES),
    "--max-claims": checks.integer(least=1),
    "--max-reservations": checks.integer(least=1),
    "--max-reservations-per-caller": checks.integer(least=1),
    "--solve-timeout": checks.seconds(),
    "--max-solve-seconds": checks.seconds(),
    "--reservation-ttl": checks.seconds(),
    "--poll-interval": checks.seconds(least=checks.MIN_POLL_SECONDS),
    "--grace": checks.seconds(zero=True),
}
"""Every numeric flag's bounds (docs/cli.md states them): checked before anything starts."""


def build(args: argparse.Namespace) -> Service:
    checks.check(args, _LIMITS)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise checks.FlagError("--tls-cert and --tls-key go together")
    if args.client_ca and not args.tls_cert:
        raise checks.FlagError("--client-ca needs --tls-cert and --tls-key")
    if not args.tls_cert and not args.insecure and not is_loopback(args.address):
        raise checks.FlagError(f"refusing plaintext on non-loopback address {args.address}: give --tls-cert/--tls-key, or --insecure")
    try:
        python_cpu = choose_cpu(args.python_cpu, allowed_cpus())
    except ValueError as err:
        raise checks.FlagError(f"--python-cpu: {one_line(str(err))[:200]}") from None
    if args.max_streams is not None and args.max_streams >= args.workers:
        # Each open stream holds a serving thread: as many streams as threads would leave none for calls.
        raise checks.FlagError(f"--max-streams: must be less than --workers ({args.workers}): {args.max_streams}")
    source: InventorySource
    if args.inventory:
        mode = check_mode("ignore" if args.no_validate else args.validate)
        source = FileSource(args.inventory, poll_interval=args.poll_interval, validate=mode != "ignore", field_validation=mode)
    elif args.kubeconfig or args.in_cluster:
        source = KubeSource(api_client(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster, user_agent="dra-solver-serve"))
    else:
        raise ValueError("give an inventory: --inventory PATH, --kubeconfig FILE or --in-cluster")
    metrics = Metrics()
    if isinstance(source, KubeSource):
        source.on_relist = lambda kind: metrics.inventory_updates.labels(status="relist").inc()
    if isinstance(source, FileSource):
        source.on_reload = lambda ok: metrics.inventory_updates.labels(status="success" if ok else "error").inc()
    engine = e.Engine(
        source=source,
        reservations=ReservationStore(
            default_ttl=args.reservation_ttl, max_total=args.max_reservations, max_per_caller=args.max_reservations_per_caller
        ),
        metrics=metrics,
        gates=FeatureGates.parse(args.feature_gates),
        limits=e.Limits(
            max_claims=args.max_claims,
            default_solve_seconds=args.solve_timeout,
            max_solve_seconds=args.max_solve_seconds,
            # One CEL environment per feature set (4) and serving thread: never evicted.
            cel_environments=4 * max(1, args.workers),
        ),
    )
    creds = server_credentials(cert=args.tls_cert, key=args.tls_key, client_ca=args.client_ca) if args.tls_cert else None
    deps = ServerDeps(
        engine=engine,
        max_workers=args.workers,
        max_concurrent_rpcs=args.max_concurrent,
        max_message_bytes=args.max_message_bytes,
        max_streams=args.max_streams,
        credentials=creds,
    )
    address = args.address if args.address.startswith("unix:") else _hostport(args.address, args.port)
    return Service(
        address, deps, metrics_address=_metrics_host(args), metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        full_collection_interval=FULL_COLLECTION_INTERVAL, python_cpu=python_cpu,
    )
