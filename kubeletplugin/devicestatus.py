"""Per-device status in ResourceClaims (DRAResourceClaimDeviceStatus, GA in v1.37): what the
plugin tells the cluster about the devices it prepared.

For every simulated NIC of a prepared claim the plugin writes an entry in the claim's
``status.devices`` (driver, pool, device and, for a shared NIC, the allocation's shareID): a
``Ready`` condition and ``networkData`` (the interface name the device publishes, an address
and a hardware address, both derived from the node, device and claim so that preparing again
writes the same). GPUs get no entry: they have nothing to say beyond the allocation.

Writes are server-side apply under the plugin's own field manager (``<driver>/<node>``): the
API server merges them by (driver, pool, device, shareID), so entries and conditions other
writers own (another driver's devices, a controller's binding conditions on the same device)
are never touched, and an entry the plugin already wrote is not written again. A failed
write is logged and does not fail the prepare: the status is information, the device works.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_solver.kubeletplugin.checkpoint import PreparedDevice
from dra_solver.kubeletplugin.discovery import DeviceInfo
from dra_solver.model import objects as o
from dra_solver.service.api import kube

log = logging.getLogger(__name__)

Json = dict[str, Any]

READY = "Ready"


def field_manager(driver: str, node: str) -> str:
    return f"{driver}/{node}"[:128]


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def network_data(info: DeviceInfo, *, node: str, claim_uid: str, share_id: str | None) -> Json:
    """The NIC's interface, an address in 10.0.0.0/8 and a locally administered MAC, stable
    for one (node, device, claim, share)."""
    d = _digest(node, info.name, claim_uid, share_id or "")
    interface = (info.attributes.get("interfaceName") or {}).get("string") or info.name
    return {
        "interfaceName": str(interface),
        "ips": [f"10.{d[0]}.{d[1]}.{d[2] % 254 + 1}/8"],
        "hardwareAddress": ":".join(f"{b:02x}" for b in (0x02, *d[3:8])),
    }


def entries(
    claim: o.ResourceClaim, prepared: Sequence[PreparedDevice], devices: Mapping[str, DeviceInfo], *, driver: str, node: str, now: str
) -> list[Json]:
    """``status.devices`` entries for the claim's prepared NICs (empty when it has none)."""
    out: list[Json] = []
    uid = claim.metadata.uid or ""
    for p in sorted(prepared, key=lambda d: (d.pool, d.device, d.share_id or "")):
        info = devices.get(p.device)
        if info is None or info.kind != "nic":
            continue
        entry: Json = {"driver": driver, "pool": p.pool, "device": p.device}
        if p.share_id:
            entry["shareID"] = p.share_id
        entry["conditions"] = [{
            "type": READY, "status": "True", "reason": "InterfaceConfigured",
            "message": f"simulated network interface of {p.device} configured on node {node}",
            "lastTransitionTime": now,
        }]
        entry["networkData"] = network_data(info, node=node, claim_uid=uid, share_id=p.share_id)
        out.append(entry)
    return out


def _key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (str(entry.get("driver") or ""), str(entry.get("pool") or ""), str(entry.get("device") or ""), str(entry.get("shareID") or ""))


def already_written(claim: o.ResourceClaim, wanted: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the claim shows every entry as wanted (times aside): nothing to write."""
    have = {_key(e): e for e in (claim.status.devices if claim.status and claim.status.devices else [])}
    for entry in wanted:
        current = have.get(_key(entry))
        if current is None or current.get("networkData") != entry.get("networkData"):
            return False
        mine = {c["type"]: (c["status"], c["reason"], c["message"]) for c in entry["conditions"]}
        theirs = {c.get("type"): (c.get("status"), c.get("reason"), c.get("message")) for c in current.get("conditions") or []}
        if any(theirs.get(t) != v for t, v in mine.items()):
            return False
    return True


class DeviceStatusWriter:
    """Applies the entries through the shared client layer (``service.kubeapi``)."""

    def __init__(self, api_client: Any, *, driver: str, node: str, clock: Callable[[], float] = time.time) -> None:
        self._kube = kube.Kube(api_client)
        self.driver = driver
        self.node = node
        self.clock = clock

    def write(self, claim: o.ResourceClaim, prepared: Sequence[PreparedDevice], devices: Mapping[str, DeviceInfo]) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        wanted = entries(claim, prepared, devices, driver=self.driver, node=self.node, now=now)
        if not wanted or already_written(claim, wanted):
            return
        ns, name = claim.metadata.namespace or "default", claim.metadata.name or ""
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns, "uid": claim.metadata.uid},
            "status": {"devices": wanted},
        }
        try:
            self._kube.apply_claim_status(ns, name, body, field_manager=field_manager(self.driver, self.node))
        except kube.ApiError as err:
            log.warning("claim %s/%s: device status not written: %s", ns, name, err)
            return
        log.info("claim %s/%s: device status of %s written", ns, name, ", ".join(e["device"] for e in wanted))
