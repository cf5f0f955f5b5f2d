"""Device health: the kubelet's ``NodeWatchResources`` stream and the taints on published devices.

:class:`HealthMonitor` polls the backend (and re-checks at once when asked, e.g. on SIGUSR1),
remembers since when each device has been in its current state, and tells two kinds of
listeners about changes:

- the ``DRAResourceHealth`` servicer (v1 and v1alpha1, same shape), which streams a complete
  snapshot of all devices on connect and after every change, as the kubelet expects; the
  kubelet shows it in the pod status (``allocatedResourcesStatus``);
- the ResourceSlice publisher, which turns every unhealthy device into a device taint,
  ``<driver>/unhealthy`` with effect ``NoSchedule`` (new pods stay away) or ``NoExecute``
  (running pods are evicted) when the reported severity is configured as such, and removes
  the taint when the device is healthy again.
"""

from __future__ import annotations

import datetime
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import grpc

from dra_solver.kubeletplugin import protos
from dra_solver.kubeletplugin.discovery import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    HealthReport,
    Profile,
)
from dra_solver.kubeletplugin.simconfig import HealthConfig
from dra_solver.model import InvalidInput

log = logging.getLogger(__name__)

Json = dict[str, Any]

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class DeviceHealthState:
    health: str
    severity: str
    message: str
    since: int  # unix seconds of the last change of health/severity/message


def format_time(seconds: int) -> str:
    """RFC 3339 in UTC with second precision, the way the API server stores taint times."""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def taint_for(
    state: DeviceHealthState, *, driver: str, no_execute_severities: tuple[str, ...]
) -> Json | None:
    """The device taint for one device's health, or None when it needs none (pure)."""
    if state.health != UNHEALTHY:
        return None
    effect = NO_EXECUTE if state.severity.lower() in no_execute_severities else NO_SCHEDULE
    taint: Json = {"key": f"{driver}/unhealthy", "effect": effect}
    value = state.severity[:63]
    if value and _LABEL_VALUE.match(value):
        taint["value"] = value
    taint["timeAdded"] = format_time(state.since)
    return taint


class HealthMonitor:
    """Current health of every device, with change notification. Thread-safe."""

    def __init__(
        self,
        profile: Profile,
        *,
        driver: str,
        node: str,
        config: HealthConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.profile = profile
        self.driver = driver
        self.node = node
        self.config = config
        self._clock = clock
        self._cond = threading.Condition()
        self._version = 0
        self._states: dict[str, DeviceHealthState] = {}
        self._listeners: list[Callable[[], None]] = []
        self._refresh = threading.Event()
        self._stopping = False
        self._last_error = ""
        self.on_event: Callable[[str], None] | None = None
        """Told the new health of each device whose health changed (the plugin's metrics)."""

    # -- state --------------------------------------------------------------------------

    def poll(self) -> bool:
        """Ask the backend; returns True when anything changed. Backend errors keep the old state."""
        try:
            reports = self.profile.check_health()
        except (InvalidInput, OSError, ValueError) as err:
            text = str(err)
            if text != self._last_error:  # say it once, not every poll
                log.error(
                    "health: cannot read device health, keeping the last known state: %s", text
                )
                self._last_error = text
            return False
        self._last_error = ""
        return self.update(reports)

    def update(self, reports: dict[str, HealthReport]) -> bool:
        now = int(self._clock())
        changed: list[str] = []
        with self._cond:
            states = dict(self._states)
            for name in sorted(reports):
                r = reports[name]
                old = states.get(name)
                if old is not None and (old.health, old.severity, old.message) == (
                    r.health,
                    r.severity,
                    r.message,
                ):
                    continue
                states[name] = DeviceHealthState(r.health, r.severity, r.message, now)
                changed.append(name)
                if old is not None or r.health != HEALTHY:
                    if self.on_event is not None:
                        self.on_event(r.health)
                    log.info(
                        "health: device %s is %s%s%s",
                        name,
                        r.health,
                        f" (severity {r.severity})" if r.severity else "",
                        f": {r.message}" if r.message else "",
                    )
            for name in sorted(set(states) - set(reports)):
                del states[name]
                changed.append(name)
            if not changed:
                return False
            self._states = states
            self._version += 1
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        return True

    def snapshot(self) -> tuple[int, dict[str, DeviceHealthState]]:
        with self._cond:
            return self._version, dict(self._states)

    def wait_for_change(self, version: int, timeout: float) -> int:
        """Block until the version moves past ``version`` (or timeout/stop); the new version."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._stopping, timeout)
            return self._version

    def taints(self) -> dict[str, list[Json]]:
        """Device name -> taints to publish (only devices that need one)."""
        _, states = self.snapshot()
        out: dict[str, list[Json]] = {}
        for name, state in sorted(states.items()):
            taint = taint_for(
                state, driver=self.driver, no_execute_severities=self.config.no_execute_severities
            )
            if taint is not None:
                out[name] = [taint]
        return out

    def add_listener(self, listener: Callable[[], None]) -> None:
        with self._cond:
            self._listeners.append(listener)

    # -- background polling -------------------------------------------------------------

    def request_refresh(self) -> None:
        """Re-read health now (safe to call from a signal handler)."""
        forget = getattr(self.profile, "forget_health_cache", None)
        if callable(forget):
            forget()
        self._refresh.set()

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; runs in its own thread."""
        while not stop.is_set():
            self.poll()
            self._refresh.wait(self.config.poll_seconds)
            self._refresh.clear()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._refresh.set()

    @property
    def stopping(self) -> bool:
        return self._stopping


_HEALTH_ENUM = {HEALTHY: "HEALTHY", UNHEALTHY: "UNHEALTHY", UNKNOWN: "UNKNOWN"}


def health_response(pb: ModuleType, monitor: HealthMonitor) -> Any:
    """A complete ``NodeWatchResourcesResponse`` (v1 or v1alpha1 module ``pb``)."""
    _, states = monitor.snapshot()
    devices = []
    for name, state in sorted(states.items()):
        devices.append(
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=monitor.node, device_name=name),
                health=pb.HealthStatus.Value(_HEALTH_ENUM.get(state.health, "UNKNOWN")),
                last_updated_time=state.since,
                health_check_timeout_seconds=monitor.config.check_timeout_seconds,
                message=state.message[:1024],
            )
        )
    return pb.NodeWatchResourcesResponse(devices=devices)


class HealthServicer:
    """``DRAResourceHealth.NodeWatchResources`` for one API version (module ``pb``)."""

    def __init__(
        self, pb: ModuleType, monitor: HealthMonitor, *, wake_seconds: float = 1.0
    ) -> None:
        self.pb = pb
        self.monitor = monitor
        self.wake_seconds = wake_seconds

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        log.info("health: kubelet opened a NodeWatchResources stream")
        version, _ = self.monitor.snapshot()
        yield health_response(self.pb, self.monitor)
        while context.is_active() and not self.monitor.stopping:
            new = self.monitor.wait_for_change(version, self.wake_seconds)
            if new != version and not self.monitor.stopping:
                version = new
                yield health_response(self.pb, self.monitor)
        log.info("health: NodeWatchResources stream closed")


def add_health_servicers(server: grpc.Server, monitor: HealthMonitor) -> None:
    protos.health_v1_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
        HealthServicer(protos.health_v1, monitor), server
    )
    protos.health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
        HealthServicer(protos.health_v1alpha1, monitor), server
    )
