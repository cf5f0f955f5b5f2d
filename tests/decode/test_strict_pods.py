"""Pods and PodGroups (read as documents, not typed models) get the same strict decoding as
resource.k8s.io objects: unknown and duplicate fields by their full path (strict: an error,
warn: a warning, ignore: nothing), every field's type, apiVersion and kind, and a PodGroup's
API validation; Nodes are checked against the whole core/v1 schema (their model keeps spec
and status opaque). Every problem names the file and the object."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_solver.cli import main
from dra_solver.model import coreschema, podgroup_problems
from dra_solver.model.decode import decode_document, decode_object, parse_documents
from dra_solver.model.errors import FieldPath, InvalidInput, InvalidInputs, StrictDecodingError
from dra_solver.model.validation import validate_document
from dra_solver.service import files

ROOT = Path(__file__).resolve().parents[2]
GANGS = ROOT / "examples" / "gangs"
CLUSTER, PODGROUP = str(GANGS / "cluster.yaml"), str(GANGS / "podgroup.yaml")
PODS = [str(GANGS / "a-small.yaml"), str(GANGS / "b-big.yaml")]

FULL_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: full
  namespace: default
  generateName: full-
  uid: 0b5b1f7e-6d1e-4b8e-9b55-3f4d1f0e0c11
  resourceVersion: "12345"
  generation: 1
  creationTimestamp: 2026-01-02T03:04:05Z
  labels: {app: trainer, tier: gpu}
  annotations: {example.com/note: "free text"}
  finalizers: [example.com/keep]
  ownerReferences:
  - {apiVersion: batch/v1, kind: Job, name: train, uid: 1c2d, controller: true, blockOwnerDeletion: true}
  managedFields:
  - manager: kubectl
    operation: Apply
    apiVersion: v1
    time: 2026-01-02T03:04:05Z
    fieldsType: FieldsV1
    fieldsV1: {f:spec: {f:containers: {}}}
spec:
  schedulerName: dra-solver
  schedulingGroup: {podGroupName: train}
  priorityClassName: high
  priority: 1000
  preemptionPolicy: PreemptLowerPriority
  serviceAccountName: trainer
  automountServiceAccountToken: false
  restartPolicy: Never
  terminationGracePeriodSeconds: 30
  activeDeadlineSeconds: 3600
  dnsPolicy: ClusterFirst
  hostNetwork: false
  enableServiceLinks: false
  nodeSelector: {kubernetes.io/os: linux}
  overhead: {cpu: 250m, memory: 120Mi}
  runtimeClassName: nvidia
  os: {name: linux}
  hostAliases: [{ip: 10.0.0.1, hostnames: [store]}]
  imagePullSecrets: [{name: registry}]
  readinessGates: [{conditionType: example.com/ready}]
  schedulingGates: [{name: example.com/wait}]
  dnsConfig:
    nameservers: [10.0.0.10]
    options: [{name: ndots, value: "2"}]
  securityContext:
    runAsUser: 1000
    runAsGroup: 1000
    runAsNonRoot: true
    fsGroup: 2000
    supplementalGroups: [3000]
    seccompProfile: {type: RuntimeDefault}
    sysctls: [{name: net.core.somaxconn, value: "1024"}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: topology.example.com/rack, operator: In, values: [r1, r2]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        preference:
          matchExpressions: [{key: example.com/fast, operator: Exists}]
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector: {matchLabels: {app: trainer}}
  tolerations:
  - {key: example.com/gpu, operator: Exists, effect: NoSchedule}
  - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}
  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.example.com/rack
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app: trainer}}
  resourceClaims:
  - {name: gpu, resourceClaimTemplateName: gpu-4}
  - {name: fabric, resourceClaimName: rack-fabric}
  initContainers:
  - name: fetch
    image: registry.example.com/fetch:1
    command: [/fetch]
    resources: {requests: {cpu: 1, memory: 1Gi}}
  containers:
  - name: worker
    image: registry.example.com/trainer:1
    imagePullPolicy: IfNotPresent
    command: [python, train.py]
    args: [--epochs, "10"]
    workingDir: /work
    ports: [{name: metrics, containerPort: 9090, protocol: TCP}]
    env:
    - {name: MODE, value: train}
    - name: POD
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: LIMIT
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    envFrom: [{configMapRef: {name: settings}}]
    resources:
      requests: {cpu: "4", memory: 8Gi}
      limits: {cpu: 4, memory: 8Gi}
      claims: [{name: gpu}, {name: fabric, request: link}]
    volumeMounts: [{name: data, mountPath: /data, readOnly: true}, {name: scratch, mountPath: /scratch}]
    livenessProbe:
      httpGet: {path: /healthz, port: 9090}
      initialDelaySeconds: 5
      periodSeconds: 10
    readinessProbe:
      tcpSocket: {port: metrics}
    lifecycle:
      preStop: {exec: {command: [/bin/stop]}}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: data}
  - name: scratch
    emptyDir: {sizeLimit: 10Gi}
  - name: settings
    configMap:
      name: settings
      items: [{key: a, path: a.conf}]
  - name: token
    projected:
      sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3600}
status:
  phase: Pending
  conditions:
  - {type: PodScheduled, status: "False", reason: Unschedulable, lastTransitionTime: 2026-01-02T03:04:05Z}
  qosClass: Guaranteed
"""

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: n-a
  labels: {kubernetes.io/hostname: n-a}
