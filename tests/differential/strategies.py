"""Hypothesis strategies: random but valid node inventories and claims for differential tests.

Every feature the allocators implement appears with some probability: ExactCount and All,
FirstAvailable, matchAttribute / distinctAttribute, shared counters (partitions), consumable
capacity with request policies, taints and tolerations, admin access, several drivers and
pools, and devices already in use. Sizes stay tiny so that the backtracking allocator (which
is exponential on purpose) finishes quickly.

Selectors only read attributes every device of their driver has, so a CEL runtime error never
depends on the order in which an allocator happens to evaluate devices. Optional features are
drawn so that hypothesis shrinks towards leaving them out (a feature is on at the top of its
integer range, never at 0), which keeps a failing example's printed input small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from dra_solver.model import objects as o
from dra_solver.model.allocation import AllocatedState, AllocationRequest, DeviceID, Inventory
from dra_solver.model.decode import decode_all
from dra_solver.model.features import FeatureGates
from tests import builders as b

NODE = "node-1"
GPU = "gpu.example.com"
NIC = "nic.example.com"


@dataclass(frozen=True)
class Scenario:
    """One generated input, printable for a failing example."""

    objects: tuple[dict[str, Any], ...]
    in_use: tuple[tuple[str, str, str], ...]
    gates: FeatureGates = field(default_factory=FeatureGates)

    def request(self, allocator: str, *, time_limit: float = 20.0) -> AllocationRequest:
        decoded = decode_all(list(self.objects), source="generated")
        inventory = Inventory.from_objects(decoded)
        # Claims with status.allocation hold devices (as the scheduler sees them); the others
        # are allocated together.
        claims = tuple(c for c in inventory.claims if isinstance(c, o.ResourceClaim) and not c.allocated)
        held = tuple(c for c in inventory.claims if c.allocated)
        extra = AllocatedState(devices=frozenset(DeviceID(*d) for d in self.in_use))
        inventory = Inventory(
            classes=inventory.classes,
            slices=inventory.slices,
            taint_rules=inventory.taint_rules,
            nodes=inventory.nodes,
            claims=held,
            extra_allocated=extra,
        )
        return AllocationRequest(
            claims=claims,
            node=inventory.node(NODE),
            inventory=inventory,
            gates=self.gates,
            allocator=allocator,  # type: ignore[arg-type]
            time_limit=time_limit,
        )


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra}


@st.composite
def gpu_pool(draw: st.DrawFn, pool: str, *, quirks: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    # Returns the slices and the names of devices that may be marked in use: none of a
    # partitioned pool unless ``quirks``, because upstream double-counts counters for admin
    # access to in-use devices and refuses every device of an overdrawn counter set (README
    # deviations 6 and 7). With ``quirks`` GPUs may also carry a list attribute ("links").
    """Slices of one GPU pool: whole GPUs, optionally with partitions on shared counters."""
    n = draw(st.integers(1, 3))
    partitioned = draw(st.booleans())
    devices: list[dict[str, Any]] = []
    counter_sets: list[dict[str, Any]] = []
    for i in range(n):
        model = draw(st.sampled_from(["a", "b"]))
        numa = draw(st.integers(0, 1))
        attrs: dict[str, Any] = {"model": {"string": model}, "numa": {"int": numa}, "index": {"int": i}}
        if quirks and draw(st.booleans()):
            attrs["links"] = {"ints": sorted(draw(st.sets(st.integers(0, 2), min_size=1, max_size=2)))}
        memory = draw(st.sampled_from(["8Gi", "16Gi"]))
        dev: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": attrs,
            "capacity": {"memory": {"value": memory}},
        }
        if draw(st.integers(0, 5)) == 5:
            dev["taints"] = [{"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}]
        if partitioned:
            counter_sets.append({"name": f"gpu-{i}-counters", "counters": {"memory": {"value": memory}}})
            dev["consumesCounters"] = [
                {"counterSet": f"gpu-{i}-counters", "counters": {"memory": {"value": memory}}}
            ]
            devices.append(dev)
            half = "4Gi" if memory == "8Gi" else "8Gi"
            for p in range(2):
                devices.append(
                    {
                        "name": f"gpu-{i}-part-{p}",
                        "attributes": {**attrs, "partition": {"int": p}},
                        "capacity": {"memory": {"value": half}},
                        "consumesCounters": [
                            {"counterSet": f"gpu-{i}-counters", "counters": {"memory": {"value": half}}}
                        ],
                    }
                )
        else:
            devices.append(dev)
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": _meta(f"{pool}-devices"),
            "spec": {
                "driver": GPU,
                "nodeName": NODE,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2 if partitioned else 1},
                "devices": devices,
            },
        }
    ]
    if partitioned:
        slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": _meta(f"{pool}-counters"),
                "spec": {
                    "driver": GPU,
                    "nodeName": NODE,
                    "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
                    "sharedCounters": counter_sets,
                },
            }
        )
    return slices, [] if partitioned and not quirks else [d["name"] for d in devices]


@st.composite
def nic_pool(draw: st.DrawFn, *, quirks: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """NICs, some shareable with consumable bandwidth. With ``quirks`` the NIC pool may be
    named like the first GPU pool and draw on a counter set named like that pool's first one
    (upstream once tracked counters per pool name, not per driver and pool)."""
    pool = "gpus-0" if quirks and draw(st.booleans()) else "nics"
    counters = pool == "gpus-0" and draw(st.booleans())
    n = draw(st.integers(1, 2))
    devices: list[dict[str, Any]] = []
    for i in range(n):
        dev: dict[str, Any] = {
            "name": f"nic-{i}",
            "attributes": {"numa": {"int": draw(st.integers(0, 1))}},
        }
        if draw(st.booleans()):
            dev["allowMultipleAllocations"] = True
            dev["capacity"] = {
                "bandwidth": {
                    "value": "10G",
                    "requestPolicy": {
                        "default": "1G",
                        "validRange": {"min": "1G", "step": "1G"},
                    },
                }
            }
        elif counters:
            amount = draw(st.sampled_from(["4Gi", "8Gi"]))
            dev["consumesCounters"] = [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]
        devices.append(dev)
    slices = [{
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": _meta("nics"),
        "spec": {
            "driver": NIC,
            "nodeName": NODE,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2 if counters else 1},
            "devices": devices,
        },
    }]
    if counters:
        slices.append({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": _meta("nic-counters"),
            "spec": {
                "driver": NIC,
                "nodeName": NODE,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
                "sharedCounters": [{"name": "gpu-0-counters", "counters": {"memory": {"value": "8Gi"}}}],
            },
        })
    return slices, [d["name"] for d in devices]


CLASSES = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": _meta("gpu"),
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
    },
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": _meta("nic"),
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC}"'}}]},
    },
]

GPU_SELECTORS = [
    None,
    f'device.attributes["{GPU}"].model == "a"',
    f'device.capacity["{GPU}"].memory.compareTo(quantity("8Gi")) >= 0',
    f'!has(device.attributes["{GPU}"].partition)',
]


@st.composite
def gpu_request_body(draw: st.DrawFn, *, allow_all: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "gpu"}
    if allow_all and draw(st.integers(0, 6)) == 6:
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = draw(st.integers(1, 2))
    selector = draw(st.sampled_from(GPU_SELECTORS))
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    if draw(st.integers(0, 4)) == 4:
        body["tolerations"] = [{"key": "example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
    return body


@st.composite
def nic_request_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "nic", "allocationMode": "ExactCount", "count": 1}
    if draw(st.booleans()):
        body["capacity"] = {"requests": {"bandwidth": draw(st.sampled_from(["1G", "2500M", "4G"]))}}
    return body


@st.composite
def random_claim(
    draw: st.DrawFn, index: int, *, with_nics: bool, with_counters: bool, allow_admin: bool,
    quirks: bool = False,
) -> dict[str, Any]:
    requests: list[dict[str, Any]] = []
    for r in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["exact", "exact", "first", "nic"] if with_nics else ["exact", "exact", "first"]))
        name = f"req-{r}"
        if kind == "exact":
            body = draw(gpu_request_body())
            if allow_admin and draw(st.integers(0, 6)) == 6:
                body["adminAccess"] = True
            requests.append({"name": name, "exactly": body})
        elif kind == "first":
            subs = []
            for s in range(draw(st.integers(2, 3))):
                sub = draw(gpu_request_body(allow_all=False))
                subs.append({"name": f"sub-{s}", **sub})
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append({"name": name, "exactly": draw(nic_request_body())})
    devices: dict[str, Any] = {"requests": requests}
    gpu_requests = [r["name"] for r in requests if "firstAvailable" in r or r["exactly"]["deviceClassName"] == "gpu"]
    if len(gpu_requests) >= 1 and draw(st.integers(0, 2)) == 2:
        which = draw(st.sampled_from(["matchAttribute", "distinctAttribute"]))
        names = ["numa", "model", "index", "links"] if quirks else ["numa", "model", "index"]
        attr = f"{GPU}/{draw(st.sampled_from(names))}"
        devices["constraints"] = [{"requests": gpu_requests, which: attr}]
    return b.claim(f"claim-{index}", uid=f"uid-{index}", **devices).obj()


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    objects: list[dict[str, Any]] = [*CLASSES]
    ids: list[tuple[str, str, str]] = []
    with_counters = False
    for p in range(draw(st.integers(1, 2))):
        pool = f"gpus-{p}"
        slices, names = draw(gpu_pool(pool))
        with_counters = with_counters or len(slices) > 1
        objects.extend(slices)
        ids.extend((GPU, pool, n) for n in names)
    with_nics = draw(st.booleans())
    if with_nics:
        slices, _ = draw(nic_pool())
        objects.extend(slices)
    objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"zone": "a"}}})
    # Only GPUs are marked in use: shareable NICs are in use through shares, not exclusively.
    in_use = tuple(sorted(draw(st.sets(st.sampled_from(ids), max_size=min(2, len(ids)))))) if ids else ()
    # Upstream lets an admin-access allocation block later claims of the same attempt (a README
    # quirk): admin access only where there is a single claim.
    claims = draw(st.integers(1, 2))
    for c in range(claims):
        objects.append(
            draw(random_claim(c, with_nics=with_nics, with_counters=with_counters, allow_admin=claims == 1))
        )
    return Scenario(tuple(objects), in_use)


# --- inputs for the differential tests against upstream's own allocator (tests/upstream/) ----


@st.composite
def allocated_claim(draw: st.DrawFn, index: int, objects: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A claim already holding one device of the generated slices, with ``status.allocation``
    as the scheduler wrote it: a whole device, or a share of a shareable NIC with its consumed
    bandwidth (and a shareID)."""
    candidates: list[tuple[str, str, dict[str, Any]]] = []
    for obj in objects:
        if obj["kind"] != "ResourceSlice":
            continue
        spec = obj["spec"]
        for dev in spec.get("devices") or []:
            candidates.append((spec["driver"], spec["pool"]["name"], dev))
    if not candidates:
        return None
    driver, pool, dev = draw(st.sampled_from(candidates))
    result: dict[str, Any] = {"request": "req-0", "driver": driver, "pool": pool, "device": dev["name"]}
    class_name = "gpu" if driver == GPU else "nic"
    body: dict[str, Any] = {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": 1}
    if dev.get("allowMultipleAllocations"):
        amount = draw(st.sampled_from(["1G", "3G", "9G"]))
        result["shareID"] = f"00000000-0000-4000-8000-{index:012d}"
        result["consumedCapacity"] = {"bandwidth": amount}
        body["capacity"] = {"requests": {"bandwidth": amount}}
    return b.claim(f"held-{index}", {"name": "req-0", "exactly": body}, uid=f"held-uid-{index}").allocated(result, node=NODE).obj()


@st.composite
def upstream_scenarios(draw: st.DrawFn) -> Scenario:
    """Like ``scenarios`` without its guards: inputs may hit upstream's documented deviations
    (admin access with several claims, partitions in use) and the places older upstream
    releases deviated (list attributes under constraints, a NIC pool sharing a GPU pool's name
    and counter-set name), hold devices through allocated claims (shares with
    consumed capacity too), and run with ListTypeAttributes on or off, which moves upstream
    between its experimental and incubating implementations."""
    objects: list[dict[str, Any]] = [*CLASSES]
    ids: list[tuple[str, str, str]] = []
    with_counters = False
    for p in range(draw(st.integers(1, 2))):
        pool = f"gpus-{p}"
        slices, names = draw(gpu_pool(pool, quirks=True))
        with_counters = with_counters or len(slices) > 1
        objects.extend(slices)
        ids.extend((GPU, pool, n) for n in names)
    with_nics = draw(st.booleans())
    if with_nics:
        slices, _ = draw(nic_pool(quirks=True))
        objects.extend(slices)
    objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"zone": "a"}}})
    in_use = tuple(sorted(draw(st.sets(st.sampled_from(ids), max_size=min(2, len(ids)))))) if ids else ()
    held: list[dict[str, Any]] = []
    for h in range(draw(st.integers(0, 2))):
        one = draw(allocated_claim(h, objects))
        taken = {(r["driver"], r["pool"], r["device"]) for c in held
                 for r in c["status"]["allocation"]["devices"]["results"] if "shareID" not in r}
        if one is not None:
            result = one["status"]["allocation"]["devices"]["results"][0]
            key = (result["driver"], result["pool"], result["device"])
            if "shareID" in result or (key not in taken and key not in in_use):
                held.append(one)
    objects.extend(held)
    claims = draw(st.integers(1, 3))
    for c in range(claims):
        objects.append(draw(random_claim(c, with_nics=with_nics, with_counters=with_counters, allow_admin=True, quirks=True)))
    objects.extend(draw(taint_rules(objects)))
    gates = FeatureGates(list_type_attributes=draw(st.booleans()))
    return Scenario(tuple(objects), in_use, gates)


