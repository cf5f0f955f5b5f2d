"""Prepare and unprepare claims: serialised, idempotent and crash-safe.

:class:`DeviceState` is the only place that changes node state. Its rules:

- **Serialised.** Every batch runs under a thread lock *and* a file lock next to the
  checkpoint, so neither two gRPC calls nor two plugin processes (a rolling update) interleave.
  The checkpoint is re-read under the lock at the start of every batch: the file, not memory,
  is the source of truth.
- **Two-phase.** A claim's planned devices are recorded as ``PrepareStarted`` before any device
  is touched; only when every device is prepared and the CDI spec is written does the claim
  become ``PrepareCompleted``. Unprepare records ``UnprepareStarted`` first, then undoes devices
  and the CDI spec, then drops the entry.
- **Rollback.** A failure inside a prepare undoes what was done at once; after a crash,
  :meth:`DeviceState.recover` (run before the sockets serve) undoes every claim left in a
  ``*Started`` state. Undo steps are idempotent, so a crash during recovery is recovered too.
- **Idempotent.** Preparing a ``PrepareCompleted`` claim returns the recorded devices;
  unpreparing an unknown claim succeeds.

What a claim needs (:func:`compute_device_config`) is a pure function of the claim, the node's
devices and the CDI naming rules; the side effects (backend, CDI file, checkpoint) happen only in
the methods that record them.

Fault injection for the crash tests comes from the environment (never from flags, which are a
user-facing contract): ``DRA_SOLVER_KUBELET_PLUGIN_CRASH_AT=<step>[,<step>]`` makes the process
``os._exit`` at the named steps (:data:`PREPARE_STEPS`, :data:`UNPREPARE_STEPS`), and
``DRA_SOLVER_KUBELET_PLUGIN_SKIP_ROLLBACK=1`` disables all rollback, which the tests use to show
that without it the invariants break.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import filelock

from dra_solver.kubeletplugin import fsutil
from dra_solver.kubeletplugin.cdi import CdiHandler
from dra_solver.kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointStore,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
)
from dra_solver.kubeletplugin.discovery import (
    ContainerEdits,
    DeviceBackendError,
    DeviceInfo,
    Profile,
)
from dra_solver.model import dns1123_label_errors, dns1123_subdomain_errors
from dra_solver.model import objects as o

log = logging.getLogger(__name__)

CRASH_ENV = "DRA_SOLVER_KUBELET_PLUGIN_CRASH_AT"
SKIP_ROLLBACK_ENV = "DRA_SOLVER_KUBELET_PLUGIN_SKIP_ROLLBACK"
CRASH_EXIT_CODE = 137  # what a SIGKILL looks like to a parent

PREPARE_STEPS = ("prepare-started", "prepare-device", "prepare-cdi", "prepare-completed")
"""After: the PrepareStarted record, the first device, the CDI spec, the PrepareCompleted record."""
UNPREPARE_STEPS = ("unprepare-started", "unprepare-device", "unprepare-cdi", "unprepare-completed")
"""After: the UnprepareStarted record, the first device, the CDI spec removal, the entry removal."""

CONFIG_API_VERSION = "sim.dra-solver.dev/v1"
CONFIG_KIND = "DeviceConfig"


@dataclass(frozen=True, slots=True)
class FaultInjection:
    crash_at: frozenset[str] = frozenset()
    skip_rollback: bool = False

    @staticmethod
    def from_env(env: Mapping[str, str]) -> FaultInjection:
        steps = frozenset(s.strip() for s in env.get(CRASH_ENV, "").split(",") if s.strip())
        unknown = sorted(steps - set(PREPARE_STEPS) - set(UNPREPARE_STEPS))
        if unknown:
            raise ValueError(f"{CRASH_ENV}: unknown step(s) {', '.join(unknown)}")
        return FaultInjection(
            crash_at=steps, skip_rollback=env.get(SKIP_ROLLBACK_ENV, "") not in ("", "0")
        )

    def point(self, step: str) -> None:
        if step in self.crash_at:
            log.warning("fault injection: crashing at %s", step)
            for handler in logging.getLogger().handlers:
                handler.flush()
            sys.stderr.flush()
            os._exit(CRASH_EXIT_CODE)


class PrepareError(Exception):
    """A claim cannot be prepared; the message is the claim's ``error`` for the kubelet."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{_clip(self.namespace)}/{_clip(self.name)}"