spec:
  podCIDR: 10.244.0.0/24
  providerID: example://n-a
  taints: [{key: example.com/gpu, value: "true", effect: NoSchedule}]
status:
  capacity: {cpu: "16", memory: 256Gi, pods: "110"}
  allocatable: {cpu: 16, memory: 256Gi, pods: 110}
  addresses: [{type: InternalIP, address: 10.0.0.5}]
  conditions: [{type: Ready, status: "True", lastHeartbeatTime: 2026-01-02T03:04:05Z}]
  nodeInfo: {kubeletVersion: v1.37.0, architecture: amd64, operatingSystem: linux}
  images: [{names: [registry.example.com/trainer:1], sizeBytes: 123456}]
"""

MAP_FIELDS = {"labels", "annotations", "nodeSelector", "requests", "limits", "overhead", "capacity", "allocatable", "matchLabels", "fieldsV1"}
"""Fields whose values are maps (or free-form): a new key there is data, not a field."""


def _load(text: str) -> dict[str, Any]:
    return parse_documents(text)[0]


def _gang_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in (PODGROUP, *PODS):
        docs.extend(d for d in parse_documents(Path(path).read_text()) if d["kind"] in ("Pod", "PodGroup"))
    return docs


def _object_paths(value: Any, path: FieldPath = ()) -> Iterator[FieldPath]:
    """The path of every object (mapping) in ``value`` that is a struct, not a map."""
    if isinstance(value, dict):
        if path and path[-1] in MAP_FIELDS:
            return
        yield path
        for key, item in value.items():
            yield from _object_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _object_paths(item, (*path, index))


def _with_field(doc: dict[str, Any], path: FieldPath, key: str, value: Any = 1) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target: Any = out
    for part in path:
        target = target[part]
    target[key] = value
    return out


def _decode(doc: dict[str, Any], **kw: Any) -> Any:
    if doc["kind"] == "Node":
        return decode_object(doc, source="in.yaml", **kw)
    return decode_document(doc, source="in.yaml", **kw)


# --- every field of realistic objects is accepted ----------------------------------------------


@pytest.mark.parametrize("doc", [*_gang_docs(), _load(FULL_POD), _load(NODE)], ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_every_field_of_a_realistic_object_is_accepted(doc: dict[str, Any]) -> None:
    warnings: list[StrictDecodingError] = []
    _decode(doc, validate="warn", warnings=warnings)
    assert warnings == []
    _decode(doc)  # strict
    if doc["kind"] != "Node":
        assert validate_document(doc, source="in.yaml") == []


def test_a_new_key_in_a_map_field_is_data_not_an_unknown_field() -> None:
    pod = _with_field(_load(FULL_POD), ("metadata", "labels"), "anything", "x")
    pod = _with_field(pod, ("spec", "nodeSelector"), "example.com/any", "x")
    pod = _with_field(pod, ("spec", "containers", 0, "resources", "requests"), "example.com/thing", 2)
    decode_document(pod)  # strict: raises on an unknown field
    warnings: list[StrictDecodingError] = []
    decode_document(pod, validate="warn", warnings=warnings)
    assert warnings == []
    assert pod["metadata"]["labels"]["anything"] == "x"  # the edit is there: the map was read, not skipped


# --- an unknown field anywhere is rejected with its path ------------------------------------


def _unknown_cases() -> Iterator[Any]:
    for doc in (_load(FULL_POD), *_gang_docs(), _load(NODE)):
        for path in _object_paths(doc):
            yield pytest.param(doc, path, id=f"{doc['kind']}-{doc['metadata']['name']}:{'.'.join(map(str, path)) or '<top>'}")


@pytest.mark.parametrize(("doc", "path"), list(_unknown_cases()))
def test_an_unknown_field_at_any_depth_is_rejected_with_its_path(doc: dict[str, Any], path: FieldPath) -> None:
    bad = _with_field(doc, path, "bogusField")
    with pytest.raises(StrictDecodingError) as info:
        _decode(bad)
    assert info.value.problems == (((*path, "bogusField"), "unknown field"),)
    assert info.value.source == "in.yaml"
    warnings: list[StrictDecodingError] = []
    _decode(bad, validate="warn", warnings=warnings)
    assert [w.problems for w in warnings] == [(((*path, "bogusField"), "unknown field"),)]
    _decode(bad, validate="ignore")


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ((), "bogusTop"),
        (("spec",), "spec.bogusTop"),
        (("spec", "containers", 0), "spec.containers[0].bogusTop"),
        (("spec", "volumes", 2, "configMap", "items", 0), "spec.volumes[2].configMap.items[0].bogusTop"),
        (("metadata", "ownerReferences", 0), "metadata.ownerReferences[0].bogusTop"),
    ],
)
def test_the_error_reads_like_the_api_servers(path: FieldPath, shown: str) -> None:
    with pytest.raises(StrictDecodingError) as info:
        decode_document(_with_field(_load(FULL_POD), path, "bogusTop"), source="pod.yaml")
    assert str(info.value) == f'pod.yaml: Pod default/full: strict decoding error: unknown field "{shown}"'


def test_a_duplicate_field_in_a_pod_is_reported() -> None:
    doc = parse_documents("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: d}\nspec: {schedulerName: a, schedulerName: b, containers: []}\n")[0]
    with pytest.raises(StrictDecodingError, match=r'duplicate field "spec.schedulerName"'):
        decode_document(doc)


# --- PodGroup ------------------------------------------------------------------------------


def _podgroup(text: str = "") -> dict[str, Any]:
    """The example PodGroup, or the one in ``text``."""
    return next(d for d in parse_documents(text or Path(PODGROUP).read_text()) if d["kind"] == "PodGroup")


PODGROUP_TYPOS: list[tuple[Callable[[str], str], str]] = [
    (lambda s: s.replace("schedulingConstraints:", "schedulingConstraint:"), "spec.schedulingConstraint"),
    (lambda s: s.replace("minCount", "minCont"), "spec.schedulingPolicy.gang.minCont"),
]
"""Misspelt PodGroup fields (the example file edited) and the field strict decoding names."""


@pytest.mark.parametrize(
    ("edit", "field"),
    [*PODGROUP_TYPOS, (lambda s: s.replace("gang:\n", "basic: {x: 1}\n    gang:\n"), "spec.schedulingPolicy.basic.x")],
    ids=["constraints-typo", "mincount-typo", "basic-is-an-empty-struct"],
)
def test_podgroup_typos_are_unknown_fields(edit: Callable[[str], str], field: str) -> None:
    doc = _podgroup(edit(Path(PODGROUP).read_text()))
    with pytest.raises(StrictDecodingError) as info:
        decode_document(doc, source="pg.yaml")
    assert str(info.value) == f'pg.yaml: PodGroup default/train: strict decoding error: unknown field "{field}"'


def test_the_podgroup_schema_is_upstreams_v1beta1() -> None:
    # staging/src/k8s.io/api/scheduling/v1beta1/types.go (Kubernetes v1.37).
    assert set(coreschema.TYPES["PodGroupSpec"]) == {
        "parentCompositePodGroupName", "workloadRef", "schedulingPolicy", "schedulingConstraints",
        "resourceClaims", "disruptionMode", "priorityClassName", "priority", "preemptionPolicy"}
    assert coreschema.TYPES["PodGroupSchedulingPolicy"] == {"basic": "Empty", "gang": "GangSchedulingPolicy"}
    assert coreschema.TYPES["GangSchedulingPolicy"] == {"minCount": "int32"}
    assert set(coreschema.TYPES["PodGroupStatus"]) == {"conditions", "resourceClaimStatuses"}
    assert "schedulingGroup" in coreschema.TYPES["PodSpec"] and "resourceClaims" in coreschema.TYPES["PodSpec"]


def test_a_missing_mincount_is_a_required_value_never_none() -> None:
    doc = _podgroup()
    del doc["spec"]["schedulingPolicy"]["gang"]["minCount"]
    errors = validate_document(decode_document(doc, source="pg.yaml"), source="pg.yaml")
    assert [str(e) for e in errors] == ["pg.yaml: PodGroup default/train: spec.schedulingPolicy.gang.minCount: Required value"]
    assert podgroup_problems(doc) == ["PodGroup default/train: spec.schedulingPolicy.gang.minCount: Required value"]
    doc["spec"]["schedulingPolicy"]["gang"]["minCount"] = -1
    assert podgroup_problems(doc) == ["PodGroup default/train: spec.schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than zero"]


def test_a_wrong_type_is_a_decoding_error_whatever_validate_says() -> None:
    doc = _podgroup()
    doc["spec"]["schedulingPolicy"]["gang"]["minCount"] = "2"
    with pytest.raises(InvalidInput, match=r'pg.yaml: PodGroup default/train: spec.schedulingPolicy.gang.minCount: Invalid value: "2": must be an integer, not a string'):
        decode_document(doc, source="pg.yaml", validate="ignore")
    doc["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2**31
    with pytest.raises(InvalidInput, match=r"minCount: Invalid value: 2147483648: must be at most 2147483647 \(int32\)"):
        decode_document(doc)
    pod = _load(FULL_POD)
    pod["spec"]["containers"] = 5
    with pytest.raises(InvalidInput, match=r"Pod default/full: spec.containers: Invalid value: 5: must be a list, not a number"):
        decode_document(pod, validate="ignore")
    # An empty Go struct (BasicSchedulingPolicy) is "an object": no type name the user never wrote.
    doc["spec"]["schedulingPolicy"] = {"basic": True}
    with pytest.raises(InvalidInput) as info:
        decode_document(doc)
    assert str(info.value).endswith("spec.schedulingPolicy.basic: Invalid value: true: must be an object, not a boolean")
    pod["spec"]["containers"] = [{"name": "c", "resources": True}]
    with pytest.raises(InvalidInput, match=r"must be an object \(ResourceRequirements\), not a boolean"):
        decode_document(pod)


# --- the file reader ``schedule --group`` uses ---------------------------------------------


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_read_with_documents_names_the_file_and_honours_validate(tmp_path: Path) -> None:
    bad = _write(tmp_path, "pg.yaml", Path(PODGROUP).read_text().replace("schedulingConstraints:", "schedulingConstraint:"))
    with pytest.raises(StrictDecodingError) as info:
        files.read_with_documents([CLUSTER, bad, *PODS])
    assert str(info.value) == f'{bad}: PodGroup default/train: strict decoding error: unknown field "spec.schedulingConstraint"'
    lines: list[str] = []
    typed, docs = files.read_with_documents([CLUSTER, bad, *PODS], validate="warn", warn=lines.append)
    assert lines == [f'{bad}: PodGroup default/train: unknown field "spec.schedulingConstraint"']
    assert sorted(d["kind"] for d in docs) == ["Pod", "Pod", "PodGroup"]
    assert typed
    lines.clear()
    files.read_with_documents([CLUSTER, bad, *PODS], validate="ignore", warn=lines.append)
    assert lines == []


def test_read_with_documents_validates_a_podgroup_naming_the_file(tmp_path: Path) -> None:
    bad = _write(tmp_path, "pg.yaml", Path(PODGROUP).read_text().replace("      minCount: 2\n", "      {}\n"))
    with pytest.raises(InvalidInputs) as info:
        files.read_with_documents([bad])
    assert [str(e) for e in info.value.errors] == [f"{bad}: PodGroup default/train: spec.schedulingPolicy.gang.minCount: Required value"]


@pytest.mark.parametrize(
    ("edit", "field", "warned"),
    [(*PODGROUP_TYPOS[0], 0), (*PODGROUP_TYPOS[1], 2)],
    ids=["constraints-typo", "mincount-typo"],
)
def test_schedule_group_rejects_a_podgroup_typo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Callable[[str], str], field: str, warned: int
) -> None:
    bad = _write(tmp_path, "pg.yaml", edit(Path(PODGROUP).read_text()))
    code = main(["schedule", "--group", "default/train", CLUSTER, bad, *PODS])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == f'error: {bad}: PodGroup default/train: strict decoding error: unknown field "{field}"'
    # Warned of, the typo is dropped: the group is placed without the misspelt constraint, and a
    # misspelt minCount leaves the required one missing.
    code = main(["schedule", "--group", "default/train", "--validate", "warn", CLUSTER, bad, *PODS])
    _, err = capsys.readouterr()
    assert f'warning: {bad}: PodGroup default/train: unknown field "{field}"' in err
    assert code == warned, err


# --- apiVersion, kind, metadata.name, int64, unnamed objects, Lists --------------------------

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: x, namespace: default}
spec: {devices: {requests: [{name: g, exactly: {deviceClassName: gpu.example.com}}]}}
"""


