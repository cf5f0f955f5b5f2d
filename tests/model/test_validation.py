"""API-server validation: every rule and limit, worded and located as kube-apiserver reports it.

Each table row changes one thing in an otherwise valid object and lists every error the API
server reports for it (``field: detail``), in order. Messages are upstream's, verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_solver.model import objects as o
from dra_solver.model.decode import decode_object, parse_documents
from dra_solver.model.errors import InvalidInput, InvalidInputs
from dra_solver.model.validation import (
    CEL_COST_EXCEEDED,
    ValidationMemo,
    default_selector_check,
    parse_quantity_value,
    validate_claim,
    validate_object,
    validate_objects,
)
from tests.conftest import DATA_DIR
from tests.model._docs import (
    CLAIM,
    DELETE,
    Doc,
    changed,
    device,
    device_class,
    edit,
    resource_slice,
    taint_rule,
    template,
)

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
    "validation is '[A-Za-z_][A-Za-z0-9_]*')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
REQUEST_REF_MSG = "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
QUANTITY_MSG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)

REQ = "spec.devices.requests[0]"
EXACTLY = f"{REQ}.exactly"
DEV = "spec.devices[0]"


def _errors(doc: Doc, *, check: Callable[[str], str | None] | None = None) -> list[str]:
    # Validation rules, not strict field validation (tests/model/test_decode.py has those);
    # what the API server's decoder rejects (bad quantities) is reported the same way.
    try:
        obj = decode_object(doc, validate="ignore")
    except InvalidInput as err:
        return [f"{err.field}: {err.detail}"]
    return [f"{e.field}: {e.detail}" for e in validate_object(obj, selector_check=check)]


def _requests(n: int) -> list[Doc]:
    return [{"name": f"r{i}", "exactly": {"deviceClassName": "c"}} for i in range(n)]


def _subrequests(n: int) -> list[Doc]:
    return [{"name": f"s{i}", "deviceClassName": "c"} for i in range(n)]


def _selectors(n: int) -> list[Doc]:
    return [{"cel": {"expression": "true"}} for _ in range(n)]


def _opaque(**extra: Any) -> Doc:
    body: Doc = {"driver": "gpu.example.com", "parameters": {"kind": "GpuConfig"}}
    body.update(extra)
    return {"opaque": body}


def _devices(n: int, **fields: Any) -> list[Doc]:
    return [device(f"dev-{i}", **fields) for i in range(n)]


def _shared_device(capacity: Doc) -> Doc:
    return device(allowMultipleAllocations=True, capacity={"memory": capacity})


# --- ResourceClaim ------------------------------------------------------------------------------

CLAIM_CASES: list[tuple[str, Doc, list[str]]] = [
    ("valid", CLAIM.obj(), []),
    (
        "count-zero",
        edit(CLAIM.obj(), (f"{EXACTLY}.count", 0)),
        [f"{EXACTLY}.count: Invalid value: 0: must be greater than zero"],
    ),
    (
        "count-negative",
        edit(CLAIM.obj(), (f"{EXACTLY}.count", -2)),
        [f"{EXACTLY}.count: Invalid value: -2: must be greater than zero"],
    ),
    (
        "allocation-mode-unknown",
        edit(CLAIM.obj(), (f"{EXACTLY}.allocationMode", "Foo")),
        [
            f'{EXACTLY}.allocationMode: Unsupported value: "Foo": supported values: "All", "ExactCount"'
        ],
    ),
    ("allocation-mode-all", edit(CLAIM.obj(), (f"{EXACTLY}.allocationMode", "All")), []),
    (
        "allocation-mode-all-with-count",
        edit(CLAIM.obj(), (f"{EXACTLY}.allocationMode", "All"), (f"{EXACTLY}.count", 2)),
        [f"{EXACTLY}.count: Invalid value: 2: must not be specified when allocationMode is 'All'"],
    ),
    (
        "request-without-type",
        edit(CLAIM.obj(), (f"{REQ}.exactly", DELETE)),
        [f"{REQ}: Required value: exactly one of `exactly` or `firstAvailable` is required"],
    ),
    (
        "request-with-both-types",
        edit(CLAIM.obj(), (f"{REQ}.firstAvailable", _subrequests(1))),
        [
            f"{REQ}: Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set"
        ],
    ),
    ("requests-max", CLAIM.devices(requests=_requests(32)).obj(), []),
    (
        "requests-too-many",
        CLAIM.devices(requests=_requests(33)).obj(),
        ["spec.devices.requests: Too many: 33: must have at most 32 items"],
    ),
    (
        "request-duplicate",
        CLAIM.devices(requests=[*_requests(2), _requests(1)[0]]).obj(),
        ['spec.devices.requests[2]: Duplicate value: "r0"'],
    ),
    (
        "request-name-uppercase",
        edit(CLAIM.obj(), (f"{REQ}.name", "Gpu")),
        [f'{REQ}.name: Invalid value: "Gpu": {LABEL_MSG}'],
    ),
    (
        "request-name-dots",
        edit(CLAIM.obj(), (f"{REQ}.name", "a.b")),
        [f'{REQ}.name: Invalid value: "a.b": must not contain dots'],
    ),
    (
        "request-name-too-long",
        edit(CLAIM.obj(), (f"{REQ}.name", "a" * 64)),
        [f'{REQ}.name: Invalid value: "{"a" * 64}": must be no more than 63 characters'],
    ),
    (
        "class-missing",
        edit(CLAIM.obj(), (f"{EXACTLY}.deviceClassName", DELETE)),
        [f"{EXACTLY}.deviceClassName: Required value"],
    ),
    (
        "class-bad",
        edit(CLAIM.obj(), (f"{EXACTLY}.deviceClassName", "GPU_class")),
        [f'{EXACTLY}.deviceClassName: Invalid value: "GPU_class": {SUBDOMAIN_MSG}'],
    ),
    (
        "subrequests-max",
        edit(CLAIM.obj(), (f"{REQ}.exactly", DELETE), (f"{REQ}.firstAvailable", _subrequests(8))),
        [],
    ),
    (
        "subrequests-too-many",
        edit(CLAIM.obj(), (f"{REQ}.exactly", DELETE), (f"{REQ}.firstAvailable", _subrequests(9))),
        [f"{REQ}.firstAvailable: Too many: 9: must have at most 8 items"],
    ),
    (
        "subrequest-duplicate",
        edit(CLAIM.obj(), (f"{REQ}.exactly", DELETE), (f"{REQ}.firstAvailable", _subrequests(1) * 2)),
        [f'{REQ}.firstAvailable[1]: Duplicate value: "s0"'],
    ),
    (
        "subrequest-problems",
        edit(
            CLAIM.obj(),
            (f"{REQ}.exactly", DELETE),
            (
                f"{REQ}.firstAvailable",
                [{"name": "subReq-0", "allocationMode": "Some", "selectors": _selectors(33)}],
            ),
        ),
        [
            f'{REQ}.firstAvailable[0].name: Invalid value: "subReq-0": {LABEL_MSG}',
            f"{REQ}.firstAvailable[0].deviceClassName: Required value",
            f"{REQ}.firstAvailable[0].selectors: Too many: 33: must have at most 32 items",
            f'{REQ}.firstAvailable[0].allocationMode: Unsupported value: "Some": supported values: "All", "ExactCount"',
        ],
    ),
    ("selectors-max", edit(CLAIM.obj(), (f"{EXACTLY}.selectors", _selectors(32))), []),
    (
        "selectors-too-many",
        edit(CLAIM.obj(), (f"{EXACTLY}.selectors", _selectors(33))),
        [f"{EXACTLY}.selectors: Too many: 33: must have at most 32 items"],
    ),
    (
        "selector-without-cel",
        edit(CLAIM.obj(), (f"{EXACTLY}.selectors", [{"cel": None, "expression": "true"}])),
        [f"{EXACTLY}.selectors[0].cel: Required value"],
    ),
    (
        "selector-too-long",
        edit(CLAIM.obj(), (f"{EXACTLY}.selectors", [{"cel": {"expression": "x" * (10 * 1024 + 1)}}])),
        [f"{EXACTLY}.selectors[0].cel.expression: Too long: may not be more than 10240 bytes"],
    ),
    (
        "tolerations-max",
        edit(CLAIM.obj(), (f"{EXACTLY}.tolerations", [{"operator": "Exists"}] * 16)),
        [],
    ),
    (
        "tolerations-too-many",
        edit(CLAIM.obj(), (f"{EXACTLY}.tolerations", [{"operator": "Exists"}] * 17)),
        [f"{EXACTLY}.tolerations: Too many: 17: must have at most 16 items"],
    ),
    (
        "toleration-operator-unknown",
        edit(CLAIM.obj(), (f"{EXACTLY}.tolerations", [{"key": "a", "operator": "In"}])),
        [
            f'{EXACTLY}.tolerations[0].operator: Unsupported value: "In": supported values: "Equal", "Exists"'
        ],
    ),
    (
        "toleration-exists-with-value",
        edit(
            CLAIM.obj(), (f"{EXACTLY}.tolerations", [{"key": "a", "operator": "Exists", "value": "v"}])
        ),
        [
            f'{EXACTLY}.tolerations[0].value: Invalid value: "v": must be empty for operator `Exists`'
        ],
    ),
    (
        "toleration-equal-bad-value",
        edit(CLAIM.obj(), (f"{EXACTLY}.tolerations", [{"key": "a", "value": "not ok"}])),
        [f'{EXACTLY}.tolerations[0].value: Invalid value: "not ok": {LABEL_VALUE_MSG}'],
    ),
    (
        "toleration-bad-key",
        edit(CLAIM.obj(), (f"{EXACTLY}.tolerations", [{"key": "a b", "operator": "Exists"}])),
        [f'{EXACTLY}.tolerations[0].key: Invalid value: "a b": {NAME_PART_MSG}'],
    ),
    (
        "toleration-effect-unknown",
        edit(
            CLAIM.obj(),
            (f"{EXACTLY}.tolerations", [{"operator": "Exists", "effect": "PreferNoSchedule"}]),
        ),
        [
            f'{EXACTLY}.tolerations[0].effect: Unsupported value: "PreferNoSchedule": '
            'supported values: "NoExecute", "NoSchedule", "None"'
        ],
    ),
    (
        "capacity-request-bad-quantity",
        edit(CLAIM.obj(), (f"{EXACTLY}.capacity", {"requests": {"memory": "lots"}})),
        [f'{EXACTLY}.capacity.requests[memory]: Invalid value: "lots": {QUANTITY_MSG}'],
    ),
    (
        "constraint-valid",
        CLAIM.devices(
            requests=_requests(2),
            constraints=[{"requests": ["r0", "r1"], "matchAttribute": "gpu.example.com/numa"}],
        ).obj(),
        [],
    ),
    (
        "constraint-subrequest-ref",
        edit(
            CLAIM.devices(
                constraints=[{"requests": ["gpu/s1"], "distinctAttribute": "gpu.example.com/numa"}]
            ).obj(),
            (f"{REQ}.exactly", DELETE),
            (f"{REQ}.firstAvailable", _subrequests(2)),
        ),
        [],
    ),
    (
        "constraint-unknown-request",
        CLAIM.devices(constraints=[{"requests": ["nic"], "matchAttribute": "gpu.example.com/numa"}]).obj(),
        [f'spec.devices.constraints[0].requests[0]: Invalid value: "nic": {REQUEST_REF_MSG}'],
    ),
    (
        "constraint-unknown-subrequest",
        CLAIM.devices(constraints=[{"requests": ["gpu/s0"], "matchAttribute": "gpu.example.com/numa"}]).obj(),
        [f'spec.devices.constraints[0].requests[0]: Invalid value: "gpu/s0": {REQUEST_REF_MSG}'],
    ),
    (
        "constraint-too-many-slashes",
        CLAIM.devices(constraints=[{"requests": ["a/b/c"], "matchAttribute": "gpu.example.com/numa"}]).obj(),
        [f'spec.devices.constraints[0].requests[0]: Invalid value: "a/b/c": {REQUEST_REF_MSG}'],
    ),
    (
        "constraint-duplicate-request",
        CLAIM.devices(constraints=[{"requests": ["gpu", "gpu"], "matchAttribute": "gpu.example.com/numa"}]).obj(),
        ['spec.devices.constraints[0].requests[1]: Duplicate value: "gpu"'],
    ),
    (
        "constraint-without-type",
        CLAIM.devices(constraints=[{"requests": ["gpu"]}]).obj(),
        [
            'spec.devices.constraints[0]: Required value: exactly one of "matchAttribute" or '
            '"distinctAttribute" is required, but multiple fields are set'
        ],
    ),
    (
        "constraint-not-fully-qualified",
        CLAIM.devices(constraints=[{"matchAttribute": "numa"}]).obj(),
        [
            'spec.devices.constraints[0].matchAttribute: Invalid value: "numa": a fully qualified name '
            "must be a domain and a name separated by a slash"
        ],
    ),
    (
        "constraint-bad-identifier",
        CLAIM.devices(constraints=[{"distinctAttribute": "gpu.example.com/numa-node"}]).obj(),
        [
            f'spec.devices.constraints[0].distinctAttribute: Invalid value: "numa-node": {C_IDENTIFIER_MSG}'
        ],
    ),
    (
        "constraint-two-slashes",
        CLAIM.devices(constraints=[{"matchAttribute": "a/b/c"}]).obj(),
        [
            'spec.devices.constraints[0].matchAttribute: Invalid value: "a/b/c": must not contain more than one slash'
        ],
    ),
    ("constraints-max", CLAIM.devices(constraints=[{"matchAttribute": "a.io/b"}] * 32).obj(), []),
    (
        "constraints-too-many",
        CLAIM.devices(constraints=[{"matchAttribute": "a.io/b"}] * 33).obj(),
        ["spec.devices.constraints: Too many: 33: must have at most 32 items"],
    ),
    ("config-valid", CLAIM.devices(config=[{"requests": ["gpu"], **_opaque()}]).obj(), []),
    ("config-max", CLAIM.devices(config=[_opaque()] * 32).obj(), []),
    (
        "config-too-many",
        CLAIM.devices(config=[_opaque()] * 33).obj(),
        ["spec.devices.config: Too many: 33: must have at most 32 items"],
    ),
    (
        "config-without-opaque",
        CLAIM.devices(config=[{"requests": ["gpu"]}]).obj(),
        ["spec.devices.config[0].opaque: Required value"],
    ),
    (
        "config-bad-driver",
        CLAIM.devices(config=[_opaque(driver="Bad_Driver")]).obj(),
        [f'spec.devices.config[0].opaque.driver: Invalid value: "Bad_Driver": {SUBDOMAIN_MSG}'],
    ),
    (
        "config-driver-too-long",
        CLAIM.devices(config=[_opaque(driver="a" * 64)]).obj(),
        ["spec.devices.config[0].opaque.driver: Too long: may not be more than 63 bytes"],
    ),
    (
        "config-parameters-missing",
        CLAIM.devices(config=[_opaque(parameters=None)]).obj(),
        ["spec.devices.config[0].opaque.parameters: Required value"],
    ),
    (
        "config-parameters-not-object",
        CLAIM.devices(config=[_opaque(parameters=[1, 2])]).obj(),
        [
            'spec.devices.config[0].opaque.parameters: Invalid value: "<value omitted>": must be a valid JSON object'
        ],
    ),
    (
        "config-parameters-too-long",
        CLAIM.devices(config=[_opaque(parameters={"blob": "x" * 10240})]).obj(),
        ["spec.devices.config[0].opaque.parameters: Too long: may not be more than 10240 bytes"],
    ),
    (
        "config-unknown-request",
        CLAIM.devices(config=[{"requests": ["nic"], **_opaque()}]).obj(),
        [f'spec.devices.config[0].requests[0]: Invalid value: "nic": {REQUEST_REF_MSG}'],
    ),
    (
        "metadata-generate-name",
        edit(CLAIM.obj(), ("metadata.name", DELETE), ("metadata.generateName", "c-")),
        [],
    ),
    (
        "metadata-name-missing",
        edit(CLAIM.obj(), ("metadata.name", DELETE)),
        ["metadata.name: Required value: name or generateName is required"],
    ),
    (
        "metadata-name-bad",
        edit(CLAIM.obj(), ("metadata.name", "C1")),
        [f'metadata.name: Invalid value: "C1": {SUBDOMAIN_MSG}'],
    ),
    (
        "metadata-namespace-bad",
        edit(CLAIM.obj(), ("metadata.namespace", "my.ns")),
        ['metadata.namespace: Invalid value: "my.ns": must not contain dots'],
    ),
    ("metadata-namespace-absent", edit(CLAIM.obj(), ("metadata.namespace", DELETE)), []),
    (
        "metadata-label-value",
        edit(CLAIM.obj(), ("metadata.labels", {"app": "two words"})),
        [f'metadata.labels: Invalid value: "two words": {LABEL_VALUE_MSG}'],
    ),
    (
        "metadata-annotation-key",
        edit(CLAIM.obj(), ("metadata.annotations", {"!@#$%^": "x"})),
        [f'metadata.annotations: Invalid value: "!@#$%^": {NAME_PART_MSG}'],
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in CLAIM_CASES], ids=[c[0] for c in CLAIM_CASES]
)
def test_claim_rules(doc: Doc, expected: list[str]) -> None:
    assert _errors(doc) == expected


def test_error_names_the_object_and_field_like_the_api_server() -> None:
    obj = decode_object(edit(CLAIM.obj(), (f"{EXACTLY}.count", 0)))
    [err] = validate_object(obj, selector_check=None)
    assert isinstance(err, InvalidInput)
    assert str(err) == (
        "ResourceClaim default/c1: spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than zero"
    )
    assert err.field_path == ("spec", "devices", "requests", 0, "exactly", "count")


def test_a_claim_reports_all_of_its_problems_at_once() -> None:
    doc = edit(
        CLAIM.devices(constraints=[{"requests": ["nic"]}]).obj(),
        ("metadata.name", "Bad"),
        (f"{EXACTLY}.allocationMode", "Foo"),
    )
    fields = [e.split(":")[0] for e in _errors(doc)]
    assert fields == [
        "metadata.name",
        f"{EXACTLY}.allocationMode",
        "spec.devices.constraints[0].requests[0]",
        "spec.devices.constraints[0]",
    ]


# --- allocation results (status) -----------------------------------------------------------------


def _allocated(results: list[Doc], **status: Any) -> Doc:
    doc = CLAIM.obj()
    doc["status"] = {"allocation": {"devices": {"results": results}}, **status}
    return doc


def _result(**fields: Any) -> Doc:
    body: Doc = {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}
    body.update(fields)
    return body


STATUS_CASES: list[tuple[str, Doc, list[str]]] = [
    ("valid", _allocated([_result()], reservedFor=[{"resource": "pods", "name": "p"}]), []),
    ("results-max", _allocated([_result(device=f"gpu-{i}") for i in range(32)]), []),
    (
        "results-too-many",
        _allocated([_result(device=f"gpu-{i}") for i in range(33)]),
        ["status.allocation.devices.results: Too many: 33: must have at most 32 items"],
    ),
    (
        "result-unknown-request",
        _allocated([_result(request="nic")]),
        [f'status.allocation.devices.results[0].request: Invalid value: "nic": {REQUEST_REF_MSG}'],
    ),
    (
        "result-pool-missing",
        _allocated([_result(pool="")]),
        ["status.allocation.devices.results[0].pool: Required value"],
    ),
    (
        "result-share-id",
        _allocated([_result(shareID="ABCDEF01-2345-6789-ABCD-EF0123456789")]),
        [
            'status.allocation.devices.results[0].shareID: Invalid value: "ABCDEF01-2345-6789-ABCD-EF0123456789": '
            "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase "
            "hexadecimal characters"
        ],
    ),
    (
        "result-share-id-garbage",
        _allocated([_result(shareID="abc")]),
        [
            'status.allocation.devices.results[0].shareID: Invalid value: "abc": '
            "error validating uid: invalid UUID length: 3"
        ],
    ),
    (
        "result-share-id-braces",
        _allocated([_result(shareID="{0e6ae2d5-3fd8-4d8b-a7a8-3b2c1e4f5a60}")]),
        [
            'status.allocation.devices.results[0].shareID: Invalid value: "{0e6ae2d5-3fd8-4d8b-a7a8-3b2c1e4f5a60}": '
            "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase "
            "hexadecimal characters"
        ],
    ),
    (
        "result-share-id-ok",
        _allocated([_result(shareID="0e6ae2d5-3fd8-4d8b-a7a8-3b2c1e4f5a60")]),
        [],
    ),
    (
        "config-source-unknown",
        changed(
            _allocated([_result()]),
            lambda d: d["status"]["allocation"]["devices"].update(
                config=[{"source": "FromPod", **_opaque()}]
            ),
        ),
        [
            'status.allocation.devices.config[0].source: Unsupported value: "FromPod": supported values: "FromClaim", "FromClass"'
        ],
    ),
    (
        "reserved-without-allocation",
        changed(
            CLAIM.obj(),
            lambda d: d.update(
                status={"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
            ),
        ),
        ["status.reservedFor: Forbidden: may not be specified when `allocated` is not set"],
    ),
    (
        "device-status-not-allocated",
        _allocated(
            [_result()],
            devices=[{"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-1"}],
        ),
        [
            'status.devices[0]: Invalid value: "gpu.example.com/node-1/gpu-1": must be an allocated device in the claim'
        ],
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in STATUS_CASES], ids=[c[0] for c in STATUS_CASES]
)
def test_allocation_result_rules(doc: Doc, expected: list[str]) -> None:
    assert _errors(doc) == expected


# --- ResourceClaimTemplate -----------------------------------------------------------------------

TEMPLATE_CASES: list[tuple[str, Doc, list[str]]] = [
    ("valid", template(), []),
    (
        "inner-spec-path",
        edit(template(), ("spec.spec.devices.requests[0].exactly.count", 0)),
        [
            "spec.spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than zero"
        ],
    ),
    (
        "template-metadata-name",
        edit(template(), ("spec.metadata.name", "x")),
        ['spec.metadata.name: Invalid value: "x": cannot be set for a resource claim template'],
    ),
    (
        "template-metadata-labels",
        edit(template(), ("spec.metadata.labels", {"a": "b c"})),
        [f'spec.metadata.labels: Invalid value: "b c": {LABEL_VALUE_MSG}'],
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in TEMPLATE_CASES], ids=[c[0] for c in TEMPLATE_CASES]
)
def test_template_rules(doc: Doc, expected: list[str]) -> None:
    assert _errors(doc) == expected


# --- ResourceSlice -------------------------------------------------------------------------------

ONE_OF_NODE = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)
SELECTOR = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    ]
}


def _counters(n: int) -> Doc:
    return {f"c{i}": {"value": "1"} for i in range(n)}


def _attributes(n: int) -> Doc:
    return {f"a{i}": {"int": i} for i in range(n)}


SLICE_CASES: list[tuple[str, Doc, list[str]]] = [
    ("valid", resource_slice(), []),
    (
        "node-selection-missing",
        edit(resource_slice(), ("spec.nodeName", DELETE)),
        [f"spec: Required value: {ONE_OF_NODE}"],
    ),
    (
        "node-selection-two",
        edit(resource_slice(), ("spec.allNodes", True)),
        [
            f'spec: Invalid value: "{{`nodeName`, `allNodes`}}": {ONE_OF_NODE}, but multiple fields are set'
        ],
    ),
    (
        "node-name-empty",
        edit(resource_slice(), ("spec.nodeName", ""), ("spec.allNodes", True)),
        ['spec.nodeName: Invalid value: "": must be either unset or set to a non-empty string'],
    ),
    (
        "all-nodes-false",
        edit(resource_slice(), ("spec.allNodes", False)),
        ["spec.allNodes: Invalid value: false: must be either unset or set to true"],
    ),
    (
        "node-selector",
        edit(resource_slice(), ("spec.nodeName", DELETE), ("spec.nodeSelector", SELECTOR)),
        [],
    ),
    (
        "node-selector-two-terms",
        edit(
            resource_slice(),
            ("spec.nodeName", DELETE),
            ("spec.nodeSelector", {"nodeSelectorTerms": SELECTOR["nodeSelectorTerms"] * 2}),
        ),
        [
            'spec.nodeSelector.nodeSelectorTerms: Invalid value: [{"matchExpressions":[{"key":"zone","operator":"In",'
            '"values":["a"]}]},{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}]: '
            "must have exactly one node selector term"
        ],
    ),
    (
        "node-selector-empty",
        edit(
            resource_slice(),
            ("spec.nodeName", DELETE),
            ("spec.nodeSelector", {"nodeSelectorTerms": []}),
        ),
        [
            "spec.nodeSelector.nodeSelectorTerms: Required value: must have at least one node selector term",
            "spec.nodeSelector.nodeSelectorTerms: Invalid value: null: must have exactly one node selector term",
        ],
    ),
    (
        "node-selector-operator",
        edit(
            resource_slice(),
            ("spec.nodeName", DELETE),
            (
                "spec.nodeSelector",
                {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "Near"}]}
                    ]
                },
            ),
        ),
        [
            'spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator'
        ],
    ),
    (
        "node-selector-match-fields",
        edit(
            resource_slice(),
            ("spec.nodeName", DELETE),
            (
                "spec.nodeSelector",
                {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.uid", "operator": "In", "values": ["a", "b"]}
                            ]
                        }
                    ]
                },
            ),
        ),
        [
            "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].values: Required value: must be only one value "
            "when `operator` is 'In' or 'NotIn' for node field selector",
            'spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key: Invalid value: "metadata.uid": not a valid field selector key',
        ],
    ),
    (
        "driver-missing",
        edit(resource_slice(), ("spec.driver", DELETE)),
        ["spec.driver: Required value"],
    ),
    (
        "driver-bad",
        edit(resource_slice(), ("spec.driver", "!@#$%^")),
        [f'spec.driver: Invalid value: "!@#$%^": {SUBDOMAIN_MSG}'],
    ),
    (
        "pool-problems",
        edit(
            resource_slice(),
            ("spec.pool", {"name": "ok/Bad", "generation": -1, "resourceSliceCount": 0}),
        ),
        [
            f'spec.pool.name: Invalid value: "Bad": {SUBDOMAIN_MSG}',
            "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
            "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero",
        ],
    ),
    (
        "pool-name-missing",
        edit(resource_slice(), ("spec.pool.name", "")),
        ["spec.pool.name: Required value"],
    ),
    ("devices-max", resource_slice(_devices(128)), []),
    (
        "devices-too-many",
        resource_slice(_devices(129)),
        ["spec.devices: Too many: 129: must have at most 128 items"],
    ),
    (
        "devices-with-taints-max",
        resource_slice(_devices(64, taints=[{"key": "example.com/t", "effect": "NoSchedule"}])),
        [],
    ),
    (
        "devices-with-a-taint-too-many",
        resource_slice(
            [*_devices(64), device("tainted", taints=[{"key": "example.com/t", "effect": "None"}])]
        ),
        ["spec.devices: Too many: 65: must have at most 64 items"],
    ),
    (
        "devices-consuming-counters-too-many",
        resource_slice(
            [
                *_devices(64),
                device(
                    "part", consumesCounters=[{"counterSet": "gpu-0", "counters": _counters(1)}]
                ),
            ]
        ),
        ["spec.devices: Too many: 65: must have at most 64 items"],
    ),
    (
        "devices-with-list-attribute-too-many",
        resource_slice([*_devices(64), device("listy", attributes={"numa": {"ints": [0, 1]}})]),
        ["spec.devices: Too many: 65: must have at most 64 items"],
    ),
    (
        "device-duplicate",
        resource_slice([device("a"), device("a")]),
        ['spec.devices[1]: Duplicate value: "a"'],
    ),
    (
        "device-name-bad",
        resource_slice([device("GPU0")]),
        [f'{DEV}.name: Invalid value: "GPU0": {LABEL_MSG}'],
    ),
    ("attributes-and-capacity-max", resource_slice([device(attributes=_attributes(31))]), []),
    (
        "attributes-and-capacity-too-many",
        resource_slice([device(attributes=_attributes(32))]),
        [
            f"{DEV}: Invalid value: 33: the total number of attributes and capacities must not exceed 32"
        ],
    ),
    (
        "attribute-values-too-many",
        resource_slice(
            [device(attributes={"list": {"strings": ["x"] * 48}, "one": {"int": 1}}, capacity={})]
        ),
        [f"{DEV}: Invalid value: 49: the total number of attribute values must not exceed 48"],
    ),
    (
        "attribute-without-value",
        resource_slice([device(attributes={"model": {}})]),
        [f'{DEV}.attributes[model]: Invalid value: "": exactly one value must be specified'],
    ),
    (
        "attribute-two-values",
        resource_slice([device(attributes={"model": {"string": "x", "int": 1}})]),
        [
            f'{DEV}.attributes[model]: Invalid value: {{"int":1,"string":"x"}}: exactly one value must be specified'
        ],
    ),
    (
        "attribute-string-too-long",
        resource_slice([device(attributes={"model": {"string": "x" * 65}})]),
        [f"{DEV}.attributes[model].string: Too long: may not be more than 64 bytes"],
    ),
    (
        "attribute-string-max",
        resource_slice([device(attributes={"model": {"string": "x" * 64}})]),
        [],
    ),
    (
        "attribute-version-bad",
        resource_slice([device(attributes={"v": {"version": "1.2"}})]),
        [
            f'{DEV}.attributes[v].version: Invalid value: "1.2": must be a string compatible with semver.org spec 2.0.0'
        ],
    ),
    (
        "attribute-version-prerelease",
        resource_slice([device(attributes={"v": {"version": "1.2.3-rc.1+build.5"}})]),
        [],
    ),
    (
        "attribute-list-empty",
        resource_slice([device(attributes={"numa": {"ints": []}})]),
        [f"{DEV}.attributes[numa].ints: Invalid value: []: must not be empty if specified"],
    ),
    (
        "attribute-list-version-bad",
        resource_slice([device(attributes={"v": {"versions": ["1.0.0", "v2"]}})]),
        [
            f'{DEV}.attributes[v].versions[1]: Invalid value: "v2": must be a string compatible with semver.org spec 2.0.0'
        ],
    ),
    (
        "attribute-name-not-identifier",
        resource_slice(
            [device(attributes={"dra.example.com/supported-models": {"strings": ["a"]}})]
        ),
        [f'{DEV}.attributes: Invalid value: "supported-models": {C_IDENTIFIER_MSG}'],
    ),
    (
        "attribute-name-empty-parts",
        resource_slice([device(attributes={"/": {"int": 1}})]),
        [
            f'{DEV}.attributes: Invalid value: "": the domain must not be empty',
            f'{DEV}.attributes: Invalid value: "": the name must not be empty',
        ],
    ),
    (
        "attribute-name-too-long",
        resource_slice([device(attributes={"x" * 64 + "/" + "y" * 33: {"int": 1}})]),
        [
            f"{DEV}.attributes: Too long: may not be more than 63 bytes",
            f"{DEV}.attributes: Too long: may not be more than 32 bytes",
        ],
    ),
    (
        "capacity-name-bad",
        resource_slice([device(capacity={"capacity-0": {"value": "1"}})]),
        [f'{DEV}.capacity: Invalid value: "capacity-0": {C_IDENTIFIER_MSG}'],
    ),
    (
        "capacity-bad-quantity",
        resource_slice([device(capacity={"memory": {"value": "1.5.5Gi"}})]),
        [f'{DEV}.capacity[memory].value: Invalid value: "1.5.5Gi": {QUANTITY_MSG}'],
    ),
    (
        "capacity-bad-suffix",
        resource_slice([device(capacity={"memory": {"value": "4MG"}})]),
        [f'{DEV}.capacity[memory].value: Invalid value: "4MG": unable to parse quantity\'s suffix'],
    ),
    (
        "request-policy-needs-multiple-allocations",
        resource_slice(
            [device(capacity={"memory": {"value": "8", "requestPolicy": {"default": "1"}}})]
        ),
        [f"{DEV}.capacity[memory].requestPolicy: Forbidden: allowMultipleAllocations must be true"],
    ),
    (
        "request-policy-valid-values",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "10",
                        "requestPolicy": {"default": "5", "validValues": ["1", "5", "10"]},
                    }
                )
            ]
        ),
        [],
    ),
    (
        "request-policy-both",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "10",
                        "requestPolicy": {
                            "default": "5",
                            "validValues": ["5"],
                            "validRange": {"min": "1"},
                        },
                    }
                )
            ]
        ),
        [
            f"{DEV}.capacity[memory].requestPolicy: Forbidden: exactly one policy can be specified, cannot specify "
            '"validValues" and "validRange" at the same time'
        ],
    ),
    (
        "request-policy-valid-values-without-default",
        resource_slice([_shared_device({"value": "10", "requestPolicy": {"validValues": ["5"]}})]),
        [
            f"{DEV}.capacity[memory].requestPolicy.default: Required value: required when validValues is defined"
        ],
    ),
    (
        "request-policy-valid-values-problems",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "10",
                        "requestPolicy": {"default": "3", "validValues": ["5", "1", "20", "5"]},
                    }
                )
            ]
        ),
        [
            f'{DEV}.capacity[memory].requestPolicy.validValues[1]: Invalid value: "1": values must be sorted in ascending order',
            f'{DEV}.capacity[memory].requestPolicy.validValues[3]: Invalid value: "5": values must be sorted in ascending order',
            f'{DEV}.capacity[memory].requestPolicy.validValues[2]: Invalid value: "20": option is larger than capacity value: 10',
            f'{DEV}.capacity[memory].requestPolicy.validValues[3]: Duplicate value: "5"',
            f'{DEV}.capacity[memory].requestPolicy.validValues: Invalid value: "3": default value is not valid according to the requestPolicy',
        ],
    ),
    (
        "request-policy-valid-values-too-many",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "100",
                        "requestPolicy": {
                            "default": "1",
                            "validValues": [str(i) for i in range(1, 12)],
                        },
                    }
                )
            ]
        ),
        [
            f"{DEV}.capacity[memory].requestPolicy.validValues: Too many: 11: must have at most 10 items",
            f'{DEV}.capacity[memory].requestPolicy.validValues: Invalid value: "1": default value is not valid according to the requestPolicy',
        ],
    ),
    (
        "request-policy-valid-range",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "80Gi",
                        "requestPolicy": {
                            "default": "1Gi",
                            "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"},
                        },
                    }
                )
            ]
        ),
        [],
    ),
    (
        "request-policy-range-without-min",
        resource_slice(
            [
                _shared_device(
                    {"value": "8", "requestPolicy": {"default": "1", "validRange": {"max": "4"}}}
                )
            ]
        ),
        [
            f"{DEV}.capacity[memory].requestPolicy.validRange.min: Required value: required when validRange is defined"
        ],
    ),
    (
        "request-policy-range-problems",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "2",
                        "requestPolicy": {
                            "default": "2",
                            "validRange": {"min": "1", "max": "4", "step": "2"},
                        },
                    }
                )
            ]
        ),
        [
            f'{DEV}.capacity[memory].requestPolicy.validRange.max: Invalid value: "4": max is larger than capacity value: 2',
            f'{DEV}.capacity[memory].requestPolicy.validRange.step: Invalid value: "2": one step 3 is larger than capacity value: 2',
            f'{DEV}.capacity[memory].requestPolicy.validRange.step: Invalid value: "2": value is not a multiple of a given step (2) from (1)',
            f'{DEV}.capacity[memory].requestPolicy.validRange.step: Invalid value: "4": value is not a multiple of a given step (2) from (1)',
        ],
    ),
    (
        "request-policy-range-order",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "10",
                        "requestPolicy": {"default": "1", "validRange": {"min": "6", "max": "5"}},
                    }
                )
            ]
        ),
        [
            f'{DEV}.capacity[memory].requestPolicy.validRange.default: Invalid value: "1": default is less than min: 6',
            f'{DEV}.capacity[memory].requestPolicy.validRange.max: Invalid value: "6": min is larger than max: 5',
        ],
    ),
    (
        "request-policy-range-zero-step",
        resource_slice(
            [
                _shared_device(
                    {
                        "value": "10",
                        "requestPolicy": {"default": "1", "validRange": {"min": "1", "step": "0"}},
                    }
                )
            ]
        ),
        [
            f'{DEV}.capacity[memory].requestPolicy.validRange.step: Invalid value: "0": must be greater than zero'
        ],
    ),
    (
        "taints-max",
        resource_slice(
            [
                device(
                    taints=[{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(16)]
                )
            ]
        ),
        [],
    ),
    (
        "taints-too-many",
        resource_slice(
            [
                device(
                    taints=[{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(17)]
                )
            ]
        ),
        [f"{DEV}.taints: Too many: 17: must have at most 16 items"],
    ),
    (
        "taint-problems",
        resource_slice(
            [
                device(
                    taints=[{"key": "", "value": "a b"}, {"key": "k", "effect": "PreferNoSchedule"}]
                )
            ]
        ),
        [
            f'{DEV}.taints[0].key: Invalid value: "": name part must be non-empty',
            f'{DEV}.taints[0].key: Invalid value: "": {NAME_PART_MSG}',
            f'{DEV}.taints[0].value: Invalid value: "a b": {LABEL_VALUE_MSG}',
            f"{DEV}.taints[0].effect: Required value",
            f'{DEV}.taints[1].effect: Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", "None"',
        ],
    ),
    (
        "consumes-counters-too-many",
        resource_slice(
            [
                device(
                    consumesCounters=[
                        {"counterSet": f"s{i}", "counters": _counters(1)} for i in range(3)
                    ]
                )
            ]
        ),
        [f"{DEV}.consumesCounters: Too many: 3: must have at most 2 items"],
    ),
    (
        "consumes-counters-problems",
        resource_slice(
            [
                device(
                    consumesCounters=[
                        {"counterSet": "s", "counters": _counters(33)},
                        {"counterSet": "s", "counters": {}},
                    ]
                )
            ]
        ),
        [
            f"{DEV}.consumesCounters[0].counters: Too many: 33: must have at most 32 items",
            f"{DEV}.consumesCounters[1].counters: Required value",
            f'{DEV}.consumesCounters[1]: Duplicate value: "s"',
        ],
    ),
    (
        "consumes-counters-names",
        resource_slice(
            [device(consumesCounters=[{"counterSet": "", "counters": {"Mem": {"value": "1"}}}])]
        ),
        [
            f"{DEV}.consumesCounters[0].counterSet: Required value",
            f'{DEV}.consumesCounters[0].counters: Invalid value: "Mem": {LABEL_MSG}',
        ],
    ),
    (
        # A bad quantity is the API server's decoder's error, before any rule runs.
        "consumes-counters-bad-quantity",
        resource_slice(
            [device(consumesCounters=[{"counterSet": "", "counters": {"Mem": {"value": "7\n"}}}])]
        ),
        [f'{DEV}.consumesCounters[0].counters[Mem].value: Invalid value: "7\\n": {QUANTITY_MSG}'],
    ),
    (
        "shared-counters",
        resource_slice(
            None, devices=DELETE, sharedCounters=[{"name": "gpu-0", "counters": _counters(32)}]
        ),
        [],
    ),
    (
        "shared-counters-and-devices",
        resource_slice(None, sharedCounters=[{"name": "gpu-0", "counters": _counters(1)}]),
        ['spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed'],
    ),
    (
        "shared-counter-sets-too-many",
        resource_slice(
            None,
            devices=DELETE,
            sharedCounters=[{"name": f"s{i}", "counters": _counters(1)} for i in range(9)],
        ),
        ["spec.sharedCounters: Too many: 9: must have at most 8 items"],
    ),
    (
        "shared-counters-problems",
        resource_slice(
            None,
            devices=DELETE,
            sharedCounters=[
                {"name": "s", "counters": _counters(33)},
                {"name": "s", "counters": {}},
                {"name": "S_1", "counters": _counters(1)},
            ],
        ),
        [
            "spec.sharedCounters[0].counters: Too many: 33: must have at most 32 items",
            "spec.sharedCounters[1].counters: Required value",
            f'spec.sharedCounters[2].name: Invalid value: "S_1": {LABEL_MSG}',
            'spec.sharedCounters[1]: Duplicate value: "s"',
        ],
    ),
    (
        "per-device-node-selection",
        resource_slice(
            [
                device("a", nodeName="node-1"),
                device("b", allNodes=True),
                device("c", nodeSelector=SELECTOR),
            ],
            nodeName=DELETE,
            perDeviceNodeSelection=True,
        ),
        [],
    ),
    (
        "per-device-node-selection-missing",
        resource_slice(
            [device("a"), device("b", nodeName="n", allNodes=True)],
            nodeName=DELETE,
            perDeviceNodeSelection=True,
        ),
        [
            "spec.devices[0]: Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required "
            "when `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
            'spec.devices[1]: Invalid value: "{`nodeName`, `allNodes`}": exactly one of `nodeName`, `nodeSelector`, '
            "or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
        ],
    ),
    (
        "device-node-fields-without-per-device-selection",
        resource_slice([device(nodeName="node-1")]),
        [
            f"{DEV}: Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can only be set if "
            "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
        ],
    ),
    (
        "binding-conditions",
        resource_slice(
            [
                device(
                    bindingConditions=["example.com/ready"],
                    bindingFailureConditions=["example.com/failed"],
                )
            ]
        ),
        [],
    ),
    (
        "binding-conditions-too-many",
        resource_slice(
            [device(bindingConditions=[f"c{i}" for i in range(5)], bindingFailureConditions=["f"])]
        ),
        [f"{DEV}.bindingConditions: Too many: 5: must have at most 4 items"],
    ),
    (
        "binding-conditions-problems",
        resource_slice([device(bindingConditions=["a", "a"], bindingFailureConditions=["a"])]),
        [
            f'{DEV}.bindingConditions[1]: Duplicate value: "a"',
            f'{DEV}.bindingFailureConditions[0]: Invalid value: "a": bindingFailureConditions must not overlap with bindingConditions',
        ],
    ),
    (
        "binding-conditions-without-failure-conditions",
        resource_slice([device(bindingConditions=["a"])]),
        [
            f"{DEV}.bindingFailureConditions: Invalid value: []: bindingFailureConditions are required to use bindingConditions"
        ],
    ),
    (
        "binding-failure-conditions-alone",
        resource_slice([device(bindingFailureConditions=["a"])]),
        [
            f"{DEV}.bindingConditions: Invalid value: []: bindingConditions are required to use bindingFailureConditions"
        ],
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in SLICE_CASES], ids=[c[0] for c in SLICE_CASES]
)
def test_slice_rules(doc: Doc, expected: list[str]) -> None:
    assert _errors(doc) == expected


# --- DeviceClass and DeviceTaintRule -------------------------------------------------------------

CLASS_CASES: list[tuple[str, Doc, list[str]]] = [
    ("valid", device_class(), []),
    (
        "name-bad",
        edit(device_class(), ("metadata.name", "GPU")),
        [f'metadata.name: Invalid value: "GPU": {SUBDOMAIN_MSG}'],
    ),
    (
        "selectors-too-many",
        edit(device_class(), ("spec.selectors", _selectors(33))),
        ["spec.selectors: Too many: 33: must have at most 32 items"],
    ),
    ("config", edit(device_class(), ("spec.config", [_opaque()] * 32)), []),
    (
        "config-too-many",
        edit(device_class(), ("spec.config", [_opaque()] * 33)),
        ["spec.config: Too many: 33: must have at most 32 items"],
    ),
    (
        "config-without-opaque",
        edit(device_class(), ("spec.config", [{}])),
        ["spec.config[0].opaque: Required value"],
    ),
    (
        "extended-resource-name",
        edit(device_class(), ("spec.extendedResourceName", "example.com/gpu")),
        [],
    ),
    (
        "extended-resource-name-native",
        edit(device_class(), ("spec.extendedResourceName", "gpu")),
        ['spec.extendedResourceName: Invalid value: "gpu": must be a valid extended resource name'],
    ),
    (
        "namespace-ignored-on-cluster-scope",
        edit(device_class(), ("metadata.namespace", "default")),
        [],
    ),
]

TAINT_RULE_CASES: list[tuple[str, Doc, list[str]]] = [
    ("valid", taint_rule(), []),
    ("no-selector", edit(taint_rule(), ("spec.deviceSelector", DELETE)), []),
    (
        "effect-missing",
        edit(taint_rule(), ("spec.taint.effect", DELETE)),
        ["spec.taint.effect: Required value"],
    ),
    (
        "effect-unknown",
        edit(taint_rule(), ("spec.taint.effect", "Evict")),
        [
            'spec.taint.effect: Unsupported value: "Evict": supported values: "NoExecute", "NoSchedule", "None"'
        ],
    ),
    (
        "selector-names",
        edit(
            taint_rule(),
            (
                "spec.deviceSelector",
                {"driver": "", "pool": "a//b", "device": "Gpu", "deviceClassName": "x_y"},
            ),
        ),
        [
            f'spec.deviceSelector.deviceClassName: Invalid value: "x_y": {SUBDOMAIN_MSG}',
            "spec.deviceSelector.driver: Required value",
            f'spec.deviceSelector.pool: Invalid value: "": {SUBDOMAIN_MSG}',
            f'spec.deviceSelector.device: Invalid value: "Gpu": {LABEL_MSG}',
        ],
    ),
]


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in CLASS_CASES], ids=[c[0] for c in CLASS_CASES]
)
def test_device_class_rules(doc: Doc, expected: list[str]) -> None:
    assert _errors(doc) == expected


@pytest.mark.parametrize(
    ("doc", "expected"), [c[1:] for c in TAINT_RULE_CASES], ids=[c[0] for c in TAINT_RULE_CASES]
)
def test_taint_rule_rules(doc: Doc, expected: list[str]) -> None:
    assert _errors(doc) == expected


# --- CEL selectors -------------------------------------------------------------------------------


def _fake_cel(expression: str) -> str | None:
    if expression == "expensive":
        return CEL_COST_EXCEEDED
    if "undeclared" in expression:
        return "compilation failed: ERROR: <input>:1:1: undeclared reference to 'undeclared'"
    return None


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("device.driver == 'x'", []),
        (
            "undeclared",
            [
                f'{EXACTLY}.selectors[0].cel.expression: Invalid value: "undeclared": compilation failed: '
                "ERROR: <input>:1:1: undeclared reference to 'undeclared'"
            ],
        ),
        (
            "expensive",
            [f"{EXACTLY}.selectors[0].cel.expression: Forbidden: too complex, exceeds cost limit"],
        ),
    ],
)
def test_selectors_are_compiled_by_the_given_check(expression: str, expected: list[str]) -> None:
    doc = edit(CLAIM.obj(), (f"{EXACTLY}.selectors", [{"cel": {"expression": expression}}]))
    assert _errors(doc, check=_fake_cel) == expected


def test_validate_objects_compiles_each_expression_once_and_reports_every_object() -> None:
    calls: list[str] = []

    def check(expression: str) -> str | None:
        calls.append(expression)
        return _fake_cel(expression)

    bad = edit(device_class(), ("spec.selectors", [{"cel": {"expression": "undeclared"}}] * 2))
    objs = [
        decode_object(bad),
        decode_object(edit(CLAIM.obj(), (f"{EXACTLY}.count", 0))),
        decode_object(resource_slice()),
    ]
    with pytest.raises(InvalidInputs) as info:
        validate_objects(objs, selector_check=check)
    assert calls == ["undeclared"]
    lines = str(info.value).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "DeviceClass gpu.example.com",
        "DeviceClass gpu.example.com",
        "ResourceClaim default/c1",
    ]
    validate_objects(
        [decode_object(CLAIM.obj()), decode_object(resource_slice())], selector_check=check
    )


def test_default_selector_check_is_used_when_model_cel_exists() -> None:
    # Without an explicit check the validator compiles with model.cel when it is installed;
    # either way a valid selector passes.
    assert validate_object(decode_object(device_class())) == []


# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("1", 1),
        ("-1", -1),
        ("+2", 2),
        ("1.5", 1.5),
        ("100m", 0.1),
        ("1k", 1000),
        ("1Ki", 1024),
        ("40Gi", 40 * 2**30),
        ("1e3", 1000),
        ("1E-3", 0.001),
        ("5n", 5e-9),
        (" 3 ", 3),
        ("1.", 1),
        (".5", 0.5),
    ],
)
def test_quantities_parse_like_apimachinery(text: str, value: float) -> None:
    assert float(parse_quantity_value(text)) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", QUANTITY_MSG),
        ("abc", QUANTITY_MSG),
        ("1.2.3", QUANTITY_MSG),
        ("1 Gi", QUANTITY_MSG),
        ("1GB", QUANTITY_MSG),
        ("4MG", "unable to parse quantity's suffix"),
        ("1e", "unable to parse quantity's suffix"),
        ("1Kii", "unable to parse quantity's suffix"),
    ],
)
def test_bad_quantities(text: str, message: str) -> None:
    with pytest.raises(
        ValueError,
        match=message.replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace("]", r"\]")
        .replace("*", r"\*")
        .replace("+", r"\+")
        .replace("?", r"\?")
        .replace("$", r"\$")
        .replace("^", r"\^")
        .replace(".", r"\."),
    ):
        parse_quantity_value(text)


# --- programmatic objects ------------------------------------------------------------------------


def test_objects_built_in_code_are_read_with_api_defaults() -> None:
    # Without decoding (no defaults applied) an ExactCount request without count asks for one.
    built = o.ResourceClaim(
        metadata=o.ObjectMeta(name="c"),
        spec=o.ResourceClaimSpec(
            devices=o.DeviceClaim(
                requests=[
                    o.DeviceRequest(name="r", exactly=o.ExactDeviceRequest(device_class_name="c"))
                ]
            )
        ),
    )
    assert validate_claim(built) == []


# --- real objects ---------------------------------------------------------------------------------

# Published objects kube-apiserver rejects (see realworld/README.md "Published items that are
# broken or stale", plus three found by this validation), with the first problem reported.
KNOWN_BROKEN = {
    ("k8s-website-docs.yaml", "my-node-cpus"): (
        'spec.devices[0].capacity[cpu.example.com/cpu]: Invalid value: "128": must be an object (DeviceCapacity), not a string'
    ),
    (
        "k8s-website-docs.yaml",
        "example-resource-claim",
    ): "spec.devices.requests[0].exactly.selectors[0].cel: Required value",
    (
        "amd-gpu-dra-driver.yaml",
        "k8s-gpu-dra-driver-cluster-worker-gpu.amd.com-xxxxx",
    ): "spec.driver: Required value",
    (
        "dranet.yaml",
        "gke-aojea-dra-multi-nic-985b8c20-jg5l-dra.net-8nq9c",
    ): "spec.driver: Required value",
    # Not in the README: docs list-attribute example uses a hyphen in an attribute name.
    ("k8s-website-docs.yaml", "example-resourceslice"): (
        f'spec.devices[0].attributes: Invalid value: "supported-models": {C_IDENTIFIER_MSG}'
    ),
    # Not in the README: upstream's cost estimator gives `==` between quantities reached through
    # device.capacity no size bound, so the estimate exceeds the selector cost limit.
    ("k8s-website-docs.yaml", "example-resource-claim-template"): (
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: Forbidden: too complex, exceeds cost limit"
    ),
    # Not in the README: Intel USAGE.md examples with `cel: null` / deviceClassName outside `exactly`.
    ("intel-resource-drivers.yaml", "claim1", "ResourceClaimTemplate"): (
        "spec.spec.devices.requests[0].exactly.selectors[0].cel: Required value"
    ),
    (
        "intel-resource-drivers.yaml",
        "claim1",
        "ResourceClaim",
    ): "spec.devices.requests[0].exactly.deviceClassName: Required value",
}


def _realworld_problems() -> dict[tuple[str, ...], list[str]]:
    problems: dict[tuple[str, ...], list[str]] = {}
    check = default_selector_check()  # real CEL compilation once model.cel exists
    for path in sorted((DATA_DIR / "realworld").glob("*.yaml")):
        for doc in parse_documents(path.read_text(), source=path.name):
            name = doc["metadata"]["name"]
            key: tuple[str, ...] = (path.name, name)
            try:
                obj = decode_object(doc, validate="ignore")
                errs = [
                    f"{e.field}: {e.detail}" for e in validate_object(obj, selector_check=check)
                ]
            except InvalidInput as err:
                errs = [f"{err.field}: {err.detail}"]
            if not errs:
                continue
            if (path.name, name, doc["kind"]) in KNOWN_BROKEN:
                key = (path.name, name, doc["kind"])
            problems.setdefault(key, []).extend(errs)
    return problems


def test_realworld_objects_pass_except_the_known_broken_ones() -> None:
    problems = _realworld_problems()
    assert set(problems) == set(KNOWN_BROKEN)
    for key, first in KNOWN_BROKEN.items():
        assert problems[key][0].startswith(first.split(" (and")[0]), (key, problems[key])


# Ways in which upstream's allocator test data (never sent through an API server) is not valid
# API input. The allocator must still reproduce upstream on these cases; only API validation
# flags them.
CONFORMANCE_LOOSENESS = (
    'Invalid value: "subReq-',  # camelCase subrequest names are not DNS labels
    'Invalid value: "capacity-',  # capacity names with '-' are not C identifiers
    "must not be specified when allocationMode is 'All'",
    "is larger than capacity value",
    "requestPolicy: Forbidden: allowMultipleAllocations must be true",
    "counters: Required value",
    "bindingFailureConditions are required to use bindingConditions",
    'Duplicate value: "req-0"',
    'Duplicate value: "subReq-',
)
# Cases that exercise invalid input on purpose: validation must flag each of them.
CONFORMANCE_INVALID_INPUT = {
    "empty-class": "deviceClassName: Required value",
    "unknown-allocation-mode": 'Unsupported value: "future-mode"',
    "unknown-selector": "selectors[0].cel: Required value",
    "unknown-constraint": 'exactly one of "matchAttribute" or "distinctAttribute" is required',
    "list-attributes-match-constaint-with-empty-or-unknown-type": "exactly one value must be specified",
    "list-attributes-distinct-constaint-with-empty-or-unknown-type": "must not be empty if specified",
    "with-distinct-constraints-unknown-type-attribute": "exactly one value must be specified",
}


def _conformance_cases() -> list[Path]:
    return sorted((DATA_DIR / "conformance" / "cases").glob("*.json"))


def test_conformance_objects_decode_and_only_fail_validation_where_upstream_data_is_loose() -> None:
    cases = _conformance_cases()
    assert len(cases) == 223
    flagged: dict[str, list[str]] = {}
    for path in cases:
        case = json.loads(path.read_text())
        docs = [*case["classes"], *case["slices"], *case["claims"]]
        for doc in docs:
            obj = decode_object(doc, source=path.name, validate="ignore")
            for err in validate_object(obj, selector_check=None):
                flagged.setdefault(case["name"], []).append(str(err))
    for name, expected in CONFORMANCE_INVALID_INPUT.items():
        assert any(expected in line for line in flagged.get(name, [])), name
    for name, lines in flagged.items():
        for line in lines:
            if name in CONFORMANCE_INVALID_INPUT and CONFORMANCE_INVALID_INPUT[name] in line:
                continue
            assert any(p in line for p in CONFORMANCE_LOOSENESS) or (
                name in CONFORMANCE_INVALID_INPUT or "list-attributes" in name
            ), (name, line)


def test_nodes_are_checked_for_what_selectors_read() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a b"}},
    }
    assert _errors(node) == [f'metadata.labels: Invalid value: "a b": {LABEL_VALUE_MSG}']
    assert validate_object(o.TypedObject(kind="Other"), selector_check=None) == []


@pytest.mark.parametrize(
    "name", ["invalid-CEL-one-device", "invalid-CEL-all-devices", "invalid-CEL-one-device-class"]
)
def test_conformance_cases_with_uncompilable_selectors_are_rejected(name: str) -> None:
    check = default_selector_check()
    if check is None:
        pytest.skip("model.cel is not available yet")
    case = json.loads((DATA_DIR / "conformance" / "cases" / f"{name}.json").read_text())
    errors = [
        str(err)
        for doc in [*case["classes"], *case["claims"]]
        for err in validate_object(decode_object(doc), selector_check=check)
    ]
    assert any(
        'cel.expression: Invalid value: "noSuchVar": compilation failed' in e for e in errors
    ), errors


def test_default_check_uses_model_cel_with_every_feature_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dra_solver.model import validation
    from dra_solver.model.cel import CelCompileError, CelFeatures

    class Compiled:
        def __init__(self, cost: int) -> None:
            self.max_cost = cost

    class CelEnvironment:
        def __init__(self, *, features: CelFeatures) -> None:
            assert features == CelFeatures(consumable_capacity=True, list_type_attributes=True)

        def compile(self, expression: str) -> Compiled:
            if expression == "bad":
                raise CelCompileError("ERROR: <input>:1:1: undeclared reference to 'bad'")
            return Compiled(2_000_000 if expression == "slow" else 10)

    monkeypatch.setattr(validation, "CelEnvironment", CelEnvironment)
    doc = edit(
        device_class(),
        ("spec.selectors", [{"cel": {"expression": e}} for e in ("ok", "bad", "slow")]),
    )
    assert _errors(doc, check=default_selector_check()) == [
        'spec.selectors[1].cel.expression: Invalid value: "bad": compilation failed: '
        "ERROR: <input>:1:1: undeclared reference to 'bad'",
        "spec.selectors[2].cel.expression: Forbidden: too complex, exceeds cost limit",
    ]


def test_a_device_list_shared_by_slices_is_checked_once_and_reported_at_each_slice() -> None:
    # Inventories share identical nodes' device objects; a pass's memo checks such a list once
    # (per node-selection mode: the same devices are valid under nodeName and not under
    # perDeviceNodeSelection) and reports its problems under each slice's own path.
    def slice_(name: str, **where: Any) -> o.ResourceSlice:
        obj = decode_object({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
                             "spec": {"driver": "d.example.com", "pool": {"name": name, "resourceSliceCount": 1}, **where,
                                      "devices": [{"name": "gpu-0"}, {"name": "Bad_Name"}, {"name": "gpu-0"}]}})
        assert isinstance(obj, o.ResourceSlice)
        return obj

    first, second, third = slice_("a", nodeName="n1"), slice_("b", nodeName="n2"), slice_("c", perDeviceNodeSelection=True)
    second.spec.devices = list(first.spec.devices or [])
    third.spec.devices = list(first.spec.devices or [])
    memo = ValidationMemo()
    with_memo = [[(e.field, e.detail) for e in validate_object(s, memo=memo)] for s in (first, second, third)]
    alone = [[(e.field, e.detail) for e in validate_object(s)] for s in (first, second, third)]
    assert with_memo == alone
    assert [f for f, _ in with_memo[1]] == ["spec.devices[1].name", "spec.devices[2]"]
    assert len(with_memo[2]) > len(with_memo[1]), "perDeviceNodeSelection devices must say where they are"


def test_valid_object_names_are_not_remembered_and_invalid_ones_still_report() -> None:
    """Object names are mostly distinct (a claim per pod): remembering each one evicted an
    entry of the shared memo per call and made its table rebuild now and then, a pause
    in a Schedule."""
    from dra_solver.model import validation

    def claim(name: str) -> o.ResourceClaim:
        return o.ResourceClaim.model_validate({"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {}}})

    before = validation._subdomain_problems.cache_info().currsize
    for i in range(50):
        assert validate_claim(claim(f"pod-{i:06d}-gpu-never-seen-before"), selector_check=None) == []
    assert validation._subdomain_problems.cache_info().currsize == before
    errors = validate_claim(claim("Not_A_Name"), selector_check=None)
    assert [str(e) for e in errors] == [
        "ResourceClaim default/Not_A_Name: metadata.name: Invalid value: \"Not_A_Name\": a lowercase RFC 1123 subdomain must consist of "
        "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ]
    long = validate_claim(claim("a" * 254), selector_check=None)
    assert [str(e).split(": ", 2)[1] for e in long] == ["metadata.name"] and "must be no more than 253 characters" in str(long[0])