def _clip(text: str) -> str:
    # Valid names are at most 253 characters; anything longer is shown as a prefix only.
    return text if len(text) <= 253 else f"{text[:64]}..."


# --- what may name a file: the claim reference rules ------------------------------------------

UID_MAX_LENGTH = 128
_UID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_UID_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    f"alphanumeric character (at most {UID_MAX_LENGTH} characters)"
)


def uid_problem(uid: str) -> str:
    """Why ``uid`` cannot be a claim UID here; empty if it can.

    API-server UIDs are UUIDs; the rule is wider (claims from a directory source may use any
    token) but narrow enough that a UID is always one plain file name: it names the claim's CDI
    spec and the backend's per-claim directory.
    """
    if len(uid) > UID_MAX_LENGTH or not _UID.fullmatch(uid):
        return f"Invalid value: {fsutil.short(uid)}: {_UID_MSG}"
    return ""


def claim_ref_problem(ref: ClaimRef, *, need_name: bool = True) -> str:
    """The claim's error for a reference the kubelet sent that must not be used; empty if fine.

    Namespace and name follow the API server's rules (DNS label, DNS subdomain), the UID
    :func:`uid_problem`; every field is checked before any file is touched.
    """
    fields = ("namespace", "uid", "name") if need_name else ("uid",)
    missing = [f for f in fields if not getattr(ref, f)]
    if missing:
        return f"claim {ref}: {', '.join(missing)}: Required value"
    problems: list[str] = []
    if need_name:
        for what, errors in (
            ("namespace", dns1123_label_errors(ref.namespace)),
            ("name", dns1123_subdomain_errors(ref.name)),
        ):
            if errors:
                value = fsutil.short(getattr(ref, what))
                problems.append(f"{what}: Invalid value: {value}: {'; '.join(errors)}")
    uid = uid_problem(ref.uid)
    if uid:
        problems.append(f"uid: {uid}")
    return f"claim {ref}: {', '.join(problems)}" if problems else ""


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


# --- pure: what a claim needs ---------------------------------------------------------------


def _base_request(name: str) -> str:
    # "gpu/large" is subrequest "large" of request "gpu"; the kubelet knows only "gpu".
    return name.split("/", 1)[0]


def _env_name(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.upper())


def _config_env(
    claim: o.ResourceClaim, *, driver: str
) -> list[tuple[tuple[str, ...] | None, tuple[str, ...]]]:
    """(requests or None for all, env entries) of each opaque config for this driver, in order.

    Class configs come before claim configs, so a claim's values override its class's in the
    container (later entries win).
    """
    allocation = claim.status.allocation if claim.status else None
    configs = (allocation.devices.config if allocation and allocation.devices else None) or []
    ordered = [c for c in configs if c.source == "FromClass"] + [
        c for c in configs if c.source != "FromClass"
    ]
    out: list[tuple[tuple[str, ...] | None, tuple[str, ...]]] = []
    for index, config in enumerate(ordered):
        opaque = config.opaque
        if opaque is None or opaque.driver != driver:
            continue
        params = opaque.parameters
        where = f"claim {claim.ref}, config #{index} ({config.source})"
        if not isinstance(params, dict):
            raise PrepareError(f"{where}: opaque parameters must be an object")
        version, kind = params.get("apiVersion"), params.get("kind")
        if version != CONFIG_API_VERSION or kind != CONFIG_KIND:
            raise PrepareError(
                f"{where}: unsupported parameters {version}/{kind}: "
                f"supported: {CONFIG_API_VERSION}/{CONFIG_KIND}"
            )
        env = params.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str | int | bool) for k, v in env.items()
        ):
            raise PrepareError(f"{where}: env must map names to strings")
        requests = tuple(config.requests) if config.requests else None
        out.append((requests, tuple(f"{k}={v}" for k, v in sorted(env.items()))))
    return out


