"""Decoding what users have: YAML and JSON text, List kinds, API defaults, strict types, and
errors that name the file, object and field instead of raising a traceback."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dra_solver.model import objects as o
from dra_solver.model.decode import (
    apply_defaults,
    decode_all,
    decode_object,
    decode_text,
    parse_documents,
)
from dra_solver.model.errors import InvalidInput, StrictDecodingError
from dra_solver.model.validation import validate_object
from tests.conftest import DATA_DIR
from tests.model._docs import (
    CLAIM,
    DELETE,
    device,
    device_class,
    edit,
    resource_slice,
    taint_rule,
    template,
)

EXACTLY = "spec.devices.requests[0].exactly"


def _dump(*docs: Any) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


def _decode_error(doc: dict[str, Any]) -> str:
    with pytest.raises(InvalidInput) as info:
        decode_object(doc, source="in.yaml")
    return str(info.value)


# --- text formats -----------------------------------------------------------------------------


def test_multi_document_yaml_skips_empty_documents_and_keeps_order() -> None:
    text = (
        "# leading comment\n---\n" + _dump(device_class(), CLAIM.obj()) + "---\n---\n# only a comment\n"
    )
    objs = decode_text(text)
    assert [type(x) for x in objs] == [o.DeviceClass, o.ResourceClaim]


def test_json_object_array_and_stream() -> None:
    one = json.dumps(CLAIM.obj())
    assert [x.kind for x in decode_text(one)] == ["ResourceClaim"]
    array = json.dumps([device_class(), CLAIM.obj()])
    assert [x.kind for x in decode_text(array)] == ["DeviceClass", "ResourceClaim"]
    stream = json.dumps(device_class()) + "\n" + json.dumps(CLAIM.obj(), indent=2)
    assert [x.kind for x in decode_text(stream)] == ["DeviceClass", "ResourceClaim"]


def test_yaml_flow_mapping_is_not_mistaken_for_json() -> None:
    text = "{apiVersion: resource.k8s.io/v1, kind: DeviceClass, metadata: {name: c}}"
    [obj] = decode_text(text)
    assert isinstance(obj, o.DeviceClass)


def test_v1_list_and_typed_lists_are_flattened() -> None:
    items = [device_class(), CLAIM.obj(), resource_slice()]
    v1_list = {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
    assert [x.kind for x in decode_text(json.dumps(v1_list))] == [
        "DeviceClass",
        "ResourceClaim",
        "ResourceSlice",
    ]
    untyped = [{k: v for k, v in CLAIM.obj().items() if k != "kind"}]
    claim_list = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimList", "items": untyped}
    [obj] = decode_text(_dump(claim_list))
    assert isinstance(obj, o.ResourceClaim)
    nested = {"kind": "List", "items": [{"kind": "List", "items": [device_class()]}]}
    assert [x.kind for x in decode_text(json.dumps(nested))] == ["DeviceClass"]
    assert decode_text(json.dumps({"kind": "List", "items": []})) == []
    assert decode_text(json.dumps({"kind": "List"})) == []


def test_all_kinds_decode_to_their_models() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"zone": "a"}}}
    docs = [device_class(), resource_slice(), CLAIM.obj(), template(), taint_rule(), node]
    kinds = [type(x) for x in decode_all(docs)]
    assert kinds == [
        o.DeviceClass,
        o.ResourceSlice,
        o.ResourceClaim,
        o.ResourceClaimTemplate,
        o.DeviceTaintRule,
        o.Node,
    ]


# --- malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: DeviceClass\n  metadata: {name: x}\n",
            "in.yaml: cannot parse YAML: line 2, column 11: mapping values are not allowed in this context",
        ),
        (
            "kind: [DeviceClass\n",
            "in.yaml: cannot parse YAML: line 2, column 1: did not find expected ',' or ']'",
        ),
        (
            '{"kind": "DeviceClass"',
            "in.yaml: cannot parse JSON: line 1, column 23: Expecting ',' delimiter",
        ),
        (
            "kind: DeviceClass\nkind: ResourceClaim\n",
            'in.yaml: ResourceClaim <unnamed>: strict decoding error: duplicate field "kind"',
        ),
        (
            '{"kind": "DeviceClass", "kind": "ResourceClaim"}',
            'in.yaml: ResourceClaim <unnamed>: strict decoding error: duplicate field "kind"',
        ),
        ("just a string\n", "in.yaml: document 0: expected an object, got a string"),
        ("- 1\n- 2\n", "in.yaml: document 0: expected an object, got a list"),
        (
            '{"kind": "List", "items": {"a": 1}}',
            'in.yaml: List: items: Invalid value: {"a":1}: must be a list',
        ),
        (
            '{"kind": "List", "items": [3]}',
            "in.yaml: List: items[0]: Invalid value: 3: must be an object",
        ),
    ],
)
def test_malformed_text_is_one_clean_error(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_text(text, source="in.yaml")
    assert str(info.value) == message


def test_unknown_kind_and_missing_kind() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    assert _decode_error(pod) == (
        'in.yaml: Pod ns/p: kind: Unsupported value: "Pod": supported values: "DeviceClass", "DeviceTaintRule", '
        '"Node", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice"'
    )
    assert (
        _decode_error({"metadata": {"name": "x"}})
        == "in.yaml: object x: kind: Required value: kind must be set"
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            edit(CLAIM.obj(), ("apiVersion", "resource.k8s.io/v1beta1")),
            'apiVersion: Unsupported value: "resource.k8s.io/v1beta1": supported values: "resource.k8s.io/v1", '
            '"resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3"',
        ),
        (
            {"apiVersion": "resource.k8s.io/v1", "kind": "Node", "metadata": {"name": "n"}},
            'apiVersion: Unsupported value: "resource.k8s.io/v1": supported values: "v1"',
        ),
    ],
)
def test_api_versions(doc: dict[str, Any], message: str) -> None:
    assert _decode_error(doc).split(": ", 2)[2] == message


@pytest.mark.parametrize(
    ("doc", "field", "detail"),
    [
        (
            edit(CLAIM.obj(), (f"{EXACTLY}.count", "2")),
            f"{EXACTLY}.count",
            'Invalid value: "2": must be an integer, not a string',
        ),
        (
            edit(CLAIM.obj(), (f"{EXACTLY}.count", 1.5)),
            f"{EXACTLY}.count",
            "Invalid value: 1.5: must be an integer, not a number",
        ),
        (
            edit(CLAIM.obj(), (f"{EXACTLY}.adminAccess", "yes")),
            f"{EXACTLY}.adminAccess",
            'Invalid value: "yes": must be a boolean, not a string',
        ),
        (
            edit(CLAIM.obj(), (f"{EXACTLY}.count", True)),
            f"{EXACTLY}.count",
            "Invalid value: true: must be an integer, not a boolean",
        ),
        (
            edit(CLAIM.obj(), ("spec.devices.requests", {"name": "x"})),
            "spec.devices.requests",
            'Invalid value: {"name":"x"}: must be a list, not an object',
        ),
        (
            edit(CLAIM.obj(), ("spec.devices.requests[0].name", 7)),
            "spec.devices.requests[0].name",
            "Invalid value: 7: must be a string, not a number",
        ),
        (
            edit(CLAIM.obj(), (f"{EXACTLY}", "gpu")),
            f"{EXACTLY}",
            'Invalid value: "gpu": must be an object (ExactDeviceRequest), not a string',
        ),
        (
            edit(CLAIM.obj(), ("metadata.labels", {"a": 1})),
            "metadata.labels[a]",
            "Invalid value: 1: must be a string, not a number",
        ),
        (
            resource_slice([device(capacity={"cpu.example.com/cpu": "128"})]),
            "spec.devices[0].capacity[cpu.example.com/cpu]",
            'Invalid value: "128": must be an object (DeviceCapacity), not a string',
        ),
        (
            resource_slice([device(attributes={"numa": {"int": "0"}})]),
            "spec.devices[0].attributes[numa].int",
            'Invalid value: "0": must be an integer, not a string',
        ),
        (
            resource_slice([device(), device(taints="none")]),
            "spec.devices[1].taints",
            'Invalid value: "none": must be a list, not a string',
        ),
        (
            edit(resource_slice(), ("spec.pool.generation", "1")),
            "spec.pool.generation",
            'Invalid value: "1": must be an integer, not a string',
        ),
    ],
)
def test_wrong_types_name_the_field(doc: dict[str, Any], field: str, detail: str) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_object(doc, source="in.yaml")
    assert info.value.field == field
    assert info.value.detail == detail
    assert str(info.value).startswith("in.yaml: ")


def test_more_problems_are_counted() -> None:
    doc = resource_slice([device("a", capacity={"x": "1"}), device("b", capacity={"x": "2"})])
    assert _decode_error(doc).endswith("(and 1 more problem)")


def test_the_docs_cpu_slice_with_a_bare_capacity_fails_clearly() -> None:
    text = (DATA_DIR / "realworld" / "k8s-website-docs.yaml").read_text()
    docs = [d for d in parse_documents(text) if d["metadata"]["name"] == "my-node-cpus"]
    assert _decode_error(docs[0]) == (
        "in.yaml: ResourceSlice my-node-cpus: spec.devices[0].capacity[cpu.example.com/cpu]: "
        'Invalid value: "128": must be an object (DeviceCapacity), not a string (and 1 more problem)'
    )


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_anything_but_invalid_input(text: str) -> None:
    with contextlib.suppress(InvalidInput):
        decode_text(text, source="fuzz")


_KEYS = [
    "name",
    "count",
    "exactly",
    "requests",
    "value",
    "cel",
    "expression",
    "opaque",
    "driver",
    "string",
    "ints",
    "requestPolicy",
    "validRange",
    "min",
    "default",
    "validValues",
    "taints",
    "effect",
    "key",
    "operator",
    "nodeSelectorTerms",
    "matchFields",
    "devices",
    "shareID",
    "allocation",
    "results",
    "reservedFor",
    "pool",
    "counters",
    "counterSet",
]
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from(["", "x", "1Gi", "-1", "All", "Exists", "a/b", "1.2.3", "NoSchedule"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
_FUZZ_TARGETS = [
    (CLAIM.obj, "spec.devices.requests[0]"),
    (CLAIM.obj, EXACTLY),
    (CLAIM.obj, f"{EXACTLY}.count"),
    (CLAIM.obj, f"{EXACTLY}.selectors"),
    (CLAIM.obj, "spec.devices.constraints"),
    (CLAIM.obj, "spec.devices.config"),
    (CLAIM.obj, "status"),
    (CLAIM.obj, "metadata"),
    (resource_slice, "spec"),
    (resource_slice, "spec.devices[0]"),
    (resource_slice, "spec.devices[0].capacity"),
    (resource_slice, "spec.devices[0].capacity.memory"),
    (resource_slice, "spec.devices[0].attributes"),
    (resource_slice, "spec.sharedCounters"),
    (resource_slice, "spec.nodeSelector"),
    (device_class, "spec"),
    (taint_rule, "spec"),
    (template, "spec.metadata"),
]


@given(st.sampled_from(_FUZZ_TARGETS), _json_values)
def test_arbitrary_values_never_raise_anything_but_invalid_input(
    target: tuple[Any, str], value: Any
) -> None:
    build, path = target
    try:
        obj = decode_object(edit(build(), (path, value)))
    except InvalidInput:
        return
    validate_object(obj, selector_check=None)


# --- defaults ---------------------------------------------------------------------------------


def test_request_defaults_to_exact_count_of_one() -> None:
    obj = decode_object(CLAIM.obj())
    assert isinstance(obj, o.ResourceClaim)
    exactly = obj.spec.devices.requests[0].exactly  # type: ignore[index]
    assert exactly is not None
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)


def test_empty_allocation_mode_is_unset() -> None:
    obj = decode_object(edit(CLAIM.obj(), (f"{EXACTLY}.allocationMode", "")))
    exactly = obj.spec.devices.requests[0].exactly  # type: ignore[attr-defined]
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)


def test_all_mode_gets_no_count_and_explicit_counts_stay() -> None:
    obj = decode_object(edit(CLAIM.obj(), (f"{EXACTLY}.allocationMode", "All")))
    exactly = obj.spec.devices.requests[0].exactly  # type: ignore[attr-defined]
    assert (exactly.allocation_mode, exactly.count) == ("All", None)
    obj = decode_object(edit(CLAIM.obj(), (f"{EXACTLY}.count", 3)))
    assert obj.spec.devices.requests[0].exactly.count == 3  # type: ignore[attr-defined]


def test_unknown_allocation_mode_is_kept_for_validation_to_reject() -> None:
    obj = decode_object(edit(CLAIM.obj(), (f"{EXACTLY}.allocationMode", "Foo")))
    assert obj.spec.devices.requests[0].exactly.allocation_mode == "Foo"  # type: ignore[attr-defined]


def test_subrequest_and_template_defaults_and_toleration_operator() -> None:
    sub = {
        "name": "a",
        "deviceClassName": "c",
        "tolerations": [{"key": "k", "value": "v"}, {"operator": "Exists"}],
    }
    doc = edit(
        CLAIM.obj(),
        ("spec.devices.requests[0].exactly", DELETE),
        ("spec.devices.requests[0].firstAvailable", [sub]),
    )
    obj = decode_object(doc)
    assert isinstance(obj, o.ResourceClaim)
    first = obj.spec.devices.requests[0].first_available[0]  # type: ignore[index]
    assert (first.allocation_mode, first.count) == ("ExactCount", 1)
    assert [t.operator for t in first.tolerations or []] == ["Equal", "Exists"]
    tmpl = decode_object(template())
    assert isinstance(tmpl, o.ResourceClaimTemplate)
    assert tmpl.spec.spec.devices.requests[0].exactly.count == 1  # type: ignore[index, union-attr]


def test_defaults_are_idempotent_and_do_not_touch_other_kinds() -> None:
    obj = decode_object(CLAIM.obj())
    before = obj.to_api()
    apply_defaults(obj)
    assert obj.to_api() == before
    cls = decode_object(device_class())
    assert cls.to_api() == device_class()


# --- round trip --------------------------------------------------------------------------------


def test_round_trip_keeps_unknown_fields() -> None:
    doc = CLAIM.obj()
    doc["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
    doc["spec"]["devices"]["requests"][0]["exactly"]["futureField"] = {"x": [1, 2]}
    doc["status"] = {"allocation": {"devices": {"results": []}, "futureAllocationField": "y"}}
    out = decode_object(doc, validate="ignore").to_api()
    assert out["metadata"]["managedFields"] == doc["metadata"]["managedFields"]
    assert out["spec"]["devices"]["requests"][0]["exactly"]["futureField"] == {"x": [1, 2]}
    assert out["status"]["allocation"]["futureAllocationField"] == "y"
    # Apart from the defaults the API server adds, nothing changes.
    exactly = out["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly.pop("allocationMode"), exactly.pop("count")) == ("ExactCount", 1)
    assert out == doc


def test_round_trip_of_a_slice_with_new_alpha_fields() -> None:
    dev = device(nodeAllocatableResourceMappings={"cpu": {"capacityKey": "memory"}})
    doc = resource_slice([dev])
    assert decode_object(doc).to_api() == doc


def test_timestamps_stay_strings_and_nulls_read_as_absent() -> None:
    text = (
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata:\n  name: r\n"
        "  creationTimestamp: 2025-01-02T03:04:05Z\nspec:\n  deviceSelector: null\n  taint:\n"
        "    key: example.com/k\n    effect: NoSchedule\n    timeAdded: 2025-01-02T03:04:05Z\n"
    )
    [obj] = decode_text(text)
    assert isinstance(obj, o.DeviceTaintRule)
    assert obj.metadata.creation_timestamp == "2025-01-02T03:04:05Z"
    assert obj.spec.taint.time_added == "2025-01-02T03:04:05Z"
    assert obj.spec.device_selector is None


def test_quantities_written_as_numbers_are_read_as_text() -> None:
    obj = decode_object(resource_slice([device(capacity={"memory": {"value": 80}})]))
    assert isinstance(obj, o.ResourceSlice)
    assert obj.spec.devices[0].capacity["memory"].value == "80"  # type: ignore[index]


# --- corpora ----------------------------------------------------------------------------------


def test_realworld_corpus_decodes() -> None:
    failures: list[str] = []
    count = 0
    for path in sorted((DATA_DIR / "realworld").glob("*.yaml")):
        for doc in parse_documents(path.read_text(), source=path.name):
            count += 1
            try:
                decode_object(doc, source=path.name, validate="ignore")
            except InvalidInput as err:
                failures.append(str(err))
    assert count == 240
    assert [f.split(":")[0:2] for f in failures] == [
        ["k8s-website-docs.yaml", " ResourceSlice my-node-cpus"]
    ]


def test_realworld_corpus_strict_decoding_finds_what_the_api_server_would_reject() -> None:
    # Objects written for older API versions but labelled v1: kubectl (strict by default)
    # rejects every one of them, naming the field.
    failures: list[str] = []
    for path in sorted((DATA_DIR / "realworld").glob("*.yaml")):
        for doc in parse_documents(path.read_text(), source=path.name):
            try:
                decode_object(doc, source=path.name)
            except StrictDecodingError as err:
                failures.append(str(err))
            except InvalidInput:
                pass  # a type error, the same whatever --validate says (test above)
    assert failures == [
        'dranet.yaml: ResourceClaimTemplate mpi-worker-rdma-nic-template: strict decoding error: unknown field "spec.spec.config"',
        'dranet.yaml: ResourceSlice gke-aojea-dra-multi-nic-985b8c20-jg5l-dra.net-8nq9c: strict decoding error: unknown field "spec.devices[0].basic"',
        'intel-resource-drivers.yaml: ResourceClaimTemplate claim1: strict decoding error: unknown field "spec.spec.devices.requests[0].exactly.selectors[0].expression"',
        'intel-resource-drivers.yaml: ResourceClaim claim1: strict decoding error: unknown field "spec.devices.requests[0].deviceClassName"',
        'k8s-website-docs.yaml: ResourceClaim example-resource-claim: strict decoding error: unknown field "spec.devices.requests[0].exactly.selectors[0].expression"',
    ]


def test_conformance_corpus_decodes() -> None:
    for path in sorted((DATA_DIR / "conformance" / "cases").glob("*.json")):
        case = json.loads(path.read_text())
        decode_all(
            [case["node"], *case["classes"], *case["slices"], *case["claims"]], source=path.name
        )


def test_json_value_at_reads_one_value_as_the_full_parse_would_or_says_none() -> None:
    from dra_solver.model.decode import DecodeLimits, json_value_at

    text = '{"kind":"ResourceClaim","metadata":{"name":"a","labels":{"x":"1"}},"spec":{}}'
    start = text.index('{"name"')
    value, end = json_value_at(text, start) or (None, 0)
    assert value == {"name": "a", "labels": {"x": "1"}} and text[end:] == ',"spec":{}}'
    # A key named twice is kept apart, as parse_documents keeps it (strict validation reports it).
    twice = '{"metadata":{"name":"a","name":"b"}}'
    found = json_value_at(twice, len('{"metadata":'))
    assert found is not None and found[0] == {"name": "b"} and type(found[0]) is not dict
    assert parse_documents(twice)[0]["metadata"] == found[0]
    # Whatever the full parse refuses, or reads otherwise: none.
    assert json_value_at(text, start - 1) is None, "no value at a colon"
    assert json_value_at(text, start, limits=DecodeLimits(max_chars=len(text) - 1)) is None
    assert json_value_at('{"m":' + "[" * 101 + "]" * 101 + "}", 5) is None, "nested deeper than the limit, anywhere in the text"
    assert json_value_at('{"m":{"a":"\\ud800"}}', 5) is None
    assert json_value_at('{"m":' + "9" * 5000 + "}", 5) is None, "an integer too long to convert"
    assert json_value_at('{"m":{"a":"\\u00e9"}}', 5) == ({"a": "é"}, 19)
