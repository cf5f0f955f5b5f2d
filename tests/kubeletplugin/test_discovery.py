"""The simulated backend: config parsing, devices, partitions, NICs, health file, markers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_solver.kubeletplugin import discovery as d
from dra_solver.kubeletplugin import simconfig
from dra_solver.model.errors import InvalidInput, StrictDecodingError


def build(text: str, node: str = "node-1") -> d.NodeDevices:
    return d.build_devices(simconfig.parse_config(yaml.safe_load(text) or {}), node=node)


def test_default_is_eight_gpus() -> None:
    node = d.build_devices(simconfig.load_config(None), node="node-1")
    assert [x.name for x in node.devices] == [f"gpu-{i}" for i in range(8)]
    assert node.counter_sets == ()
    gpu = node.devices[5].to_api()
    assert gpu["capacity"] == {"memory": {"value": "80Gi"}}
    attrs = gpu["attributes"]
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["index"] == {"int": 5}
    assert attrs["uuid"]["string"].startswith("GPU-")
    assert attrs["driverVersion"] == {"version": "1.0.0"}
    assert {"numaNode", "nvlinkDomain", "model", d.PCIE_ROOT_ATTRIBUTE} <= set(attrs)


def test_count_shorthand() -> None:
    assert build("gpus: 3\nnics: 1") == build("gpus: {count: 3}\nnics: {count: 1}")


def test_deterministic_and_node_specific() -> None:
    assert build("gpus: {count: 3}") == build("gpus: {count: 3}")
    uuids_1 = [x.attributes["uuid"]["string"] for x in build("gpus: {count: 3}").devices]
    uuids_2 = [
        x.attributes["uuid"]["string"] for x in build("gpus: {count: 3}", node="node-2").devices
    ]
    assert not set(uuids_1) & set(uuids_2)


def test_topology_attributes() -> None:
    node = build("gpus: {count: 8, numaNodes: 2, nvlinkDomains: 2, pcieRoots: 4}\nnics: {count: 4}")
    gpus = {x.name: x.attributes for x in node.devices if x.kind == "gpu"}
    nics = {x.name: x.attributes for x in node.devices if x.kind == "nic"}
    assert [gpus[f"gpu-{i}"]["numaNode"]["int"] for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [gpus[f"gpu-{i}"]["nvlinkDomain"]["int"] for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    roots = [gpus[f"gpu-{i}"][d.PCIE_ROOT_ATTRIBUTE]["string"] for i in range(8)]
    assert roots == [
        "pci0000:00",
        "pci0000:00",
        "pci0001:00",
        "pci0001:00",
        "pci0002:00",
        "pci0002:00",
        "pci0003:00",
        "pci0003:00",
    ]
    # Each NIC shares a PCIe root (and so a NUMA node) with two GPUs.
    assert [nics[f"nic-{j}"][d.PCIE_ROOT_ATTRIBUTE]["string"] for j in range(4)] == sorted(
        set(roots)
    )


def test_partitions_use_shared_counters() -> None:
    node = build(
        """
gpus:
  count: 2
  memory: 40Gi
  partitions:
    computeSlices: 7
    memorySlices: 8
    profiles:
      - {name: 1g.5gb, compute: 1, memorySlices: 1}
      - {name: 3g.20gb, compute: 3, memorySlices: 4, count: 1}
