"""``dra-solver local-cluster up|down``: a whole dra-solver cluster on this machine, no Docker.

``up`` starts upstream's control plane (:mod:`.controlplane`), creates N Node objects, applies
the DeviceClasses from ``deploy/base``, and starts the solver service on the cluster's
inventory, the companion controllers and one simulated kubelet plugin per node (publishing
ResourceSlices, preparing claims). No kubelet or container runtime is needed to schedule:
pods are bound by the ``dra-solver`` scheduler and their claims allocated. Once everything is
ready it prints ``export KUBECONFIG=PATH`` as its last line and returns, leaving the processes
running; ``down`` stops every process it started and removes its state directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from dra_solver.service.localcluster.controlplane import (
    REPO_ROOT,
    Binaries,
    ControlPlane,
    ControlPlaneError,
    binaries,
    spawn,
)
from dra_solver.service.logsetup import LOG_FORMATS

DRIVER = "gpu.sim.dra-solver.dev"
DEVICE_CLASSES = REPO_ROOT / "deploy" / "base" / "deviceclasses.yaml"
DEVICES_CONFIGMAP = REPO_ROOT / "deploy" / "base" / "kubelet-plugin-devices.yaml"
STATE_FILE = "state.json"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def default_state_dir() -> Path:
    env = os.environ.get("DRA_SOLVER_LOCAL_CLUSTER_DIR")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "dra-solver" / "local-cluster"


def _say(msg: str, prog: str = "local-cluster") -> None:
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


def node_object(name: str, *, cpu: str = "64", memory: str = "512Gi", pods: str = "110",
                labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as a kubelet would register it: allocatable resources and a Ready condition."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "simulated by dra-solver local-cluster",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        },
    }


def create_node(cp: ControlPlane, node: dict[str, Any]) -> None:
    """Create a Node and write its status (the API server ignores status on create)."""
    name = node["metadata"]["name"]
    cp.request("POST", "/api/v1/nodes", {k: v for k, v in node.items() if k != "status"})
    cp.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": node["status"]},
               content_type="application/merge-patch+json")
    # The API server taints every new Node not-ready (TaintNodesByCondition); upstream's node
    # lifecycle controller lifts the taint once the kubelet reports Ready. That controller does
    # not run here, so do its part for the Ready node just written.
    taints = cp.request("GET", f"/api/v1/nodes/{name}")["spec"].get("taints", [])
    kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
    if kept != taints:
        cp.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}},
                   content_type="application/merge-patch+json")


def simulated_devices_config() -> str:
    """The devices.yaml the DaemonSet mounts (from the ConfigMap in deploy/base)."""
    cm = yaml.safe_load(DEVICES_CONFIGMAP.read_text())
    return str(cm["data"]["devices.yaml"])


def _wait_line(log: Path, prefix: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
        if proc.poll() is not None:
            raise ControlPlaneError(f"{log.stem} exited (code {proc.returncode}); see {log}")
        time.sleep(0.1)
    raise ControlPlaneError(f"{log.stem} printed no '{prefix}' line within {timeout:.0f} s; see {log}")


def dra_solver_command() -> list[str]:
    return [sys.executable, "-m", "dra_solver.cli"]


class LocalCluster:
    """The processes ``up`` started, recorded in ``state.json`` of one state directory, so that
    ``down`` (another process, later) stops exactly them."""

    def __init__(self, state_dir: Path | None = None, *, prog: str = "local-cluster") -> None:
        self.dir = state_dir or default_state_dir()
        self.prog = prog

    def _say(self, msg: str) -> None:
        _say(msg, self.prog)

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "control-plane" / "admin.kubeconfig"

    def _state(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.dir / STATE_FILE).read_text()))
        except (OSError, ValueError):
            return {}

    def up(self, *, nodes: int = 2, bins: Binaries | None = None, timeout: float = 180.0, log_format: str = "text",
           companions: bool = True) -> Path:
        """Start everything and return the admin kubeconfig. ``companions=False`` starts the
        control plane alone (``scripts/kube-up``): no Nodes, DeviceClasses or dra-solver processes."""
        running = [n for n, pid in self._state().get("pids", {}).items() if _group_alive(pid)]
        if running:
            what = "a local cluster" if companions else "a control plane"
            raise ControlPlaneError(f"{what} is already up (state in {self.dir}): run 'down' first")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        logs = self.dir / "logs"
        logs.mkdir()
        pids: dict[str, int] = {}
        state: dict[str, Any] = {"pids": pids, "nodes": nodes if companions else 0}

        def save() -> None:
            (self.dir / STATE_FILE).write_text(json.dumps(state, indent=2))

        try:
            self._say("building or reusing upstream binaries")
            bins = bins or binaries()
            cp = ControlPlane(bins, workdir=self.dir / "control-plane")
            self._say("starting etcd, kube-apiserver, kube-controller-manager")
            cp.start(timeout=timeout)
            pids.update(cp.pids())
            state["apiserver"] = cp.url
            save()
            if not companions:
                self._say(f"ready: kube-apiserver at {cp.url}, logs in {cp.dir}")
                return cp.kubeconfig
            names = [f"node-{i}" for i in range(1, nodes + 1)]
            for name in names:
                create_node(cp, node_object(name))
            cp.kubectl("apply", "-f", str(DEVICE_CLASSES))
            env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "PYTHONUNBUFFERED": "1"}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
            logging_flag = f"--log-format={log_format}"

            self._say("starting the solver service")
            solver_log = logs / "solver.log"
            solver = spawn([*dra_solver_command(), "serve", f"--kubeconfig={cp.kubeconfig}",
                             "--port=0", "--metrics-port=0", logging_flag], solver_log, env)
            pids["solver"] = solver.pid
            save()
            line = _wait_line(solver_log, "grpc=", solver, timeout)
            grpc_addr = line.split()[0].split("=", 1)[1]
            state["solver"] = grpc_addr

            self._say(f"starting simulated kubelet plugins on {nodes} node(s)")
            devices = self.dir / "devices.yaml"
            devices.write_text(simulated_devices_config())
            for name in names:
                node_dir = self.dir / "nodes" / name
                node_dir.mkdir(parents=True)
                proc = spawn([*dra_solver_command(), "kubelet-plugin", f"--driver={DRIVER}", f"--node={name}",
                               f"--config={devices}", f"--plugin-dir={node_dir / 'plugins'}",
                               f"--registry-dir={node_dir / 'plugins_registry'}", f"--cdi-dir={node_dir / 'cdi'}",
                               "--publish=kube", "--claim-source=kube", logging_flag], logs / f"kubelet-plugin-{name}.log", env)
                pids[f"kubelet-plugin-{name}"] = proc.pid
            save()

            self._say("starting the controllers")
            ctl = spawn([*dra_solver_command(), "controllers", f"--kubeconfig={cp.kubeconfig}",
                          f"--solver={grpc_addr}", "--metrics-port=0", logging_flag], logs / "controllers.log", env)
            pids["controllers"] = ctl.pid
            save()
            _wait_line(logs / "controllers.log", "metrics=", ctl, timeout)
            plugins = {n: logs / f"kubelet-plugin-{n}.log" for n in names}
            self._wait_slices(cp, plugins, [pids[f"kubelet-plugin-{n}"] for n in names], timeout)
            self._say(f"ready: {nodes} node(s), solver at {grpc_addr}, logs in {logs}")
        except BaseException:
            # Stop what started; keep the logs for the error message to point at (the next
            # 'up' or 'down' removes them).
            self.down(quiet=True, keep_logs=True)
            raise
        return cp.kubeconfig

    @staticmethod
    def _wait_slices(cp: ControlPlane, plugins: dict[str, Path], plugin_pids: list[int], timeout: float) -> None:
        """Until every node has published ResourceSlices; a plugin that exits is an error."""
        deadline = time.monotonic() + timeout
        missing = set(plugins)
        while missing and time.monotonic() < deadline:
            items = cp.request("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]
            missing = set(plugins) - {s["spec"].get("nodeName") for s in items}
            for name, pid in zip(plugins, plugin_pids, strict=True):
                if name in missing and not _group_alive(pid):
                    raise ControlPlaneError(f"the kubelet plugin of {name} exited; see {plugins[name]}")
            if missing:
                time.sleep(0.2)
        if missing:
            raise ControlPlaneError(f"no ResourceSlices published for {sorted(missing)} within {timeout:.0f} s")

    def down(self, *, quiet: bool = False, keep_logs: bool = False) -> bool:
        state = self._state()
        pids: dict[str, int] = state.get("pids", {})
        # Companions first (all at once), then the control plane, etcd last.
        control_plane = ("kube-controller-manager", "kube-apiserver", "etcd")
        _stop_groups([pid for n, pid in pids.items() if n not in control_plane])
        _stop_groups([pids[n] for n in control_plane[:2] if n in pids])
        _stop_groups([pids[n] for n in control_plane[2:] if n in pids])
        existed = self.dir.exists()
        if keep_logs:
            (self.dir / STATE_FILE).unlink(missing_ok=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if not quiet:
            self._say("stopped" if pids else "nothing was running")
        return existed


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count: after ``up``
    returned, the processes belong to init, which may reap them late)."""
    live = _live_groups()
    if live is None:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return pgid in live


