"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

The binaries are upstream's own, built from the Go module proxy by ``scripts/build-upstream.sh``
at the versions pinned in ``tools/upstream-versions.env``. The control plane is what a real
cluster runs beside dra-solver's companions: TLS with its own CA, client certificates,
RBAC authorization, service-account tokens, the DRA APIs (resource.k8s.io/v1 including
DeviceTaintRule) and the scheduling.k8s.io PodGroup API. kube-controller-manager runs the
controllers a cluster has beside ours (garbage collector, namespace, service accounts and their
tokens), never upstream's resourceclaim or device-taint-eviction controllers, which dra-solver
replaces.

Everything lives in one work directory (certificates, etcd data, logs, kubeconfigs); ``stop``
ends every process and, when the directory was created here, removes it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-upstream.sh"

FEATURE_GATES: dict[str, bool] = {
    # scheduling.k8s.io PodGroup / Workload (beta in v1.37, off by default) and what builds on it.
    "GenericWorkload": True,
    "DRAWorkloadResourceClaims": True,
    "TopologyAwareWorkloadScheduling": True,
}
"""Gates turned on beyond v1.37's defaults (DRA, DeviceTaintRule, binding conditions, extended
resources backed by DRA and device status are on by default; nothing else DRA needs a gate)."""

RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
"""API versions served beyond the defaults: PodGroup and Workload are an off-by-default beta."""

KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
)
"""What kube-controller-manager runs: a real cluster's housekeeping, none of DRA's controllers."""


AUDIT_POLICY = """\
# Who did what to which resource, without bodies: an event when the answer is known (and one
# when a watch starts). Enough to tell which RBAC verbs each ServiceAccount used and which it was refused.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""
"""The audit policy of ``ControlPlane(audit_log=True)``."""


class ControlPlaneError(Exception):
    """A component could not be built, started or reached; the message says which and why."""


@dataclass(frozen=True)
class Binaries:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")


def binaries(*, build: bool = True, modules: Sequence[str] = ("etcd", "kube")) -> Binaries:
    """Upstream's binaries, built into the cache first when the pins changed.

    ``DRA_SOLVER_K8S_BIN`` names a directory of ready binaries and skips building.
    """
    ready = os.environ.get("DRA_SOLVER_K8S_BIN")
    if ready:
        found = Binaries(Path(ready))
    else:
        if not BUILD_SCRIPT.exists():
            raise ControlPlaneError(f"{BUILD_SCRIPT} not found: set DRA_SOLVER_K8S_BIN to the binaries")
        args = [str(BUILD_SCRIPT), "--print-dir", *modules]
        if not build:
            args = [str(BUILD_SCRIPT), "--print-dir", "--no-build", *modules]
        proc = subprocess.run(args, stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            raise ControlPlaneError(
                f"building upstream's components failed (exit {proc.returncode}): "
                f"run {BUILD_SCRIPT.relative_to(REPO_ROOT)} to see why"
            )
        found = Binaries(Path(proc.stdout.strip().splitlines()[-1]))
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl"):
        if not found.path(name).is_file():
            raise ControlPlaneError(f"{found.path(name)} is missing")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {proc.stderr.strip()[:400]}")


def spawn(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``args`` in a session (and process group) of its own, output appended to ``log``:
    stopping the group stops whatever it started too."""
    with log.open("ab") as out:
        return subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)


