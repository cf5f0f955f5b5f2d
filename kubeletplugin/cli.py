"""``dra-solver kubelet-plugin``: flags, wiring, signals and the plugin's lifecycle.

Start-up order matters and is the crash-safety contract:

1. set up the Kubernetes client when ``kube`` is used and ask the server once (a bad kubeconfig
   or an unreachable server is one line and exit 2 before anything else happens); read the
   device config and build the backend;
2. **recover** the checkpoint (undo half-prepared/half-unprepared claims) before any socket
   exists, so the kubelet can never call into a half-recovered plugin;
3. serve the DRA socket, then the registration socket (the kubelet registers us only once the
   endpoint it is told about answers); log ``ready``;
4. publish ResourceSlices and poll health in the background.

SIGTERM/SIGINT shut down cleanly: health streams end, registration goes away first, in-flight
prepare/unprepare calls finish, both sockets are removed. SIGUSR1 re-reads the health file.
Defaults are the real kubelet paths, so in a DaemonSet only ``--driver``/``--node`` are needed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from dra_solver.kubeletplugin import discovery, fsutil, simconfig
from dra_solver.kubeletplugin.cdi import DIR_MODE as CDI_DIR_MODE
from dra_solver.kubeletplugin.cdi import CdiHandler
from dra_solver.kubeletplugin.checkpoint import CheckpointError, CheckpointStore
from dra_solver.kubeletplugin.claims import ClaimSource, DirectoryClaimSource, KubeClaimSource
from dra_solver.kubeletplugin.devicestatus import DeviceStatusWriter
from dra_solver.kubeletplugin.driver import PluginCore, PluginServer, SocketError
from dra_solver.kubeletplugin.health import HealthMonitor
from dra_solver.kubeletplugin.metrics import Metrics
from dra_solver.kubeletplugin.publish import (
    DirectorySink,
    KubeSliceSink,
    Publisher,
    PublishLoop,
    SliceSink,
)
from dra_solver.kubeletplugin.state import DeviceState, FaultInjection
from dra_solver.model import InvalidInput, dns1123_subdomain_errors
from dra_solver.service.api import HttpEndpoint, kube, logsetup

log = logging.getLogger("kubeletplugin")

KUBELET_PLUGINS_DIR = "/var/lib/kubelet/plugins"
KUBELET_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
CDI_DIR = "/var/run/cdi"
KUBE = "kube"
DRIVER_NAME_MAX = 63
SHUTDOWN_GRACE_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--driver",
        required=True,
        metavar="NAME",
        help="DRA driver name (a DNS subdomain, e.g. gpu.sim.dra-solver.dev)",
    )
    parser.add_argument(
        "--node",
        required=True,
        metavar="NAME",
        help="this node's name: pool name and spec.nodeName of the slices",
    )
    parser.add_argument(
        "--config", metavar="FILE", type=Path, help="simulated devices (default: 8 GPUs)"
    )
    parser.add_argument(
        "--plugin-dir",
        metavar="DIR",
        type=Path,
        help=f"where dra.sock goes (default {KUBELET_PLUGINS_DIR}/<driver>)",
    )
    parser.add_argument(
        "--registry-dir",
        metavar="DIR",
        type=Path,
        default=Path(KUBELET_REGISTRY_DIR),
        help=f"the kubelet's plugin registration directory (default {KUBELET_REGISTRY_DIR})",
    )
    parser.add_argument(
        "--cdi-dir",
        metavar="DIR",
        type=Path,
        default=Path(CDI_DIR),
        help=f"where CDI spec files go (default {CDI_DIR})",
    )
    parser.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        type=Path,
        help="checkpoint, lock and backend state (default: the plugin dir)",
    )
    parser.add_argument(
        "--publish",
        metavar="kube|DIR",
        default=KUBE,
        help="publish ResourceSlices through the API (kube, default) or as YAML files in DIR",
    )
    parser.add_argument(
        "--claim-source",
        metavar="kube|DIR",
        default=KUBE,
        help="read ResourceClaims from the API (kube, default) or from YAML/JSON files in DIR",
    )
    api = parser.add_mutually_exclusive_group()
    api.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for the API (default: in a pod its service account, else $KUBECONFIG"
        " or ~/.kube/config)",
    )
    api.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    parser.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="address of the /metrics, /healthz and /readyz endpoint (a DaemonSet uses 0.0.0.0)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=-1,
        metavar="PORT",
        help="port of that endpoint (0 = any free port; default -1: off)",
    )
    logsetup.add_logging_arguments(parser)


class _UsageError(Exception):
    pass


def _check_name(flag: str, value: str, *, max_len: int = 253) -> None:
    errors = dns1123_subdomain_errors(value)
    if len(value) > max_len:
        errors.append(f"must be no more than {max_len} characters")
    if errors:
        raise _UsageError(f"{flag}: Invalid value: {value!r}: {'; '.join(errors)}")


def _kube_client(args: argparse.Namespace) -> Any:
    """The shared client (``service.kubeapi``), checked to reach the server.

    Without a flag the plugin does what a DaemonSet pod expects: its service account when
    running in a pod, else the kubeconfig kubectl would use.
    """
    in_cluster = bool(args.in_cluster) or (
        args.kubeconfig is None and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    )
    return kube.api_client(
        kubeconfig=args.kubeconfig, in_cluster=in_cluster, user_agent="dra-solver-kubelet-plugin"
    )


def run(args: argparse.Namespace) -> int:
    logsetup.setup_from_args(args)
    try:
        return _run(args)
    except (
        _UsageError,
        kube.ConfigError,
        InvalidInput,
        CheckpointError,
        SocketError,
        ValueError,
        OSError,
    ) as err:
        # One line, no traceback (logging shares stderr: a log record would say it twice).
        print(f"dra-solver kubelet-plugin: error: {err}", file=sys.stderr)
        return 2


@dataclass
class Plugin:
    """A fully wired plugin; :meth:`start` serves, :meth:`shutdown` tears down."""

    server: PluginServer
    state: DeviceState
    monitor: HealthMonitor
    loop: PublishLoop
    profile: discovery.SimulatedProfile
    metrics: Metrics = field(default_factory=Metrics)
    metrics_address: str = "127.0.0.1"
    metrics_port: int = -1
    endpoint: HttpEndpoint | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    _serving: threading.Event = field(default_factory=threading.Event)

    def readiness(self) -> str | None:
        """/readyz: ready while both sockets serve (after checkpoint recovery, before shutdown)."""
        if not self._serving.is_set():
            return "the plugin's sockets are not serving"
        return None

    def start(self) -> None:
        if self.metrics_port >= 0:
            self.endpoint = HttpEndpoint(
                self.metrics.registry, address=self.metrics_address, port=self.metrics_port, readiness=self.readiness
            )
            log.info("metrics on %s:%d", self.metrics_address, self.endpoint.port)
        self.server.start()
        self._serving.set()
        self.threads = [
            threading.Thread(
                target=self.monitor.run, args=(self.stop_event,), name="health", daemon=True
            ),
            threading.Thread(
                target=self.loop.run, args=(self.stop_event,), name="publish", daemon=True
            ),
        ]
        for t in self.threads:
            t.start()

    def shutdown(self) -> None:
        self._serving.clear()
        self.monitor.stop()
        self.stop_event.set()
        self.loop.kick()
        self.server.stop(SHUTDOWN_GRACE_SECONDS)
        for t in self.threads:
            t.join(timeout=2)
        if self.endpoint is not None:
            self.endpoint.stop()


def build(args: argparse.Namespace) -> Plugin:
    """Everything from the flags, checkpoint recovered, nothing served yet."""
    driver: str = args.driver
    node: str = args.node
    _check_name("--driver", driver, max_len=DRIVER_NAME_MAX)
    _check_name("--node", node)
    faults = FaultInjection.from_env(os.environ)
    # The API first: a kubeconfig or server problem is reported before anything else happens.
    api_client = _kube_client(args) if KUBE in (args.publish, args.claim_source) else None

    # Absolute paths throughout: the kubelet gets the socket path as the endpoint, and gRPC
    # reads "unix://relative/path" as an authority.
    plugin_dir = (args.plugin_dir or Path(KUBELET_PLUGINS_DIR) / driver).absolute()
    checkpoint_dir = (args.checkpoint_dir or plugin_dir).absolute()
    registry_dir: Path = args.registry_dir.absolute()
    cdi_dir: Path = args.cdi_dir.absolute()
    config = simconfig.load_config(args.config)
    health_file = (config.health.file or checkpoint_dir / "health.yaml").absolute()
    fsutil.ensure_dir(checkpoint_dir, mode=0o700, enforce=True)
    fsutil.ensure_dir(cdi_dir, mode=CDI_DIR_MODE, enforce=False)  # shared: created, not tightened

    profile = discovery.SimulatedProfile(
        config, node=node, state_dir=checkpoint_dir / "simulated-devices", health_file=health_file
    )
    devices = profile.enumerate_devices()
    log.info(
        "driver %s on node %s: %d device(s) (%s), %d shared counter set(s)",
        driver,
        node,
        len(devices.devices),
        ", ".join(f"{n} {k}" for k, n in sorted(_kinds(devices).items())) or "none",
        len(devices.counter_sets),
    )
    cdi = CdiHandler(cdi_dir, driver=driver, cdi_class=config.cdi_class)
    metrics = Metrics()
    store = CheckpointStore(checkpoint_dir)
    store.on_write = metrics.checkpoint_written
    state = DeviceState(
        driver=driver,
        node=node,
        profile=profile,
        cdi=cdi,
        store=store,
        lock_path=checkpoint_dir / "plugin.lock",
        faults=faults,
    )
    recovered = state.recover()
    log.info("checkpoint %s: %d claim(s) recovered", state.store.path, len(recovered))
    metrics.prepared_claims.set(store.prepared_claims())

    claims: ClaimSource
    status: DeviceStatusWriter | None = None
    if args.claim_source == KUBE:
        claims = KubeClaimSource(api_client)
        status = DeviceStatusWriter(api_client, driver=driver, node=node)
        log.info("reading ResourceClaims from the Kubernetes API; prepared NICs reported in their status.devices")
    else:
        claims = DirectoryClaimSource(Path(args.claim_source).absolute())
        log.info("reading ResourceClaims from %s", args.claim_source)
    sink: SliceSink
    if args.publish == KUBE:
        sink = KubeSliceSink(api_client, driver=driver, node=node)
        log.info("publishing ResourceSlices through the Kubernetes API")
    else:
        sink = DirectorySink(Path(args.publish).absolute(), driver=driver, node=node)
        log.info("publishing ResourceSlices to %s", args.publish)

    monitor = HealthMonitor(profile, driver=driver, node=node, config=config.health)
    monitor.on_event = metrics.health_changed
    monitor.poll()
    log.info(
        "health from %s (polled every %.1fs, SIGUSR1 re-reads)",
        health_file,
        config.health.poll_seconds,
    )
    loop = PublishLoop(
        Publisher(sink, driver=driver, node=node),
        profile.enumerate_devices,
        monitor.taints,
        resync_seconds=config.resync_seconds,
    )
    monitor.add_listener(loop.kick)
    server = PluginServer(
        driver=driver,
        plugin_dir=plugin_dir,
        registry_dir=registry_dir,
        core=PluginCore(driver=driver, state=state, claims=claims, status=status,
                        devices=lambda: profile.enumerate_devices().by_name(), metrics=metrics),
        health=monitor,
    )
    return Plugin(
        server=server,
        state=state,
        monitor=monitor,
        loop=loop,
        profile=profile,
        metrics=metrics,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
    )


def _run(args: argparse.Namespace) -> int:
    plugin = build(args)
    received: list[int] = []
    _install_signals(plugin.stop_event, plugin.monitor, received)
    plugin.start()
    log.info("ready")
    try:
        while not plugin.stop_event.wait(0.5):
            pass
    finally:
        if received:
            log.info("received %s", signal.Signals(received[0]).name)
        log.info("shutting down")
        plugin.shutdown()
        log.info("stopped; sockets removed")
    return 0


def _kinds(devices: discovery.NodeDevices) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in devices.devices:
        out[d.kind] = out.get(d.kind, 0) + 1
    return out


def _install_signals(stop: threading.Event, monitor: HealthMonitor, received: list[int]) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # embedded: the caller stops the plugin through ``stop``

    # Handlers only flip flags: logging from a signal handler can deadlock on the log lock.
    def on_stop(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    def on_usr1(signum: int, frame: FrameType | None) -> None:
        monitor.request_refresh()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_usr1)
