"""The kubelet-facing side: DRA and registration servicers on their unix sockets.

Two gRPC servers, as the kubelet expects them:

- ``<plugin dir>/dra.sock`` serves ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and its
  v1beta1 twin (``NodePrepareResources``, ``NodeUnprepareResources``) plus
  ``v1.DRAResourceHealth`` and ``v1alpha1.DRAResourceHealth`` (``NodeWatchResources``);
- ``<registry dir>/<driver>-reg.sock`` serves ``pluginregistration.Registration``: the kubelet's
  plugin watcher finds the socket, calls ``GetInfo`` (type ``DRAPlugin``, the driver name, the
  DRA socket as endpoint, the services above as ``supported_versions``) and reports the outcome
  through ``NotifyRegistrationStatus``.

Servicers stay thin: turn the request into claim references, look the claims up (slow API
calls happen before the state lock, as upstream's helper does), hand them to
``state.DeviceState`` and turn its per-claim results into the response. Every claim in the
request gets exactly one entry in the response; one bad claim never fails the call. A claim
reference is checked before it is used (``state.claim_ref_problem``: namespace and name as the
API server validates them, a UID that is one plain file name), so nothing the kubelet sends can
name a path outside the plugin's directories.

Sockets are created with mode 0600 inside directories of mode 0700 (the registry directory is
the kubelet's and only created if missing); a stale socket from a previous run is removed first,
and both sockets are removed again on shutdown. The DRA socket serves before the registration
socket appears, so the kubelet never learns of an endpoint that does not answer yet.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from dra_solver.kubeletplugin import fsutil, protos
from dra_solver.kubeletplugin.checkpoint import CheckpointError
from dra_solver.kubeletplugin.claims import ClaimLookupError, ClaimSource
from dra_solver.kubeletplugin.devicestatus import DeviceStatusWriter
from dra_solver.kubeletplugin.discovery import DeviceInfo
from dra_solver.kubeletplugin.health import HealthMonitor, add_health_servicers
from dra_solver.kubeletplugin.metrics import Metrics
from dra_solver.kubeletplugin.state import ClaimRef, DeviceState, PrepareResult, claim_ref_problem
from dra_solver.model import objects as o

log = logging.getLogger(__name__)

DRA_SOCKET_NAME = "dra.sock"
UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL


def registration_socket_name(driver: str) -> str:
    return f"{driver}-reg.sock"


# --- the plugin logic shared by both API versions ------------------------------------------------


@dataclass
class PluginCore:
    driver: str
    state: DeviceState
    claims: ClaimSource
    status: DeviceStatusWriter | None = None
    """Writes the prepared NICs' entries in the claims' ``status.devices`` (with the API)."""
    devices: Callable[[], Mapping[str, DeviceInfo]] | None = None
    """The node's devices by name (which ones are NICs, their interface names)."""
    metrics: Metrics | None = None

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        start = time.perf_counter()
        results = self._prepare(refs)
        if self.metrics is not None:
            errors = sum(1 for ref in refs if results.get(ref.uid, PrepareResult(error="not processed")).error)
            self._observe("prepare", errors=errors, total=len(refs), start=start)
        return results

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        start = time.perf_counter()
        errors = self._unprepare(refs)
        if self.metrics is not None:
            failed = sum(1 for ref in refs if errors.get(ref.uid, "not processed"))
            self._observe("unprepare", errors=failed, total=len(refs), start=start)
        return errors

    def _observe(self, operation: str, *, errors: int, total: int, start: float) -> None:
        assert self.metrics is not None
        self.metrics.observe_operation(operation, errors=errors, total=total, seconds=time.perf_counter() - start)
        try:
            self.metrics.prepared_claims.set(self.state.store.prepared_claims())
        except CheckpointError as err:  # the operation itself reported it; the gauge keeps its value
            log.debug("prepared claims gauge: %s", err)

    def _prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        found: list[o.ResourceClaim] = []
        for ref in refs:
            problem = claim_ref_problem(ref)
            if problem:
                results[ref.uid] = PrepareResult(error=problem)
                continue
            try:
                found.append(self.claims.get(ref.namespace, ref.name, ref.uid))
            except ClaimLookupError as err:
                log.warning("prepare claim %s (%s): %s", ref, ref.uid, err)
                results[ref.uid] = PrepareResult(error=str(err))
        if found:
            prepared = self.state.prepare(found)
            results.update(prepared)
            if self.status is not None and self.devices is not None:
                known = self.devices()
                for claim in found:
                    result = prepared.get(claim.metadata.uid or "")
                    if result is not None and not result.error:
                        self.status.write(claim, result.devices, known)
        return results

    def _unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        errors: dict[str, str] = {}
        valid: list[ClaimRef] = []
        for ref in refs:
            # Unprepare needs only the UID: the checkpoint knows the rest.
            problem = claim_ref_problem(ref, need_name=False)
            if problem:
                errors[ref.uid] = problem
            else:
                valid.append(ref)

        if valid:
            errors.update(self.state.unprepare(valid))
        return errors


