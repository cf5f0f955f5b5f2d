"""The entries the plugin writes in a claim's status.devices (kubeletplugin/devicestatus.py): NICs
only, stable across prepares, skipped when already there. Written to a real API server, next to
other writers and through both schedulers' updates: tests/controllers/test_parity.py."""

from __future__ import annotations

from dra_solver.kubeletplugin import devicestatus as ds
from dra_solver.kubeletplugin import discovery, simconfig
from dra_solver.kubeletplugin.checkpoint import PreparedDevice
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from tests import builders as b
from tests.kubeletplugin.helpers import DRIVER, NODE


def claim(name: str, results: list[dict[str, object]]) -> dict[str, object]:
    return b.SIM_GPU.named(name).request("r", count=None).allocated(*results).obj()


def result(request: str, device: str, *, share_id: str | None = None) -> dict[str, object]:
    return b.result(request, device, driver=DRIVER, pool=NODE, share_id=share_id)

DEVICES = discovery.build_devices(simconfig.parse_config({"gpus": 1, "nics": 2}), node=NODE).by_name()


def prepared(device: str, share: str | None = None) -> PreparedDevice:
    return PreparedDevice(request_names=("r",), pool=NODE, device=device, share_id=share, cdi_name=device, cdi_device_ids=())


def model(obj: dict[str, object]) -> o.ResourceClaim:
    decoded = decode_object(obj, source="test", validate="ignore")
    assert isinstance(decoded, o.ResourceClaim)
    return decoded


def test_entries_for_nics_only_and_stable() -> None:
    c = model(claim("c", [result("r", "gpu-0"), result("r", "nic-1", share_id="s1")]))
    got = ds.entries(c, [prepared("gpu-0"), prepared("nic-1", "s1")], DEVICES, driver=DRIVER, node=NODE, now="2027-01-01T00:00:00Z")
    [entry] = got
    assert {k: entry[k] for k in ("driver", "pool", "device", "shareID")} == {"driver": DRIVER, "pool": NODE, "device": "nic-1", "shareID": "s1"}
    assert entry["networkData"]["interfaceName"] == "simnet1"
    [ip] = entry["networkData"]["ips"]
    assert ip.startswith("10.") and ip.endswith("/8")
    assert entry["networkData"]["hardwareAddress"].startswith("02:") and len(entry["networkData"]["hardwareAddress"]) == 17
    assert [c["type"] for c in entry["conditions"]] == ["Ready"]
    again = ds.entries(c, [prepared("nic-1", "s1")], DEVICES, driver=DRIVER, node=NODE, now="2027-02-01T00:00:00Z")
    assert again[0]["networkData"] == entry["networkData"]
    other_share = ds.entries(c, [prepared("nic-1", "s2")], DEVICES, driver=DRIVER, node=NODE, now="x")
    assert other_share[0]["networkData"]["ips"] != entry["networkData"]["ips"]


def test_written_entries_are_not_written_again() -> None:
    raw = claim("c", [result("r", "nic-0")])
    c = model(raw)
    wanted = ds.entries(c, [prepared("nic-0")], DEVICES, driver=DRIVER, node=NODE, now="2027-01-01T00:00:00Z")
    assert not ds.already_written(c, wanted)
    # What the API server shows after our apply and someone else's condition on the same device.
    theirs = {"type": "example.com/linked", "status": "True", "reason": "X", "message": "", "lastTransitionTime": "2027-01-02T00:00:00Z"}
    entry = {**wanted[0], "conditions": [*wanted[0]["conditions"], theirs]}
    raw["status"]["devices"] = [entry]
    assert ds.already_written(model(raw), ds.entries(c, [prepared("nic-0")], DEVICES, driver=DRIVER, node=NODE, now="later"))
    entry["networkData"] = {"interfaceName": "other"}
    assert not ds.already_written(model(raw), wanted)
    assert ds.field_manager(DRIVER, NODE) == f"{DRIVER}/{NODE}"