def compute_device_config(
    claim: o.ResourceClaim,
    *,
    driver: str,
    node: str,
    devices: Mapping[str, DeviceInfo],
    cdi: CdiHandler,
) -> tuple[PreparedDevice, ...]:
    """The devices (with CDI names and container edits) to prepare for ``claim`` on this node.

    Pure: deterministic and without side effects, so it can run before anything is recorded.
    Takes only the allocation results of ``driver``; several results for the same device (and
    share) become one device serving several requests. Raises PrepareError for an allocation
    this node cannot honour.
    """
    uid = claim.metadata.uid or ""
    allocation = claim.status.allocation if claim.status else None
    results = (allocation.devices.results if allocation and allocation.devices else None) or []
    config_env = _config_env(claim, driver=driver)

    grouped: dict[tuple[str, str, str | None], list[o.DeviceRequestAllocationResult]] = {}
    for index, result in enumerate(results):
        if result.driver != driver:
            continue  # another driver's device: its own plugin prepares it
        # The share ID names the backend's per-device state, so it must be a plain name too.
        share_problem = uid_problem(result.share_id) if result.share_id is not None else ""
        if share_problem:
            raise PrepareError(
                f"claim {claim.ref}: status.allocation.devices.results[{index}].shareID: "
                f"{share_problem}"
            )
        grouped.setdefault((result.pool, result.device, result.share_id), []).append(result)

    prepared: list[PreparedDevice] = []
    for (pool, device_name, share_id), group in grouped.items():
        if pool != node:
            raise PrepareError(
                f"claim {claim.ref}: device {pool}/{device_name} is not in this node's pool {node}"
            )
        info = devices.get(device_name)
        if info is None:
            raise PrepareError(f"claim {claim.ref}: device {pool}/{device_name} does not exist")
        requests: list[str] = []
        for result in group:
            base = _base_request(result.request)
            if base not in requests:
                requests.append(base)
        extra_env: list[str] = []
        prefix = f"DRA_SIM_{_env_name(device_name)}"
        for result in group:
            for cap, amount in sorted((result.consumed_capacity or {}).items()):
                extra_env.append(f"{prefix}_{_env_name(cap.rsplit('/', 1)[-1])}={amount}")
        extra_env.append(f"{prefix}_REQUESTS={','.join(requests)}")
        for targets, env in config_env:
            if targets is None or any(
                r.request in targets or _base_request(r.request) in targets for r in group
            ):
                extra_env.extend(env)
        cdi_name = cdi.device_name(uid, device_name, share_id)
        prepared.append(
            PreparedDevice(
                request_names=tuple(requests),
                pool=pool,
                device=device_name,
                share_id=share_id,
                cdi_name=cdi_name,
                cdi_device_ids=(cdi.device_id(cdi_name),),
                edits=info.edits.merged(ContainerEdits(env=tuple(extra_env))),
            )
        )
    return tuple(prepared)


# --- side effects, recorded ------------------------------------------------------------------