def _refs(request: Any) -> list[ClaimRef]:
    """Claim references of a request, each UID once, in request order."""
    seen: set[str] = set()
    out: list[ClaimRef] = []
    for claim in request.claims:
        if claim.uid in seen:
            continue
        seen.add(claim.uid)
        out.append(ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid))
    return out


class DraServicer:
    """``DRAPlugin`` for one API version (``pb`` is the generated v1 or v1beta1 module)."""

    def __init__(self, pb: ModuleType, core: PluginCore) -> None:
        self.pb = pb
        self.core = core
        self._has_share_id = "share_id" in pb.Device.DESCRIPTOR.fields_by_name

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        refs = _refs(request)
        log.info(
            "NodePrepareResources: %s", ", ".join(f"{r} ({r.uid})" for r in refs) or "no claims"
        )
        results = self.core.prepare(refs)
        response = self.pb.NodePrepareResourcesResponse()
        for ref in refs:
            result = results.get(ref.uid, PrepareResult(error="not processed"))
            entry = response.claims[ref.uid]
            if result.error:
                entry.error = result.error
                continue
            for device in result.devices:
                kwargs: dict[str, Any] = {
                    "request_names": list(device.request_names),
                    "pool_name": device.pool,
                    "device_name": device.device,
                    "cdi_device_ids": list(device.cdi_device_ids),
                }
                if self._has_share_id and device.share_id is not None:
                    kwargs["share_id"] = device.share_id
                entry.devices.append(self.pb.Device(**kwargs))
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        refs = _refs(request)
        log.info(
            "NodeUnprepareResources: %s", ", ".join(f"{r} ({r.uid})" for r in refs) or "no claims"
        )
        errors = self.core.unprepare(refs)
        response = self.pb.NodeUnprepareResourcesResponse()
        for ref in refs:
            entry = response.claims[ref.uid]
            error = errors.get(ref.uid, "not processed")
            if error:
                entry.error = error
        return response


@dataclass
class RegistrationStatus:
    """What the kubelet last said about our registration (None: nothing yet)."""

    registered: bool | None = None
    error: str = ""
    calls: int = 0