def _live_groups() -> set[int] | None:
    """Process groups with a running (not zombie) member, from /proc; None without /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    groups = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2:].split()
        if len(fields) > 2 and fields[0] not in ("Z", "X"):
            groups.add(int(fields[2]))
    return groups


def _stop_groups(pgids: list[int], timeout: float = 15.0) -> None:
    """SIGTERM the process groups, SIGKILL what is left of them after ``timeout``."""
    live = []
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
            live.append(pgid)
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        for pgid in live:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pgid, os.WNOHANG)
        running = _live_groups()
        live = [pgid for pgid in live if (pgid in running if running is not None else _group_alive(pgid))]
        if live:
            time.sleep(0.1)
    for pgid in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down"], help="start the local cluster, or stop it")
    parser.add_argument("--nodes", type=int, default=2, help="simulated nodes, each with the bundled devices (default 2)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where certificates, data and logs live (default ~/.cache/dra-solver/local-cluster)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="up: the log format of the dra-solver processes it starts (their logs are in "
                             "STATE_DIR/logs): text, klog's (default), or json")


def run(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.state_dir)
    if args.action == "down":
        cluster.down()
        return 0
    if args.nodes < 1:
        print("local-cluster: --nodes: must be at least 1", file=sys.stderr)
        return 2
    try:
        kubeconfig = cluster.up(nodes=args.nodes, log_format=args.log_format)
    except (ControlPlaneError, OSError, subprocess.SubprocessError) as err:
        print(f"local-cluster: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("local-cluster: interrupted; stopped what had started", file=sys.stderr)
        return 130
    print(f"export KUBECONFIG={kubeconfig}")
    return 0