def _claim_error(text: str, **kw: Any) -> str:
    with pytest.raises(InvalidInput) as info:
        decode_object(_load(text), source="c.yaml", **kw)
    return str(info.value)


def test_a_missing_api_version_is_required() -> None:
    text = CLAIM.replace("apiVersion: resource.k8s.io/v1\n", "")
    assert _claim_error(text) == "c.yaml: ResourceClaim default/x: apiVersion: Required value: apiVersion must be set"
    assert _claim_error(text, validate="warn").endswith("apiVersion: Required value: apiVersion must be set")
    decode_object(_load(text), validate="ignore")  # an API server's objects, maybe without it
    pod = _load(FULL_POD)
    del pod["apiVersion"]
    with pytest.raises(InvalidInput, match=r"Pod default/full: apiVersion: Required value"):
        decode_document(pod)


@pytest.mark.parametrize(("kind", "go_type"), [("[ResourceClaim]", "array"), ("5", "number"), ("{a: 1}", "object")])
def test_a_kind_of_the_wrong_type_says_so(kind: str, go_type: str) -> None:
    error = _claim_error(CLAIM.replace("kind: ResourceClaim", f"kind: {kind}"))
    assert "Required value" not in error
    assert "kind: Invalid value: " in error
    assert f"json: cannot unmarshal {go_type} into Go struct field .kind of type string" in error