class RegistrationServicer:
    def __init__(
        self, *, driver: str, endpoint: str, supported: Sequence[str], status: RegistrationStatus
    ) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.supported = list(supported)
        self.status = status

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        log.info("registration: kubelet asked for plugin info")
        return protos.registration.PluginInfo(
            type=protos.DRA_PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=self.supported,
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.status.registered = request.plugin_registered
        self.status.error = request.error
        self.status.calls += 1
        if request.plugin_registered:
            log.info("registration: kubelet registered driver %s", self.driver)
        else:
            log.error("registration: kubelet rejected driver %s: %s", self.driver, request.error)
        return protos.registration.RegistrationStatusResponse()


# --- sockets and servers ---------------------------------------------------------------------------


class SocketError(Exception):
    """A socket or its directory cannot be set up; the plugin cannot start."""


def socket_target(path: Path) -> str:
    """The gRPC address for a unix socket path, within the kernel's 107-byte limit.

    The absolute path when it fits (what the kubelet uses); otherwise the path relative to the
    working directory when that fits (deep scratch directories in tests and demos).
    """
    absolute = path.absolute()
    if len(str(absolute).encode()) <= UNIX_PATH_MAX:
        return f"unix://{absolute}"
    relative = os.path.relpath(absolute)
    if len(relative.encode()) <= UNIX_PATH_MAX:
        return f"unix:{relative}"
    raise SocketError(f"{absolute}: socket path longer than {UNIX_PATH_MAX} bytes")


def prepare_socket_path(path: Path, *, own_dir: bool) -> None:
    """Directory ready (0700 if ours), stale socket from an earlier run removed."""
    socket_target(path)  # fail early on an impossible path
    try:
        fsutil.ensure_dir(path.parent, mode=0o700, enforce=own_dir)
    except OSError as err:
        raise SocketError(f"{path.parent}: {err}") from None
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise SocketError(f"{path}: is a directory, cannot create the socket there")
    log.info("removing stale socket %s", path)
    path.unlink()


@contextlib.contextmanager
def _private_umask() -> Any:
    # The socket file is created by bind() with the process umask; no window where it is 0755.
    old = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(old)


def _serve_unix(server: grpc.Server, path: Path) -> None:
    with _private_umask():
        try:
            server.add_insecure_port(socket_target(path))
        except RuntimeError as err:
            raise SocketError(f"{path}: cannot listen: {err}") from None
    os.chmod(path, 0o600)
    server.start()


@dataclass
class PluginServer:
    """Both gRPC servers; :meth:`start` serves them, :meth:`stop` tears them down."""

    driver: str
    plugin_dir: Path
    registry_dir: Path
    core: PluginCore
    health: HealthMonitor
    max_workers: int = 8
    registration: RegistrationStatus = field(default_factory=RegistrationStatus)
    _dra: grpc.Server | None = field(default=None, init=False, repr=False)
    _reg: grpc.Server | None = field(default=None, init=False, repr=False)

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir.absolute() / DRA_SOCKET_NAME

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir.absolute() / registration_socket_name(self.driver)

    def start(self) -> None:
        prepare_socket_path(self.dra_socket, own_dir=True)
        prepare_socket_path(self.registration_socket, own_dir=False)

        dra = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="dra")
        )
        protos.dra_v1_grpc.add_DRAPluginServicer_to_server(  # type: ignore[no-untyped-call]
            DraServicer(protos.dra_v1, self.core), dra
        )
        protos.dra_v1beta1_grpc.add_DRAPluginServicer_to_server(  # type: ignore[no-untyped-call]
            DraServicer(protos.dra_v1beta1, self.core), dra
        )
        add_health_servicers(dra, self.health)
        _serve_unix(dra, self.dra_socket)
        self._dra = dra
        log.info("serving the DRA API on %s", self.dra_socket)

        reg = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="reg"))
        protos.registration_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            RegistrationServicer(
                driver=self.driver,
                endpoint=str(self.dra_socket),
                supported=protos.SUPPORTED_SERVICES,
                status=self.registration,
            ),
            reg,
        )
        _serve_unix(reg, self.registration_socket)
        self._reg = reg
        log.info("serving registration on %s", self.registration_socket)

    def stop(self, grace: float = 5.0) -> None:
        """Registration first (the kubelet stops using us), then the DRA API after in-flight calls."""
        for server, path, what in (
            (self._reg, self.registration_socket, "registration"),
            (self._dra, self.dra_socket, "DRA API"),
        ):
            if server is not None:
                server.stop(grace).wait(grace + 1)
                log.info("stopped serving %s", what)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._reg = self._dra = None
