"""Strict field validation as the API server does it (kubectl's --validate=strict|warn|ignore):
unknown and duplicate fields named by their full path, in the API server's words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.decode import check_mode, decode_object, decode_text
from dra_solver.model.errors import InvalidInput, StrictDecodingError
from tests.model._docs import CLAIM, device, edit, resource_slice

EXACTLY = "spec.devices.requests[0].exactly"

COUT = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: two-gpus, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, cout: 2}
"""

CONSTRAINT_TYPO = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: pair, namespace: default}
spec:
  devices:
    requests:
    - {name: a, exactly: {deviceClassName: gpu.example.com}}
    - {name: b, exactly: {deviceClassName: gpu.example.com}}
    constraint:
    - {requests: [a, b], matchAttribute: gpu.example.com/numa}
"""


def _strict_error(text: str) -> StrictDecodingError:
    with pytest.raises(StrictDecodingError) as info:
        decode_text(text, source="in.yaml")
    return info.value


def test_cout_is_an_error_naming_the_field_like_the_api_server() -> None:
    err = _strict_error(COUT)
    assert str(err) == (
        'in.yaml: ResourceClaim default/two-gpus: strict decoding error: '
        'unknown field "spec.devices.requests[0].exactly.cout"'
    )
    assert err.field_path == ("spec", "devices", "requests", 0, "exactly", "cout")
    assert isinstance(err, InvalidInput)  # every caller's "invalid input" path handles it


def test_a_constraint_typo_is_an_error_not_a_lost_matchattribute() -> None:
    err = _strict_error(CONSTRAINT_TYPO)
    assert err.lines() == ['unknown field "spec.devices.constraint"']


def test_every_problem_of_an_object_is_listed_in_document_order() -> None:
    doc = edit(CLAIM.obj(), (f"{EXACTLY}.cout", 2), ("metadata.lables", {"a": "b"}))
    with pytest.raises(StrictDecodingError) as info:
        decode_object(doc)
    assert info.value.lines() == [
        'unknown field "metadata.lables"',
        f'unknown field "{EXACTLY}.cout"',
    ]


def test_map_keys_are_dotted_in_paths_as_the_strict_decoder_prints_them() -> None:
    dev = device(capacity={"memory": {"valu": "1Gi"}})
    with pytest.raises(StrictDecodingError) as info:
        decode_object(resource_slice([dev]))
    assert info.value.lines() == ['unknown field "spec.devices[0].capacity.memory.valu"']


@pytest.mark.parametrize(
    "text",
    [
        'kind: ResourceClaim\nmetadata: {name: c, namespace: default}\nkind: ResourceClaim\n',
        '{"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"}, "kind": "ResourceClaim"}',
    ],
    ids=["yaml", "json"],
)
def test_duplicate_fields_are_errors_in_yaml_and_json(text: str) -> None:
    assert _strict_error(text).lines() == ['duplicate field "kind"']


def test_nested_duplicates_carry_their_path() -> None:
    text = json.dumps(CLAIM.obj())[:-1] + ', "metadata": {"name": "c1", "name": "c2", "namespace": "default"}}'
    err = _strict_error(text)
    assert err.lines() == ['duplicate field "metadata"', 'duplicate field "metadata.name"']


def test_warn_collects_the_problems_and_decodes() -> None:
    warnings: list[StrictDecodingError] = []
    [obj] = decode_text(COUT, source="in.yaml", validate="warn", warnings=warnings)
    assert isinstance(obj, o.ResourceClaim)
    assert [w.warning() for w in warnings] == [
        'in.yaml: ResourceClaim default/two-gpus: unknown field "spec.devices.requests[0].exactly.cout"'
    ]


def test_ignore_keeps_unknown_fields_for_the_round_trip_and_the_last_duplicate_wins() -> None:
    [obj] = decode_text(COUT, validate="ignore")
    assert obj.to_api()["spec"]["devices"]["requests"][0]["exactly"]["cout"] == 2
    [dup] = decode_text('{"kind": "DeviceClass", "metadata": {"name": "a", "name": "b"}}', validate="ignore")
    assert dup.name == "b"


def test_bad_quantities_and_types_are_errors_whatever_validate_says() -> None:
    bad_type = edit(CLAIM.obj(), (f"{EXACTLY}.count", "2"))
    bad_quantity = resource_slice([device(capacity={"memory": {"value": "7\n"}})])
    for doc in (bad_type, bad_quantity):
        with pytest.raises(InvalidInput) as info:
            decode_object(doc, validate="ignore")
        assert not isinstance(info.value, StrictDecodingError)


def test_what_kubectl_get_prints_is_known() -> None:
    # metadata the API server adds, a Node's spec and status, and the v1.37 alpha fields.
    doc = CLAIM.obj()
    doc["metadata"].update(
        {"managedFields": [{"manager": "kubectl"}], "selfLink": "/x", "deletionGracePeriodSeconds": 0,
         "uid": "u", "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"}
    )
    doc["status"] = {"deallocationRequested": True, "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    decode_object(doc)
    decode_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                   "spec": {"podCIDR": "10.0.0.0/24"}, "status": {"capacity": {"cpu": "8"}}})
    decode_object(resource_slice([device(nodeAllocatableResourceMappings={"cpu": {}})]))


def test_opaque_parameters_are_not_checked() -> None:
    doc = edit(CLAIM.obj(), ("spec.devices.config", [{"opaque": {"driver": "d", "parameters": {"anything": {"goes": 1}}}}]))
    decode_object(doc)


def test_at_most_a_hundred_problems_per_object_as_upstream_caps_them() -> None:
    doc: dict[str, Any] = CLAIM.obj()
    doc["spec"]["devices"]["requests"][0]["exactly"].update({f"f{i}": i for i in range(150)})
    with pytest.raises(StrictDecodingError) as info:
        decode_object(doc)
    assert len(info.value.problems) == 100


def test_mode_names_are_kubectls() -> None:
    assert [check_mode(m) for m in ("strict", "warn", "ignore")] == ["strict", "warn", "ignore"]
    with pytest.raises(InvalidInput, match='validate: Unsupported value: "Strict"'):
        check_mode("Strict")