def test_a_name_of_the_wrong_type_is_invalid_and_never_a_python_repr() -> None:
    error = _claim_error(CLAIM.replace("name: x,", "name: [a],"))
    assert error == 'c.yaml: ResourceClaim default/<unnamed>: metadata.name: Invalid value: ["a"]: must be a string, not a list'
    pod = _load(FULL_POD)
    pod["metadata"]["name"] = ["a"]
    with pytest.raises(InvalidInput) as info:
        decode_document(pod)
    assert "['a']" not in str(info.value) and 'metadata.name: Invalid value: ["a"]: must be a string, not a list' in str(info.value)


@pytest.mark.parametrize(("count", "bound"), [(2**63, "at most 9223372036854775807"), (-(2**63) - 1, "at least -9223372036854775808")])
def test_a_count_beyond_int64_is_a_decoding_error(count: int, bound: str) -> None:
    error = _claim_error(CLAIM.replace("gpu.example.com}", f"gpu.example.com, count: {count}}}"))
    assert error == f"c.yaml: ResourceClaim default/x: spec.devices.requests[0].exactly.count: Invalid value: {count}: must be {bound} (int64)"
    decode_object(_load(CLAIM.replace("gpu.example.com}", f"gpu.example.com, count: {2**63 - 1}}}")))


