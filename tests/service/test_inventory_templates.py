"""Template-made devices (issue 16): devices that differ only in attribute values (a per-GPU
UUID, as real drivers publish) are decoded as copies of one decoded device with their own
values. They must equal what a whole decode gives, never alias another node's device, and a
problem in any one of a thousand such slices is still reported with its file, object and field.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.model import decode_object
from dra_solver.model import objects as o
from dra_solver.service import engine as e
from dra_solver.service.inventory import FileSource, ObjectDecoder, decode_documents
from dra_solver.service.metrics import Metrics
from dra_solver.service.reservations import ReservationStore
from tests.builders import CLASS, DRIVER, claim, device_class, gpu_slice, node

Obj = dict[str, Any]


def _slice(name: str, count: int = 2) -> Obj:
    doc = gpu_slice(name, count=count)
    for i, device in enumerate(doc["spec"]["devices"]):
        device["attributes"]["uuid"] = {"string": f"GPU-{name}-{i}"}
    return doc


def _inventory(nodes: int) -> list[Obj]:
    objects = [device_class()]
    for i in range(nodes):
        objects += [node(f"node-{i:04}"), _slice(f"node-{i:04}")]
    return objects


def test_template_copies_equal_a_whole_decode_and_alias_nothing_per_device() -> None:
    docs = _inventory(3)
    decoded = decode_documents(copy.deepcopy(docs), decoder=ObjectDecoder())
    assert [x.to_api() for x in decoded] == [decode_object(copy.deepcopy(d)).to_api() for d in docs]
    slices = [x for x in decoded if isinstance(x, o.ResourceSlice)]
    first, second = (s.spec.devices or [] for s in slices[:2])
    assert first[0] is not second[0] and first[0].attributes is not second[0].attributes
    assert first[0].attributes is not None and second[0].attributes is not None
    assert (first[0].attributes["uuid"].string, second[0].attributes["uuid"].string) == ("GPU-node-0000-0", "GPU-node-0001-0")
    assert first[0].attributes["model"] is second[0].attributes["model"], "equal values are shared"


def test_a_reservation_on_one_node_leaves_the_same_devices_of_another_free(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(_inventory(3)))
    engine = e.Engine(source=FileSource(str(path)), reservations=ReservationStore(), metrics=Metrics())
    engine.source.start()
    both = claim("both", cls=CLASS, driver=DRIVER).request("gpu", count=2)
    blob = json.dumps(both.obj()).encode()
    assert engine.allocate([blob], "node-0000", reserve=True, ttl=60).allocated
    again = json.dumps(both.named("again").obj()).encode()
    assert not engine.allocate([again], "node-0000").allocated, "node-0000's GPUs are reserved"
    answer = engine.allocate([again], "node-0001", reserve=True, ttl=60)
    assert answer.allocated, "node-0001's GPUs (copies of the same template) are free"
    results = answer.claims[0].result
    assert results is not None and results.devices is not None
    assert sorted((r.pool, r.device) for r in results.devices.results or []) == [("node-0001", "gpu-0"), ("node-0001", "gpu-1")]
    assert engine.allocate([json.dumps(both.named("third").obj()).encode()], "node-0002").allocated


# Problems planted in slices 2..6 of 1,000 whose devices are otherwise template copies: each
# must be found with its file, its slice and its field, and cost only that slice's pool.
PLANTED = {
    1: ("uuid", {"string": "GPU-x", "strin": "typo"}, 'unknown field "spec.devices[0].attributes.uuid.strin"'),
    2: ("uuid", "DUPLICATE", 'duplicate field "spec.devices[0].attributes.uuid.string"'),
    3: ("uuid", {"string": "G" * 65}, "spec.devices[0].attributes[uuid].string: Too long: may not be more than 64 bytes"),
    4: ("uuid", {"int": "7"}, "spec.devices[0].attributes[uuid].int: Invalid value"),
    5: ("capacty", None, 'unknown field "spec.devices[0].capacty"'),
}


def _planted_yaml(nodes: int) -> str:
    docs = _inventory(nodes)
    texts = []
    for index, doc in enumerate(docs):
        slice_no = index // 2 - 1 if index % 2 == 0 and index else None
        text = yaml.safe_dump(doc, sort_keys=False)
        if slice_no in PLANTED:
            name, value, _ = PLANTED[slice_no]
            device = doc["spec"]["devices"][0]
            if value == "DUPLICATE":
                text = re.sub(r"\n( *)string: GPU-", r"\n\1string: first\n\1string: GPU-", text, count=1)
            elif value is None:
                device[name] = {"memory": {"value": "1"}}
                text = yaml.safe_dump(doc, sort_keys=False)
            else:
                device["attributes"][name] = value
                text = yaml.safe_dump(doc, sort_keys=False)
        texts.append(text)
    return "---\n".join(texts)


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_problem_in_one_of_a_thousand_template_slices_names_file_object_and_field(tmp_path: Path, fmt: str) -> None:
    text = _planted_yaml(1000)
    path = tmp_path / f"cluster.{fmt}"
    if fmt == "json":
        # The same documents as one JSON stream (the duplicate key written by hand).
        docs = []
        for part in text.split("---\n"):
            loaded = yaml.safe_load(part)
            chunk = json.dumps(loaded)
            if "string: first" in part:
                chunk = chunk.replace('"string": "GPU-', '"string": "first", "string": "GPU-', 1)
            docs.append(chunk)
        path.write_text("\n".join(docs))
    else:
        path.write_text(text)
    source = FileSource(str(path))
    source.load()
    snap = source.snapshot()
    problems = {p.name: p for p in snap.problems}
    assert sorted(problems) == [f"node-{i:04}-gpus" for i in sorted(PLANTED)], [str(p) for p in snap.problems]
    for slice_no, (_, _, detail) in PLANTED.items():
        problem = problems[f"node-{slice_no:04}-gpus"]
        assert problem.source == str(path) and problem.kind == "ResourceSlice"
        assert detail in problem.detail, (slice_no, problem.detail)
        assert snap.invalid_pools.get((DRIVER, f"node-{slice_no:04}")), snap.invalid_pools
    assert len(snap.inventory.slices) == 1000 - len(PLANTED)
    assert snap.counts()["Node"] == 1000


def test_warn_mode_reports_a_repeated_unclean_device_on_every_slice() -> None:
    decoder = ObjectDecoder(validate="warn")
    docs = [gpu_slice(f"node-{i}", count=2) for i in range(3)]  # identical devices: decoded once
    for doc in docs:
        doc["spec"]["devices"][1]["colour"] = "blue"
    decode_documents(docs, decoder=decoder)
    warnings = decoder.take_warnings()
    assert len(warnings) == 3 and all('unknown field "spec.devices[1].colour"' in w for w in warnings), warnings
    assert [w.split(":")[0] for w in warnings] == [f"ResourceSlice node-{i}-gpus" for i in range(3)]