@dataclass
class _Proc:
    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, *, env: dict[str, str] | None = None) -> None:
        self.popen = spawn(self.args, self.log, env)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, *, timeout: float = 15.0, sig: int = signal.SIGTERM) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self.popen = None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on free loopback ports.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    bins: Binaries
    workdir: Path | None = None
    extra_apiserver_args: Sequence[str] = ()
    feature_gates: dict[str, bool] = field(default_factory=dict)
    controller_manager: bool = True
    audit_log: bool = False
    """Write the API server's audit log (Metadata level, JSON lines) to :attr:`audit_log_path`."""
    controllers: Sequence[str] = KCM_CONTROLLERS
    """kube-controller-manager's ``--controllers`` (e.g. add ``resourceclaim-controller`` when
    kube-scheduler, not dra-solver, allocates claims from templates)."""
    controller_manager_args: Sequence[str] = ()
    """Extra kube-controller-manager flags (e.g. ``--kube-api-qps``)."""

    def __post_init__(self) -> None:
        self._owned = self.workdir is None
        self.dir = Path(self.workdir or tempfile.mkdtemp(prefix="dra-solver-kube-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = self.dir / "pki"
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self.audit_log_path = self.dir / "audit.log"
        self._procs: dict[str, _Proc] = {}
        self._ssl: dict[str, ssl.SSLContext] = {}

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, timeout: float = 120.0) -> None:
        try:
            self._make_pki()
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            self._write_kubeconfigs()
            if self.controller_manager:
                self._start_controller_manager()
                self.wait_for_service_account("default", "default", timeout=timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self._procs.get(name)
            if proc is not None:
                proc.stop()
        if self._owned:
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart_apiserver(self, *, down_for: float = 0.0, timeout: float = 120.0, crash: bool = False) -> None:
        """Stop kube-apiserver, wait ``down_for`` seconds, start it again on the same port.

        ``crash``: SIGKILL instead of a graceful stop (which waits up to 15 s for open watches).
        """
        self._procs["kube-apiserver"].stop(sig=signal.SIGKILL if crash else signal.SIGTERM)
        time.sleep(down_for)
        self._procs["kube-apiserver"].start()
        self._wait_ready(timeout)

    def pids(self) -> dict[str, int]:
        return {n: p.popen.pid for n, p in self._procs.items() if p.popen is not None}

    def exited(self, name: str) -> str:
        """"" while component ``name`` (started) runs; else the end of its log."""
        proc = self._procs.get(name)
        if proc is None or proc.popen is None or proc.alive():
            return ""
        return f"{name} exited (code {proc.popen.returncode}); its log ends:\n{proc.tail()}"

    # -- certificates -----------------------------------------------------------------------

    def _make_pki(self) -> None:
        self.pki.mkdir(parents=True, exist_ok=True)
        self.pki.chmod(0o700)
        ssl_dir = self.pki
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                 "-days", "3650", "-subj", "/CN=dra-solver-local-ca", cwd=ssl_dir)
        (ssl_dir / "serving.ext").write_text(
            "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
            "extendedKeyUsage=serverAuth\n"
        )
        self._issue("apiserver", "/CN=kube-apiserver", ext="serving.ext")
        (ssl_dir / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        self._issue("admin", "/O=system:masters/CN=kubernetes-admin", ext="client.ext")
        self._issue("controller-manager", "/CN=system:kube-controller-manager", ext="client.ext")
        self._issue("scheduler", "/CN=system:kube-scheduler", ext="client.ext")
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=ssl_dir)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=ssl_dir)

    def _issue(self, name: str, subject: str, *, ext: str) -> None:
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject, cwd=self.pki)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "3650", "-extfile", ext, cwd=self.pki)

    # -- components ------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> _Proc:
        proc = _Proc(name, args, self.dir / f"{name}.log")
        self._procs[name] = proc
        proc.start()
        return proc

    def _start_etcd(self, timeout: float) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        proc = self._spawn("etcd", [
            str(self.bins.path("etcd")),
            "--name=default", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=4294967296",
        ])
        self._wait(lambda: self._etcd_ok(), timeout, proc, "etcd")

    def _etcd_ok(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _gates(self) -> str:
        gates = {**FEATURE_GATES, **self.feature_gates}
        return ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))

    def _start_apiserver(self, timeout: float) -> None:
        pki = self.pki
        proc = self._spawn("kube-apiserver", [
            str(self.bins.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            # The endpoint reconciler refuses a loopback advertise address, and nothing outside
            # this machine could reach one anyway: publish no endpoints for the in-cluster
            # "kubernetes" Service.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            f"--runtime-config={RUNTIME_CONFIG}",
            f"--feature-gates={self._gates()}",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            "--profiling=false",
            *self._audit_args(),
            *self.extra_apiserver_args,
        ])
        self._wait_ready(timeout, proc)

    def _audit_args(self) -> list[str]:
        if not self.audit_log:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        # Blocking mode (the log backend's default) writes each event before the response
        # goes out, so the log is complete as soon as a client has its answer.
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log_path}",
                "--audit-log-format=json", "--audit-log-mode=blocking"]

    def audit_events(self) -> list[dict[str, Any]]:
        """Every event in the audit log so far (``audit_log=True``), oldest first."""
        events = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.audit_log_path.read_text(errors="replace").splitlines():
                if line.strip():
                    events.append(json.loads(line))
        return events

    def _wait_ready(self, timeout: float, proc: _Proc | None = None) -> None:
        self._wait(lambda: self._get_text("/readyz") == "ok", timeout,
                   proc or self._procs["kube-apiserver"], "kube-apiserver")

    def _start_controller_manager(self) -> None:
        self._spawn("kube-controller-manager", [
            str(self.bins.path("kube-controller-manager")),
            f"--kubeconfig={self.dir / 'controller-manager.kubeconfig'}",
            f"--controllers={','.join(self.controllers)}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            "--leader-elect=false", "--secure-port=0",
            f"--feature-gates={self._gates()}",
            *self.controller_manager_args,
        ])

    def start_scheduler(self, *, config: str | None = None, extra_args: Sequence[str] = ()) -> None:
        """Start upstream's kube-scheduler as ``system:kube-scheduler`` (its own client
        certificate, the bootstrap RBAC role), with ``config`` (a KubeSchedulerConfiguration
        document) or its defaults. With ``config`` the deprecated flags are ignored, so the
        document names :attr:`scheduler_kubeconfig` and turns leader election off itself.
        Its log is ``<dir>/kube-scheduler.log``; :meth:`stop` ends it."""
        args = [
            str(self.bins.path("kube-scheduler")),
            f"--kubeconfig={self.scheduler_kubeconfig}",
            "--leader-elect=false", "--secure-port=0",
            f"--feature-gates={self._gates()}",
        ]
        if config is not None:
            path = self.dir / "kube-scheduler-config.yaml"
            path.write_text(config)
            args.append(f"--config={path}")
        self._spawn("kube-scheduler", [*args, *extra_args])

    @staticmethod
    def _wait(ok: Any, timeout: float, proc: _Proc, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            if not proc.alive():
                raise ControlPlaneError(f"{what} exited during start-up; its log ends:\n{proc.tail()}")
            time.sleep(0.1)
        raise ControlPlaneError(f"{what} was not ready after {timeout:.0f} s; its log ends:\n{proc.tail()}")

    # -- access -------------------------------------------------------------------------

    def ssl_context(self, user: str = "admin") -> ssl.SSLContext:
        """One context per user, made once: loading the CA and the key pair on every request
        cost more than the request itself."""
        ctx = self._ssl.get(user)
        if ctx is None:
            ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
            ctx.load_cert_chain(str(self.pki / f"{user}.crt"), str(self.pki / f"{user}.key"))
            self._ssl[user] = ctx
        return ctx

    def _get_text(self, path: str) -> str | None:
        try:
            req = urllib.request.Request(self.url + path)
            with urllib.request.urlopen(req, timeout=3, context=self.ssl_context()) as r:
                return str(r.read().decode())
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return None

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """One admin request to the API server; the decoded JSON answer (raises on HTTP errors)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, timeout=30, context=self.ssl_context()) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def _kubeconfig(self, user: str, credentials: dict[str, str]) -> dict[str, Any]:
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }

    def _cert_user(self, user: str) -> dict[str, str]:
        return {
            "client-certificate-data": base64.b64encode((self.pki / f"{user}.crt").read_bytes()).decode(),
            "client-key-data": base64.b64encode((self.pki / f"{user}.key").read_bytes()).decode(),
        }

    @property
    def scheduler_kubeconfig(self) -> Path:
        """The kubeconfig of ``system:kube-scheduler`` (client certificate), written at start."""
        return self.dir / "scheduler.kubeconfig"

    def _write_kubeconfigs(self) -> None:
        for user, path in (("admin", self.kubeconfig),
                           ("controller-manager", self.dir / "controller-manager.kubeconfig"),
                           ("scheduler", self.dir / "scheduler.kubeconfig")):
            _write_private(path, json.dumps(self._kubeconfig(user, self._cert_user(user)), indent=2))

    def service_account_kubeconfig(self, namespace: str, name: str, *, path: Path | None = None,
                                   expiration_seconds: int = 86400,
                                   bound_pod: dict[str, Any] | None = None) -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/name`` with a bound token.

        ``bound_pod`` (a Pod object of that ServiceAccount) binds the token to the pod, as the
        kubelet's projected tokens are: the server then adds the pod's node name to the user's
        extra info, which per-node admission policies read.
        """
        self.wait_for_service_account(namespace, name)
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if bound_pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": bound_pod["metadata"]["name"],
                                      "uid": bound_pod["metadata"]["uid"]}
        token = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )["status"]["token"]
        path = path or self.dir / f"sa-{namespace}-{name}.kubeconfig"
        _write_private(path, json.dumps(self._kubeconfig(f"{namespace}-{name}", {"token": token}), indent=2))
        return path

    def wait_for_service_account(self, namespace: str, name: str, *, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
                return
            except urllib.error.HTTPError as err:
                if err.code != 404 or time.monotonic() > deadline:
                    raise ControlPlaneError(f"serviceaccount {namespace}/{name}: {err}") from err
            time.sleep(0.1)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bins.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, check=False, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc

    # -- faults for tests ---------------------------------------------------------------------

    def etcd_revision(self) -> int:
        body = json.dumps({"key": base64.b64encode(b"/").decode()}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.etcd_port}/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(json.loads(r.read())["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd's history up to ``revision`` (default: now); watches older than it get 410."""
        rev = revision or self.etcd_revision()
        body = json.dumps({"revision": str(rev), "physical": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.etcd_port}/v3/kv/compaction", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        return rev

    def logs(self) -> Iterator[tuple[str, Path]]:
        for name, proc in self._procs.items():
            yield name, proc.log


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