TAINT_KEYS = ("example.com/unhealthy", "example.com/maintenance")
"""The first is the key requests may tolerate (``gpu_request_body``), the second nobody does."""


@st.composite
def taint_rules(draw: st.DrawFn, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Up to two DeviceTaintRules (resource.k8s.io/v1), as an admin marks devices broken: no
    selector (matches nothing), an empty one (every device), or a driver, pool and device
    named in any combination (a device name alone may hit it in several pools). Effects are
    NoSchedule, NoExecute (both keep a device from being allocated) and None (never does)."""
    devices = sorted({(o_["spec"]["driver"], o_["spec"]["pool"]["name"], d["name"]) for o_ in objects
                      if o_["kind"] == "ResourceSlice" for d in o_["spec"].get("devices") or []})
    rules: list[dict[str, Any]] = []
    for r in range(draw(st.integers(0, 2)) if devices else 0):
        driver, pool, device = draw(st.sampled_from(devices))
        spec: dict[str, Any] = {"taint": {"key": draw(st.sampled_from(TAINT_KEYS)), "value": "true",
                                          "effect": draw(st.sampled_from(["NoSchedule", "NoExecute", "None"]))}}
        shape = draw(st.sampled_from(["none", "empty", "driver", "pool", "device", "device-only", "device-only"]))
        if shape != "none":
            selector: dict[str, Any] = {}
            if shape in ("driver", "pool", "device"):
                selector["driver"] = driver
            if shape in ("pool", "device"):
                selector["pool"] = pool
            if shape in ("device", "device-only"):
                selector["device"] = device
            spec["deviceSelector"] = selector
        rules.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                      "metadata": _meta(f"rule-{r}"), "spec": spec})
    return rules
