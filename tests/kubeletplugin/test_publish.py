"""ResourceSlice publishing: splitting, naming, generations, obsolete slices, the directory sink."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.kubeletplugin import discovery, simconfig
from dra_solver.kubeletplugin.publish import (
    MAX_COUNTER_SETS,
    DirectorySink,
    Publisher,
    build_slices,
    carry_taint_times,
    slice_name,
    split_pool,
)
from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object
from dra_solver.model.validation import validate_resource_slice
from tests.kubeletplugin.helpers import DRIVER, NODE

TAINT = {"key": f"{DRIVER}/unhealthy", "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}


def devices(text: str) -> discovery.NodeDevices:
    return discovery.build_devices(simconfig.parse_config(yaml.safe_load(text)), node=NODE)


class MemorySink:
    """A sink that remembers everything; resourceVersions like an API server."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self._rv = 0

    def list(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for _, o in sorted(self.objects.items())]

    def _store(self, verb: str, obj: dict[str, Any]) -> None:
        self._rv += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self.objects[obj["metadata"]["name"]] = stored
        self.calls.append((verb, obj["metadata"]["name"]))

    def create(self, obj: dict[str, Any]) -> None:
        assert obj["metadata"]["name"] not in self.objects
        self._store("create", obj)

    def update(self, obj: dict[str, Any]) -> None:
        current = self.objects[obj["metadata"]["name"]]
        assert obj["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        self._store("update", obj)

    def delete(self, obj: dict[str, Any]) -> None:
        del self.objects[obj["metadata"]["name"]]
        self.calls.append(("delete", obj["metadata"]["name"]))

    def owner(self) -> dict[str, Any] | None:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": NODE,
            "uid": "node-uid",
            "controller": True,
        }


def api_valid(objs: list[dict[str, Any]]) -> None:
    """Each slice passes the API server's validation; the pool passes upstream's pool checks."""
    counter_sets: dict[str, set[str]] = {}
    names: set[str] = set()
    for obj in objs:
        decoded = decode_object(obj)
        assert isinstance(decoded, o.ResourceSlice)
        errors = validate_resource_slice(decoded)
        assert errors == [], [str(e) for e in errors]
        for cs in obj["spec"].get("sharedCounters") or []:
            assert cs["name"] not in counter_sets
            counter_sets[cs["name"]] = set(cs["counters"])
    for obj in objs:
        for d in obj["spec"].get("devices") or []:
            assert d["name"] not in names
            names.add(d["name"])
            for use in d.get("consumesCounters") or []:
                assert set(use["counters"]) <= counter_sets[use["counterSet"]]


def test_plain_devices_split_at_128() -> None:
    contents = split_pool(devices("gpus: {count: 300}"), taints={})
    assert [len(c.devices) for c in contents] == [128, 128, 44]
    objs = build_slices(contents, driver=DRIVER, node=NODE, generation=1, owner=None)
    assert [s["metadata"]["name"] for s in objs] == [f"{NODE}-{DRIVER}-{i}" for i in range(3)]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in objs} == {3}
    api_valid(objs)


def test_taints_lower_the_limit_to_64() -> None:
    contents = split_pool(devices("gpus: {count: 130}"), taints={"gpu-7": [TAINT]})
    assert [len(c.devices) for c in contents] == [64, 64, 2]
    tainted = [d for c in contents for d in c.devices if d.get("taints")]
    assert [d["name"] for d in tainted] == ["gpu-7"]
    api_valid(build_slices(contents, driver=DRIVER, node=NODE, generation=1, owner=None))