@dataclass
class DeviceState:
    """Prepares and unprepares claims on this node; see the module docstring for the rules."""

    driver: str
    node: str
    profile: Profile
    cdi: CdiHandler
    store: CheckpointStore
    lock_path: Path
    faults: FaultInjection = field(default_factory=FaultInjection)
    lock_timeout: float = 60.0
    _mutex: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = filelock.FileLock(str(self.lock_path), timeout=self.lock_timeout, mode=0o600)
        with self._mutex, lock:
            yield

    # -- start-up -------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Undo every half-prepared or half-unprepared claim; returns their UIDs.

        Runs before the sockets serve. Also removes CDI spec files of ours that no checkpoint
        entry accounts for, and the temporary files a crash in the middle of an atomic write
        left in the checkpoint directory (which holds the simulated backend's state too) and in
        the CDI directory (ours only: other drivers share it).
        """
        if self.faults.skip_rollback:
            log.warning("fault injection: rollback disabled, not recovering the checkpoint")
            return []
        with self._locked():
            for path in fsutil.remove_temp_files(self.store.directory, recursive=True):
                log.info("removed leftover temporary file %s", path)
            for path in self.cdi.remove_temp_files():
                log.info("removed leftover temporary file %s", path)
            cp = self.store.read()
            handled: list[str] = []
            for entry in cp.in_state(ClaimState.PREPARE_STARTED, ClaimState.UNPREPARE_STARTED):
                log.info(
                    "recovering claim %s (%s) left in %s: undoing %d device(s)",
                    entry.ref,
                    entry.uid,
                    entry.state.value,
                    len(entry.devices),
                )
                try:
                    cp = self._undo(cp, entry, phase=None)
                    handled.append(entry.uid)
                except (DeviceBackendError, OSError) as err:
                    log.error(
                        "recovering claim %s (%s) failed, will retry: %s", entry.ref, entry.uid, err
                    )
            for uid, path in self.cdi.claim_spec_files().items():
                if cp.get(uid) is None:
                    log.info("removing orphaned CDI spec %s", path)
                    self.cdi.delete_claim_spec_file(uid)
            return handled

    # -- prepare --------------------------------------------------------------------------

    def prepare(self, claims: Sequence[o.ResourceClaim]) -> dict[str, PrepareResult]:
        """Prepare a batch; one result per claim UID, a failure never affects the others."""
        results: dict[str, PrepareResult] = {}
        try:
            with self._locked():
                cp = self.store.read()
                inventory = self.profile.enumerate_devices().by_name()
                for claim in claims:
                    uid = claim.metadata.uid or ""
                    try:
                        cp, devices = self._prepare_one(cp, claim, inventory)
                        results[uid] = PrepareResult(devices=devices)
                    except PrepareError as err:
                        log.warning("prepare claim %s (%s) failed: %s", claim.ref, uid, err)
                        results[uid] = PrepareResult(error=str(err))
        except (CheckpointError, filelock.Timeout, OSError) as err:
            for claim in claims:
                results.setdefault(claim.metadata.uid or "", PrepareResult(error=f"prepare: {err}"))
        return results

    def _prepare_one(
        self, cp: Checkpoint, claim: o.ResourceClaim, inventory: Mapping[str, DeviceInfo]
    ) -> tuple[Checkpoint, tuple[PreparedDevice, ...]]:
        uid = claim.metadata.uid or ""
        ref = claim.ref
        problem = uid_problem(uid)
        if problem:  # the driver checked the kubelet's UID; this one is the claim object's
            raise PrepareError(f"claim {ref}: metadata.uid: {problem}")
        entry = cp.get(uid)
        if entry is not None and entry.state == ClaimState.PREPARE_COMPLETED:
            log.info(
                "claim %s (%s) already prepared, returning %d device(s)",
                ref,
                uid,
                len(entry.devices),
            )
            return cp, entry.devices
        if entry is not None and not self.faults.skip_rollback:
            log.info("claim %s (%s) found in %s: undoing it first", ref, uid, entry.state.value)
            try:
                cp = self._undo(cp, entry, phase=None)
            except (DeviceBackendError, OSError) as err:
                raise PrepareError(f"claim {ref}: undo earlier attempt: {err}") from None

        devices = compute_device_config(
            claim, driver=self.driver, node=self.node, devices=inventory, cdi=self.cdi
        )
        if not devices:
            log.info(
                "claim %s (%s) has no devices of driver %s: nothing to do", ref, uid, self.driver
            )
            return cp, ()

        started = ClaimEntry(
            uid=uid,
            namespace=claim.namespace,
            name=claim.name,
            state=ClaimState.PREPARE_STARTED,
            devices=devices,
        )
        log.info("preparing claim %s (%s): %s", ref, uid, ", ".join(d.device for d in devices))
        cp = cp.with_claim(started)
        try:
            self.store.write(cp)
        except OSError as err:
            raise PrepareError(f"claim {ref}: write checkpoint: {err}") from None
        self.faults.point("prepare-started")
        try:
            for index, device in enumerate(devices):
                self.profile.prepare_device(uid, device.device, share_id=device.share_id)
                if index == 0:
                    self.faults.point("prepare-device")
            path = self.cdi.create_claim_spec_file(uid, ref, devices)
            log.info("claim %s (%s): wrote CDI spec %s", ref, uid, path)
            self.faults.point("prepare-cdi")
            completed = replace(started, state=ClaimState.PREPARE_COMPLETED)
            self.store.write(cp.with_claim(completed))
            cp = cp.with_claim(completed)
        except (DeviceBackendError, OSError) as err:
            if not self.faults.skip_rollback:
                with contextlib.suppress(DeviceBackendError, OSError):
                    cp = self._undo(cp, started, phase=None)
            raise PrepareError(f"claim {ref}: prepare: {err}") from None
        self.faults.point("prepare-completed")
        log.info("prepared claim %s (%s)", ref, uid)
        return cp, devices

    # -- unprepare ------------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare a batch; claim UID -> error ("" on success, including unknown claims)."""
        errors: dict[str, str] = {}
        try:
            with self._locked():
                cp = self.store.read()
                for ref in claims:
                    problem = uid_problem(ref.uid)
                    if problem:
                        errors[ref.uid] = f"claim {ref}: uid: {problem}"
                        continue
                    try:
                        cp = self._unprepare_one(cp, ref)
                        errors[ref.uid] = ""
                    except (DeviceBackendError, OSError) as err:
                        log.warning("unprepare claim %s (%s) failed: %s", ref, ref.uid, err)
                        errors[ref.uid] = f"claim {ref}: unprepare: {err}"
        except (CheckpointError, filelock.Timeout, OSError) as err:
            for ref in claims:
                errors.setdefault(ref.uid, f"unprepare: {err}")
        return errors

    def _unprepare_one(self, cp: Checkpoint, ref: ClaimRef) -> Checkpoint:
        entry = cp.get(ref.uid)
        if entry is None:
            # Unknown: never prepared here, or already unprepared. Nothing of ours can exist,
            # but a stray spec would be an orphan, so make sure.
            if self.cdi.delete_claim_spec_file(ref.uid):
                log.warning(
                    "claim %s (%s): removed a CDI spec without checkpoint entry", ref, ref.uid
                )
            log.info("claim %s (%s) not prepared: nothing to unprepare", ref, ref.uid)
            return cp
        if entry.state != ClaimState.UNPREPARE_STARTED:
            entry = replace(entry, state=ClaimState.UNPREPARE_STARTED)
            cp = cp.with_claim(entry)
            self.store.write(cp)
            self.faults.point("unprepare-started")
        log.info(
            "unpreparing claim %s (%s): %s",
            ref,
            ref.uid,
            ", ".join(d.device for d in entry.devices),
        )
        cp = self._undo(cp, entry, phase="unprepare")
        log.info("unprepared claim %s (%s)", ref, ref.uid)
        return cp

    # -- the one undo path (rollback, recovery and unprepare) ------------------------------

    def _undo(self, cp: Checkpoint, entry: ClaimEntry, *, phase: str | None) -> Checkpoint:
        """Unprepare the entry's devices, delete its CDI spec, drop it from the checkpoint.

        Every step is idempotent, so running this again after a crash halfway is safe.
        ``phase`` enables the unprepare fault points.
        """
        for index, device in enumerate(entry.devices):
            self.profile.unprepare_device(entry.uid, device.device, share_id=device.share_id)
            if index == 0 and phase:
                self.faults.point(f"{phase}-device")
        self.cdi.delete_claim_spec_file(entry.uid)
        if phase:
            self.faults.point(f"{phase}-cdi")
        cp = cp.without(entry.uid)
        self.store.write(cp)
        if phase:
            self.faults.point(f"{phase}-completed")
        return cp