def test_a_claim_without_a_name_names_its_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", CLAIM.replace("name: x, ", ""))
    with pytest.raises(InvalidInput) as info:
        files.read_inputs([path])
    assert str(info.value) == f"{path}: ResourceClaim default/: metadata.name: Required value: name or generateName is required"
    files.read_inputs([path], validate="ignore")
    files.read_inputs([_write(tmp_path, "g.yaml", CLAIM.replace("name: x, ", "generateName: x-, "))])


LIST = "apiVersion: v1\nkind: List\nbogus: 1\nmetadata: {foo: 1, resourceVersion: '1'}\nitems:\n- " + CLAIM.replace("\n", "\n  ").rstrip() + "\n"


def test_unknown_fields_of_a_list_wrapper_follow_validate(tmp_path: Path) -> None:
    path = _write(tmp_path, "l.yaml", LIST)
    with pytest.raises(StrictDecodingError) as info:
        files.read_inputs([path])
    assert str(info.value) == f'{path}: List: strict decoding error: unknown field "bogus", unknown field "metadata.foo"'
    lines: list[str] = []
    inputs = files.read_inputs([path], validate="warn", warn=lines.append)
    assert lines == [f'{path}: List: unknown field "bogus"', f'{path}: List: unknown field "metadata.foo"']
    assert len(inputs.objects) == 1
    lines.clear()
    files.read_inputs([path], validate="ignore", warn=lines.append)
    assert lines == []


def test_an_api_list_gives_its_items_their_version() -> None:
    items = yaml.safe_load(CLAIM)
    del items["apiVersion"], items["kind"]
    text = yaml.safe_dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimList", "metadata": {}, "items": [items]})
    (claim,) = [decode_object(d) for d in parse_documents(text, validate="strict")]
    assert claim.api_version == "resource.k8s.io/v1" and claim.kind == "ResourceClaim"


def test_a_node_spec_typo_is_rejected() -> None:
    node = _load(NODE)
    node["spec"]["unschedulabel"] = True
    with pytest.raises(StrictDecodingError, match=r'Node n-a: strict decoding error: unknown field "spec.unschedulabel"'):
        decode_object(node)