"""
    )
    assert [c.to_api() for c in node.counter_sets] == [
        {
            "name": f"gpu-{i}-counters",
            "counters": {"compute": {"value": "7"}, "memory": {"value": "8"}},
        }
        for i in range(2)
    ]
    by_name = node.by_name()
    assert by_name["gpu-0"].consumes_counters[0]["counters"] == {
        "compute": {"value": "7"},
        "memory": {"value": "8"},
    }
    part = by_name["gpu-1-mig-1g5gb-6"]
    assert part.kind == "mig" and part.parent == "gpu-1"
    assert part.capacity == {"memory": {"value": "5Gi"}}  # 40Gi * 1/8
    assert part.consumes_counters[0] == {
        "counterSet": "gpu-1-counters",
        "counters": {"compute": {"value": "1"}, "memory": {"value": "1"}},
    }
    assert "gpu-1-mig-1g5gb-7" not in by_name  # only 7 fit (compute)
    assert by_name["gpu-0-mig-3g20gb-0"].capacity == {"memory": {"value": "20Gi"}}
    assert part.attributes["parentUUID"] == by_name["gpu-1"].attributes["uuid"]


def test_nic_consumable_bandwidth() -> None:
    nic = build(
        "gpus: {count: 0}\nnics: {count: 1, bandwidth: 100G, defaultBandwidth: 1G, minBandwidth: 100M, bandwidthStep: 1M}"
    ).devices[0]
    api = nic.to_api()
    assert api["allowMultipleAllocations"] is True
    assert api["capacity"]["bandwidth"] == {
        "value": "100G",
        "requestPolicy": {"default": "1G", "validRange": {"min": "100M", "step": "1M"}},
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", "80Gi"),
        ("1024Mi", "1Gi"),
        ("1536", "1536"),
        ("1000M", "1G"),
        ("400G", "400G"),
        (1000, "1k"),
        ("0", "0"),
    ],
)
def test_quantities_print_canonically(text: object, value: str) -> None:
    q = simconfig.parse_int_quantity(text)
    assert q is not None and str(q) == value


@pytest.mark.parametrize(
    ("text", "field", "detail"),
    [
        ("gpus: {count: -1}", "gpus.count", "Invalid value: -1"),
        ("gpus: {memory: 1.5Gi}", "gpus.memory", "must be a whole quantity"),
        ("gpus: {colour: red}", "gpus.colour", "unknown field"),
        ("gpus: {driverVersion: v1}", "gpus.driverVersion", "MAJOR.MINOR.PATCH"),
        (
            "gpus: {partitions: {profiles: [{name: 8g.99gb, compute: 8}]}}",
            "gpus.partitions.profiles[0]",
            "larger than the GPU",
        ),
        (
            "gpus: {partitions: {profiles: [{name: 1g.5gb}, {name: 1g.5gb}]}}",
            "gpus.partitions.profiles[1].name",
            "Duplicate value",
        ),
        (
            "nics: {count: 1, defaultBandwidth: 1T}",
            "nics",
            "minBandwidth <= defaultBandwidth <= bandwidth",
        ),
        ("cdiClass: 'no/slash'", "cdiClass", "must be a CDI class name"),
        ("health: {pollSeconds: 0}", "health.pollSeconds", "must be a positive number"),
    ],
)
def test_config_errors_name_the_field(text: str, field: str, detail: str) -> None:
    with pytest.raises(InvalidInput) as err:
        simconfig.parse_config(yaml.safe_load(text), source="devices.yaml")
    assert err.value.field == field
    assert detail in err.value.detail
    assert str(err.value).startswith("devices.yaml: ")


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        simconfig.load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [")
    with pytest.raises(InvalidInput, match="cannot parse YAML"):
        simconfig.load_config(bad)
    relative = tmp_path / "ok.yaml"
    relative.write_text("health: {file: h.yaml}")
    assert simconfig.load_config(relative).health.file == tmp_path / "h.yaml"


def test_health_file_and_partitions_following_their_gpu(tmp_path: Path) -> None:
    config = simconfig.parse_config(
        yaml.safe_load("gpus: {count: 2, partitions: {profiles: [{name: 1g.10gb, count: 1}]}}")
    )
    health = tmp_path / "health.yaml"
    profile = d.SimulatedProfile(config, node="n", state_dir=tmp_path / "s", health_file=health)
    assert {r.health for r in profile.check_health().values()} == {"Healthy"}
    health.write_text("gpu-1: {health: Unhealthy, severity: critical, message: hot}\n")
    reports = profile.check_health()
    assert reports["gpu-1"] == d.HealthReport("gpu-1", "Unhealthy", "critical", "hot")
    assert reports["gpu-1-mig-1g10gb-0"].health == "Unhealthy"
    assert reports["gpu-1-mig-1g10gb-0"].message == "parent gpu-1: hot"
    assert reports["gpu-0"].health == "Healthy"
    health.write_text("gpu-9: Unhealthy\n")
    with pytest.raises(InvalidInput, match="gpu-9: Not found"):
        profile.check_health()
    health.write_text("gpu-0: Broken\n")
    with pytest.raises(InvalidInput, match="Unsupported value: 'Broken'"):
        profile.check_health()
    health.unlink()
    assert {r.health for r in profile.check_health().values()} == {"Healthy"}


def test_prepare_markers_are_idempotent(tmp_path: Path) -> None:
    config = simconfig.parse_config({"simulate": {"failPrepare": ["gpu-7"]}})
    profile = d.SimulatedProfile(config, node="n", state_dir=tmp_path / "s", health_file=None)
    profile.prepare_device("u1", "gpu-0", share_id=None)
    profile.prepare_device("u1", "gpu-0", share_id=None)
    profile.prepare_device("u1", "gpu-1", share_id="s1")
    assert profile.prepared_markers() == {"u1": {"gpu-0", "gpu-1--s1"}}
    with pytest.raises(d.DeviceBackendError, match="gpu-7: simulated failure"):
        profile.prepare_device("u2", "gpu-7", share_id=None)
    with pytest.raises(d.DeviceBackendError, match="no such device"):
        profile.prepare_device("u2", "gpu-99", share_id=None)
    profile.unprepare_device("u1", "gpu-0", share_id=None)
    profile.unprepare_device("u1", "gpu-0", share_id=None)
    profile.unprepare_device("u1", "gpu-1", share_id="s1")
    assert profile.prepared_markers() == {}


def test_config_goes_through_the_bounded_decoder(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("gpus:\n  model: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(InvalidInput, match="nesting") as err:
        simconfig.load_config(deep)
    assert str(err.value).startswith(f"{deep}: ")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)))
    with pytest.raises(InvalidInput, match="aliases expand"):
        simconfig.load_config(bomb)
    two = tmp_path / "two.yaml"
    two.write_text("gpus: 1\n---\nnics: 1\n")
    with pytest.raises(InvalidInput, match="expected one document, found 2"):
        simconfig.load_config(two)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert simconfig.load_config(empty) == simconfig.SimConfig()


def test_unknown_and_duplicate_fields_are_errors_naming_the_path(tmp_path: Path) -> None:
    config = tmp_path / "devices.yaml"
    config.write_text("gpus:\n  count: 2\n  count: 3\n  partitions: {profiles: [{name: 1g.5gb, cout: 1}]}\nsimulate: {failprepare: []}\n")
    with pytest.raises(StrictDecodingError) as err:
        simconfig.load_config(config)
    assert err.value.problems == (
        (("gpus", "count"), "duplicate field"),
        (("gpus", "partitions", "profiles", 0, "cout"), "unknown field"),
        (("simulate", "failprepare"), "unknown field"),
    )
    with pytest.raises(InvalidInput, match=r"gpus.mounts\[0\].containerPath: Required value"):
        simconfig.parse_config({"gpus": {"mounts": [{"hostPath": "/x"}]}})


def test_health_file_fields_are_checked() -> None:
    devices = {"gpu-0", "gpu-1"}
    assert simconfig.parse_health_file("", source="h", devices=devices) == {}
    entries = simconfig.parse_health_file("gpu-0: Unknown\ngpu-1: {message: hot}\n", source="h", devices=devices)
    assert (entries["gpu-0"].health, entries["gpu-1"].health, entries["gpu-1"].message) == ("Unknown", "Unhealthy", "hot")
    with pytest.raises(StrictDecodingError, match=r'unknown field "gpu-1\.severty"'):
        simconfig.parse_health_file("gpu-1: {severty: critical}\n", source="h", devices=devices)
    with pytest.raises(InvalidInput, match=r"h: gpu-1\.message: Invalid value: 3: must be a string"):
        simconfig.parse_health_file("gpu-1: {message: 3}\n", source="h", devices=devices)
    with pytest.raises(InvalidInput, match="nesting"):
        simconfig.parse_health_file("gpu-1: " + "[" * 500 + "]" * 500, source="h", devices=devices)


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dra_solver.cli import main

    config = tmp_path / "devices.yaml"
    config.write_text("gpus:\n  model: " + "[" * 3000 + "]" * 3000 + "\n")
    code = main(["kubelet-plugin", "--driver", "gpu.sim", "--node", "n1", "--config", str(config),
                 "--plugin-dir", str(tmp_path / "p"), "--registry-dir", str(tmp_path / "r"), "--cdi-dir", str(tmp_path / "c"),
                 "--publish", str(tmp_path / "pub"), "--claim-source", str(tmp_path / "claims")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nesting" in err and "internal error" not in err