def test_counters_get_their_own_slices() -> None:
    node = devices(
        "gpus: {count: 12, partitions: {profiles: [{name: 1g.10gb, compute: 1, memorySlices: 1}]}}"
    )
    contents = split_pool(node, taints={})
    counter_slices = [c for c in contents if c.shared_counters]
    device_slices = [c for c in contents if not c.shared_counters]
    assert [len(c.shared_counters) for c in counter_slices] == [MAX_COUNTER_SETS, 4]
    assert all(not c.devices for c in counter_slices)
    # 12 GPUs x (1 whole + 7 partitions), all consuming counters -> slices of 64.
    assert [len(c.devices) for c in device_slices] == [64, 32]
    assert contents.index(counter_slices[0]) == 0  # counters first
    objs = build_slices(
        contents, driver=DRIVER, node=NODE, generation=3, owner=MemorySink().owner()
    )
    api_valid(objs)
    assert objs[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"


def test_empty_pool_is_one_empty_slice() -> None:
    contents = split_pool(devices("gpus: {count: 0}"), taints={})
    objs = build_slices(contents, driver=DRIVER, node=NODE, generation=1, owner=None)
    assert len(objs) == 1 and objs[0]["spec"]["devices"] == []
    api_valid(objs)


def test_example_config_publishes_valid_slices() -> None:
    root = Path(__file__).resolve().parents[2]
    config = simconfig.load_config(root / "examples" / "kubeletplugin" / "devices.yaml")
    node = discovery.build_devices(config, node=NODE)
    objs = build_slices(
        split_pool(node, taints={}), driver=DRIVER, node=NODE, generation=1, owner=None
    )
    api_valid(objs)


def test_slice_names_are_valid_and_bounded() -> None:
    assert slice_name("Node_1", "gpu.example.com", 2) == "node-1-gpu.example.com-2"
    long = slice_name("n" * 250, DRIVER, 17)
    assert len(long) <= 253 and long.endswith("-17")
    assert long == slice_name("n" * 250, DRIVER, 17)


def test_generation_bumps_only_on_change_and_obsolete_slices_go() -> None:
    sink = MemorySink()
    publisher = Publisher(sink, driver=DRIVER, node=NODE)
    big = devices("gpus: {count: 200}")
    first = publisher.sync(big, taints={})
    assert (first.generation, first.changed, len(first.created)) == (1, True, 2)

    again = publisher.sync(big, taints={})
    assert (again.generation, again.changed) == (1, False)
    assert [c for c in sink.calls if c[0] != "create"] == []

    tainted = publisher.sync(big, taints={"gpu-3": [TAINT]})
    assert (tainted.generation, tainted.changed) == (2, True)
    # 200 devices at 64 per slice: 4 slices now, two of them new.
    assert tainted.created == (f"{NODE}-{DRIVER}-2", f"{NODE}-{DRIVER}-3")
    assert len(tainted.updated) == 2
    assert {s["spec"]["pool"]["generation"] for s in sink.objects.values()} == {2}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in sink.objects.values()} == {4}

    small = publisher.sync(devices("gpus: {count: 10}"), taints={})
    assert small.generation == 3
    assert sorted(small.deleted) == [f"{NODE}-{DRIVER}-{i}" for i in (1, 2, 3)]
    assert list(sink.objects) == [f"{NODE}-{DRIVER}-0"]
    api_valid(list(sink.objects.values()))


def test_generation_continues_after_restart_and_foreign_slices_are_left_alone() -> None:
    sink = MemorySink()
    Publisher(sink, driver=DRIVER, node=NODE).sync(devices("gpus: {count: 2}"), taints={})
    Publisher(sink, driver=DRIVER, node=NODE).sync(devices("gpus: {count: 3}"), taints={})
    restarted = Publisher(sink, driver=DRIVER, node=NODE)
    assert restarted.sync(devices("gpus: {count: 3}"), taints={}).changed is False
    assert restarted.sync(devices("gpus: {count: 4}"), taints={}).generation == 3


def test_taint_times_are_carried_over() -> None:
    published = [{"spec": {"devices": [{"name": "gpu-1", "taints": [TAINT]}]}}]
    fresh = {**TAINT, "timeAdded": "2030-01-01T00:00:00Z"}
    other_effect = {**TAINT, "effect": "NoExecute", "timeAdded": "2030-01-01T00:00:00Z"}
    out = carry_taint_times(
        {"gpu-1": [fresh], "gpu-2": [fresh], "gpu-3": [other_effect]}, published
    )
    assert out["gpu-1"][0]["timeAdded"] == TAINT["timeAdded"]
    assert out["gpu-2"][0]["timeAdded"] == "2030-01-01T00:00:00Z"
    assert out["gpu-3"][0]["timeAdded"] == "2030-01-01T00:00:00Z"


def test_directory_sink_round_trip(tmp_path: Path) -> None:
    foreign = tmp_path / "other-node.yaml"
    foreign_obj = build_slices(
        split_pool(devices("gpus: {count: 1}"), taints={}),
        driver=DRIVER,
        node="node-2",
        generation=1,
        owner=None,
    )[0]
    foreign.write_text(yaml.safe_dump(foreign_obj))
    (tmp_path / "junk.yaml").write_text("{{{ not yaml")
    sink = DirectorySink(tmp_path, driver=DRIVER, node=NODE)
    publisher = Publisher(sink, driver=DRIVER, node=NODE)
    publisher.sync(devices("gpus: {count: 200}"), taints={})
    files = sorted(p.name for p in tmp_path.glob(f"{NODE}-*.yaml"))
    assert files == [f"{NODE}-{DRIVER}-0.yaml", f"{NODE}-{DRIVER}-1.yaml"]
    assert not list(tmp_path.glob(".*.tmp"))
    assert publisher.sync(devices("gpus: {count: 200}"), taints={}).changed is False
    publisher.sync(devices("gpus: {count: 1}"), taints={})
    assert sorted(p.name for p in tmp_path.glob(f"{NODE}-*.yaml")) == [f"{NODE}-{DRIVER}-0.yaml"]
    assert foreign.exists()
    loaded = [yaml.safe_load(p.read_text()) for p in sorted(tmp_path.glob(f"{NODE}-*.yaml"))]
    api_valid(loaded)
    assert loaded[0]["spec"]["pool"]["generation"] == 2


@pytest.mark.parametrize("count", [0, 1, 64, 65, 128, 129, 1000])
def test_every_device_published_exactly_once(count: int) -> None:
    node = devices(f"gpus: {{count: {count}}}")
    contents = split_pool(node, taints={})
    names = [d["name"] for c in contents for d in c.devices]
    assert names == [d.name for d in node.devices]
