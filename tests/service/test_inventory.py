"""File inventory: loading, reload on change, a broken edit keeps the last good snapshot, and
shared device objects; node fingerprints that let Schedule solve once per group."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dra_solver.model import NodeIndex
from dra_solver.model.errors import InvalidInput
from dra_solver.service import inventory
from dra_solver.service.inventory import (
    FileSource,
    ObjectDecoder,
    decode_documents,
    load_objects,
)
from tests.service.conftest import DEMO


def test_file_source_reloads_on_change(tmp_path: Path) -> None:
    shutil.copy(DEMO / "cluster.yaml", tmp_path / "cluster.yaml")
    src = FileSource(str(tmp_path), poll_interval=3600)
    src.load()
    first = src.snapshot()
    assert first.ready and first.counts()["Node"] == 3
    assert not src.check(), "nothing changed"
    extra = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-d"}}
    (tmp_path / "more.yaml").write_text(yaml.safe_dump(extra))
    assert src.check()
    second = src.snapshot()
    assert second.generation == first.generation + 1 and second.counts()["Node"] == 4
    assert first.counts()["Node"] == 3, "the earlier snapshot is unchanged"
    (tmp_path / "more.yaml").write_text("kind: Node\nmetadata: [broken\n")
    assert not src.check()
    assert src.snapshot() is second and src.reload_errors == 1 and "more.yaml" in src.last_error


def test_an_inventory_without_objects_fails_to_load_and_a_reload_to_one_keeps_the_last(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("# nothing yet\n")
    with pytest.raises(InvalidInput) as info:
        FileSource(str(tmp_path)).load()
    assert str(cluster) in str(info.value) and "no objects (expected DeviceClass" in str(info.value)
    shutil.copy(DEMO / "cluster.yaml", cluster)
    src = FileSource(str(tmp_path), poll_interval=3600)
    src.load()
    good = src.snapshot()
    cluster.write_text("")  # truncated, as an editor or a copy half-way through leaves it
    assert not src.check()
    assert src.snapshot() is good and good.counts()["Node"] == 3 and "no objects" in src.last_error


def test_file_source_rejects_invalid_objects(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: Bad_Name}\nspec: {}\n"
    )
    with pytest.raises(InvalidInput) as info:
        FileSource(str(tmp_path)).load()
    assert str(tmp_path / "bad.yaml") in str(info.value) and "metadata.name" in str(info.value)


def test_decoder_shares_identical_devices() -> None:
    docs = []
    for n in ("n1", "n2"):
        docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{n}-s"},
                     "spec": {"driver": "d.example.com", "nodeName": n, "pool": {"name": n, "resourceSliceCount": 1},
                              "devices": [{"name": "gpu-0", "attributes": {"x": {"int": 1}}}]}})
    s1, s2 = decode_documents(docs, decoder=ObjectDecoder())
    assert s1.spec.devices[0] is s2.spec.devices[0]  # type: ignore[attr-defined]
    assert s1.spec.node_name == "n1" and s2.spec.node_name == "n2"  # type: ignore[attr-defined]


def test_identical_nodes_share_a_fingerprint() -> None:
    from dra_solver.model.allocation import Inventory

    index = NodeIndex(Inventory.from_objects(load_objects([str(DEMO / "cluster.yaml")])))
    assert index.node_names == ("node-a", "node-b", "node-c")
    assert len({index.views[n].shape for n in index.node_names}) == 3, "the demo nodes differ"
    assert index.inuse_key("node-a") != b"" and index.inuse_key("node-b") == b""


def _slice(node: str, devices: list[dict[str, object]]) -> dict[str, object]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-s"},
            "spec": {"driver": "d.example.com", "nodeName": node, "pool": {"name": node, "resourceSliceCount": 1},
                     "devices": devices}}


def _devices(flag: object = True, extra: dict[str, object] | None = None) -> list[dict[str, object]]:
    return [{"name": f"gpu-{i}", "attributes": {"x": {"int": i}, "ok": {"bool": flag}}, "capacity": {"memory": {"value": "8Gi"}},
             **(extra or {})} for i in range(3)]


def test_identical_device_lists_are_shared_whole_and_never_mask_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    # From the third slice on, a list already seen device by device is found with one key (no
    # key per device); a list that differs only by a type (1 where true was: equal under ==)
    # or by an unknown field is not, and fails as it would alone.
    keyed: list[object] = []
    per_device = inventory._content_key
    monkeypatch.setattr(inventory, "_content_key", lambda raw: keyed.append(raw) or per_device(raw))
    decoder = ObjectDecoder()
    slices = decode_documents([_slice(f"n{i}", _devices()) for i in range(4)], decoder=decoder)
    assert len(keyed) == 2 * 3, "the first two slices device by device, the others whole"
    devices = [s.spec.devices for s in slices]  # type: ignore[attr-defined]
    assert all(all(a is b for a, b in zip(d, devices[0], strict=True)) for d in devices)
    assert len({id(d) for d in devices}) == 4, "each slice has its own list"
    with pytest.raises(InvalidInput, match=r"spec.devices\[0\].attributes\[ok\].bool: Invalid value: 1: must be a boolean"):
        decode_documents([_slice("n5", _devices(flag=1))], decoder=decoder)
    with pytest.raises(InvalidInput, match=r"spec.devices\[0\].color"):
        decode_documents([_slice("n6", _devices(extra={"color": "red"}))], decoder=decoder)
    [same] = decode_documents([_slice("n7", _devices())], decoder=decoder)
    assert all(a is b for a, b in zip(same.spec.devices, devices[0], strict=True))  # type: ignore[attr-defined]
