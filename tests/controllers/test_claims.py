"""The ResourceClaim controller's decisions: tables of objects before -> expected changes."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_solver.controllers import claims as c
from dra_solver.controllers import objects as ob
from tests import builders as b

POD = b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"})
POD_ON_NODE = b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-abcde"}, node="node-a")
TEMPLATE = b.template("tmpl", labels={"team": "ml"}, annotations={"note": "x"})


@dataclass
class PodCase:
    pod: dict[str, Any]
    claims: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=lambda: [TEMPLATE])
    admin_access: bool = True
    creates: list[str] = field(default_factory=list)
    """Pod claims expected to get a new ResourceClaim."""
    record: dict[str, str] = field(default_factory=dict)
    reserve: list[str] = field(default_factory=list)
    """Claim names expected to be reserved for the pod."""
    errors: list[str] = field(default_factory=list)
    """Substrings, one per expected error."""
    unallocated: list[str] = field(default_factory=list)
    """Claims (keys) reported as not allocated for a pod that skipped the scheduler."""


POD_CASES: dict[str, PodCase] = {
    "template claim is created": PodCase(POD, creates=["gpu"]),
    "two template claims": PodCase(b.pod("web", uid="pod-uid", templates={"a": "tmpl", "b": "tmpl"}), creates=["a", "b"]),
    "claim already recorded and owned": PodCase(
        b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-abcde"}),
        claims=[b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="pod-uid")).pod_claim("gpu").obj()],
    ),
    "recorded claim deleted by accident is re-created": PodCase(
        b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-abcde"}), creates=["gpu"]
    ),
    "recorded claim owned by another pod is replaced": PodCase(
        b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-abcde"}),
        claims=[b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="old-uid")).pod_claim("gpu").obj()],
        creates=["gpu"],
    ),
    "claim created before a failed status write is reused": PodCase(
        POD, claims=[b.ONE_GPU.named("web-gpu-zzzzz").owned_by(b.pod("web", uid="pod-uid")).pod_claim("gpu").obj()], record={"gpu": "web-gpu-zzzzz"}
    ),
    "owned claim for another pod claim is not reused": PodCase(
        POD, claims=[b.ONE_GPU.named("web-other-zzzzz").owned_by(b.pod("web", uid="pod-uid")).pod_claim("other").obj()], creates=["gpu"]
    ),
    "status says no claim needed": PodCase(b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": None})),
    "missing template is an error": PodCase(POD, templates=[], errors=["ResourceClaimTemplate default/tmpl not found"]),
    "admin access refused when disabled": PodCase(
        POD, templates=[b.template("tmpl", admin=True)], admin_access=False, errors=["admin access is requested, but the feature is disabled"]
    ),
    "admin access allowed when enabled": PodCase(POD, templates=[b.template("tmpl", admin=True)], creates=["gpu"]),
    "user claim is left to the user": PodCase(b.pod("web", uid="pod-uid", claims={"gpu": "shared"})),
    "deleted pod gets nothing": PodCase(b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, deleting=True)),
    "finished pod gets no new claim": PodCase(
        b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-abcde"}, node="node-a", phase="Succeeded")
    ),
    "scheduled pod: allocated claim gets reserved": PodCase(
        POD_ON_NODE,
        claims=[b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="pod-uid")).pod_claim("gpu").allocated("gpu-0", node="node-a").obj()],
        reserve=["web-gpu-abcde"],
    ),
    "scheduled pod: already reserved": PodCase(
        POD_ON_NODE,
        claims=[b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="pod-uid")).pod_claim("gpu").allocated("gpu-0", node="node-a").reserved_for(b.pod("web", uid="pod-uid")).obj()],
    ),
    "scheduled pod: unallocated claim is not reserved but reported": PodCase(
        POD_ON_NODE, claims=[b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="pod-uid")).pod_claim("gpu").obj()],
        unallocated=["default/web-gpu-abcde"],
    ),
    "scheduled pod: one claim reserved, the other reported": PodCase(
        b.pod("web", uid="pod-uid", claims={"a": "shared", "b": "lonely"}, node="node-a"),
        claims=[b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(b.pod("other", uid="other-uid")).obj(), b.ONE_GPU.named("lonely").obj()],
        reserve=["shared"], unallocated=["default/lonely"],
    ),
    "scheduled pod: shared user claim gets reserved next to others": PodCase(
        b.pod("web", uid="pod-uid", claims={"gpu": "shared"}, node="node-a"),
        claims=[b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(b.pod("other", uid="other-uid")).obj()],
        reserve=["shared"],
    ),
    "pending pod: allocated claim is left to the scheduler": PodCase(
        b.pod("web", uid="pod-uid", claims={"gpu": "shared"}), claims=[b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").obj()]
    ),
}


@pytest.mark.parametrize("case", POD_CASES.values(), ids=POD_CASES.keys())
def test_sync_pod(case: PodCase) -> None:
    claims = b.by_key(*case.claims)
    templates = b.by_key(*case.templates)
    before = copy.deepcopy((case.pod, claims, templates))
    owned = [cl for cl in case.claims if ob.owning_pod(cl)[1] == ob.uid(case.pod)]
    plan = c.sync_pod(case.pod, claims=claims, templates=templates, owned=owned, admin_access_enabled=case.admin_access)
    assert (case.pod, claims, templates) == before, "inputs must not be mutated"
    assert [x.pod_claim for x in plan.creates] == case.creates
    assert dict(plan.record) == case.record
    assert [ob.name(r.claim) for r in plan.reserve] == case.reserve
    assert len(plan.errors) == len(case.errors)
    for err, want in zip(plan.errors, case.errors, strict=True):
        assert want in err
    assert len(plan.unallocated) == len(case.unallocated)
    for message, claim in zip(plan.unallocated, case.unallocated, strict=True):
        assert f"ResourceClaim {claim} is not allocated" in message and "on node node-a" in message
    for r in plan.reserve:
        assert r.status["reservedFor"][-1] == {"resource": "pods", "name": "web", "uid": "pod-uid"}
        assert r.status["allocation"] == ob.allocation(r.claim)


def test_created_claim_follows_upstream_conventions() -> None:
    plan = c.sync_pod(POD, claims={}, templates=b.by_key(TEMPLATE))
    body = plan.creates[0].body
    assert body["metadata"]["generateName"] == "web-gpu-"
    assert body["metadata"]["namespace"] == "default"
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "pod-uid", "controller": True, "blockOwnerDeletion": True}
    ]
    assert body["metadata"]["annotations"] == {"note": "x", "resource.kubernetes.io/pod-claim-name": "gpu"}
    assert body["metadata"]["labels"] == {"team": "ml"}
    # Upstream's controller leaves the finalizer to the scheduler (one more write per pod).
    assert body["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert body["spec"] == TEMPLATE["spec"]["spec"]
    assert "annotations" not in TEMPLATE["spec"]["metadata"] or "resource.kubernetes.io/pod-claim-name" not in TEMPLATE["spec"]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("pod_name", "claim_name"),
    [("web", "gpu"), ("a" * 60, "gpu"), ("web", "c" * 70), ("p" * 40, "c" * 40)],
    ids=["short", "long pod", "long claim", "both long"],
)
def test_generate_name_fits_and_keeps_both_parts(pod_name: str, claim_name: str) -> None:
    name = c.generate_name(pod_name, claim_name)
    assert name.endswith("-")
    assert len(name) <= c.GENERATE_NAME_MAX
    head, _, tail = name[:-1].partition("-")
    assert pod_name.startswith(head) and head
    assert claim_name.startswith(tail) and tail


def test_pod_status_patch_merges_by_name_with_uid_precondition() -> None:
    patch = c.pod_status_patch(POD, {"b": "web-b-1", "a": "web-a-1"})
    assert patch == {
        "metadata": {"uid": "pod-uid"},
        "status": {"resourceClaimStatuses": [{"name": "a", "resourceClaimName": "web-a-1"}, {"name": "b", "resourceClaimName": "web-b-1"}]},
    }


WEB = b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-1"}, node="node-a", phase="Running")
DONE = b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, statuses={"gpu": "web-gpu-1"}, node="node-a", phase="Succeeded")
OTHER = b.pod("other", uid="other-uid", claims={"gpu": "web-gpu-1"}, node="node-a", phase="Running")


@dataclass
class ClaimCase:
    claim: dict[str, Any]
    pods: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    deleted: frozenset[str] = frozenset()
    groups: dict[str, dict[str, Any] | None] | None = None
    reserved_after: list[str] | None = None
    """Names left in reservedFor when the status is rewritten (None: no status write)."""
    deallocate: bool = False
    remove_finalizer: bool = False
    delete: bool = False


GENERATED = b.ONE_GPU.named("web-gpu-1").owned_by(WEB).pod_claim("gpu")
"""The claim generated from WEB's template for its pod claim ``gpu``."""


TRAIN = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "train", "namespace": "default", "uid": "pg-uid"},
         "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
TRAIN_REF = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "pg-uid"}


def _for_group(*pods: dict[str, Any]) -> dict[str, Any]:
    """A shared claim allocated by us and reserved for the PodGroup TRAIN (and ``pods``)."""
    claim = b.ONE_GPU.named("train-fabric").finalizer().allocated("gpu-0", node="node-a").reserved_for(*pods).obj()
    claim["status"]["reservedFor"] = [TRAIN_REF, *claim["status"].get("reservedFor", [])]
    return claim


CLAIM_CASES: dict[str, ClaimCase] = {
    "running pod keeps its reservation": ClaimCase(GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(), pods={"web": WEB}),
    "finished pod: reservation dropped, claim deallocated, finalizer removed, claim deleted": ClaimCase(
        GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(), pods={"web": DONE}, reserved_after=[], deallocate=True,
        remove_finalizer=True, delete=True,
    ),
    "deleted pod (known uid): reservation dropped and deallocated": ClaimCase(
        GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(), deleted=frozenset({"pod-uid"}), reserved_after=[], deallocate=True,
        remove_finalizer=True,
    ),
    "pod confirmed gone by the API server": ClaimCase(
        GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(), pods={"web": None}, reserved_after=[], deallocate=True, remove_finalizer=True
    ),
    "pod unknown (not looked up): reservation kept": ClaimCase(GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj()),
    "pod replaced by a new instance": ClaimCase(
        GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(),
        pods={"web": b.pod("web", uid="new-uid", node="node-a", phase="Running")},
        reserved_after=[], deallocate=True, remove_finalizer=True, delete=True,
    ),
    "one of two consumers finished: no deallocation": ClaimCase(
        b.ONE_GPU.named("shared").finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB, OTHER).obj(), pods={"web": DONE, "other": OTHER}, reserved_after=["other"]
    ),
    "without our finalizer the allocation stays": ClaimCase(
        b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(WEB).obj(), pods={"web": DONE}, reserved_after=[]
    ),
    "pod deleted before scheduling is done": ClaimCase(
        GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(),
        pods={"web": b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, deleting=True)},
        reserved_after=[], deallocate=True, remove_finalizer=True, delete=True,
    ),
    "deleting scheduled pod still runs: kept": ClaimCase(
        GENERATED.finalizer().allocated("gpu-0", node="node-a").reserved_for(WEB).obj(),
        pods={"web": b.pod("web", uid="pod-uid", node="node-a", phase="Running", deleting=True)},
    ),
    "claim being deleted and unused: deallocate and release": ClaimCase(
        b.ONE_GPU.named("shared").finalizer().deleting().allocated("gpu-0", node="node-a").obj(), reserved_after=[], deallocate=True, remove_finalizer=True
    ),
    "claim being deleted, never allocated: just release": ClaimCase(b.ONE_GPU.named("shared").finalizer().deleting().obj(), remove_finalizer=True),
    "unused claim of a finished pod is deleted": ClaimCase(GENERATED.obj(), pods={"web": DONE}, delete=True),
    "unused claim of a running pod stays": ClaimCase(GENERATED.obj(), pods={"web": WEB}),
    "unused claim, owner not in cache: left to the garbage collector": ClaimCase(GENERATED.obj()),
    "user claim without owner is never deleted": ClaimCase(b.ONE_GPU.named("shared").obj(), pods={}),
    "podgroup that exists keeps its reservation": ClaimCase(_for_group(), groups={"train": TRAIN}),
    "podgroup unknown (not looked up): reservation kept": ClaimCase(_for_group(), groups={}),
    "podgroups not served: the entry is left alone": ClaimCase(_for_group(), groups=None, deleted=frozenset({"pg-uid"})),
    "deleted podgroup (known uid): reservation dropped and deallocated": ClaimCase(
        _for_group(), groups={}, deleted=frozenset({"pg-uid"}), reserved_after=[], deallocate=True, remove_finalizer=True
    ),
    "podgroup confirmed gone by the API server": ClaimCase(
        _for_group(), groups={"train": None}, reserved_after=[], deallocate=True, remove_finalizer=True
    ),
    "podgroup replaced by a new instance": ClaimCase(
        _for_group(), groups={"train": {**TRAIN, "metadata": {**TRAIN["metadata"], "uid": "new-uid"}}}, reserved_after=[], deallocate=True,
        remove_finalizer=True,
    ),
    "podgroup gone, a pod still uses the claim: no deallocation": ClaimCase(
        _for_group(WEB), pods={"web": WEB}, groups={"train": None}, reserved_after=["web"]
    ),
    "unsupported consumer kept": ClaimCase(
        {**b.ONE_GPU.named("shared").finalizer().allocated("gpu-0", node="node-a").obj(), "status": {"allocation": {"devices": {"results": []}},
                                                                           "reservedFor": [{"apiGroup": "example.com", "resource": "things", "name": "t", "uid": "t1"}]}}
    ),
}


@pytest.mark.parametrize("case", CLAIM_CASES.values(), ids=CLAIM_CASES.keys())
def test_sync_claim(case: ClaimCase) -> None:
    before = copy.deepcopy((case.claim, case.pods))
    plan = c.sync_claim(case.claim, pods=case.pods, deleted=case.deleted, groups=case.groups)
    assert (case.claim, case.pods) == before, "inputs must not be mutated"
    if case.reserved_after is None and not case.deallocate:
        assert plan.status is None
    else:
        assert plan.status is not None
        assert [r["name"] for r in plan.status.get("reservedFor", [])] == (case.reserved_after or [])
        assert ("allocation" not in plan.status) == case.deallocate or ob.allocation(case.claim) is None
    assert plan.remove_finalizer == case.remove_finalizer
    assert plan.delete == case.delete
    assert plan.empty == (plan.status is None and not plan.remove_finalizer and not plan.delete)


def test_pods_to_look_up_skips_cached_and_deleted() -> None:
    claim = b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").reserved_for(WEB, OTHER, b.pod("gone", uid="gone-uid")).obj()
    assert c.pods_to_look_up(claim, cached={"web": WEB}, deleted=frozenset({"gone-uid"})) == ["other"]


def test_groups_to_look_up_skips_cached_deleted_and_pods() -> None:
    claim = _for_group(WEB)
    claim["status"]["reservedFor"].append({"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "gone", "uid": "gone-uid"})
    claim["status"]["reservedFor"].append({"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "other", "uid": "o-uid"})
    assert c.groups_to_look_up(claim, cached={"train": TRAIN}, deleted=frozenset({"gone-uid"})) == ["other"]
    assert c.pods_to_look_up(claim, cached={}, deleted=frozenset()) == ["web"]


@pytest.mark.parametrize(
    ("pod", "claims", "needed", "why"),
    [
        (POD, {}, True, "not created yet"),
        (b.pod("web", uid="pod-uid", claims={"gpu": "user"}), {}, False, "nothing to do"),
        (b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, deleting=True), {}, False, "pod is deleted"),
        (b.pod("web", uid="pod-uid", templates={"gpu": "tmpl"}, phase="Failed"), {}, False, "pod is done"),
        (POD_ON_NODE, b.by_key(b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="pod-uid")).allocated("gpu-0", node="node-a").obj()), True, "need to reserve"),
        (POD_ON_NODE, b.by_key(b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="x")).allocated("gpu-0", node="node-a").obj()), False, "not created for Pod"),
        (POD_ON_NODE, b.by_key(b.ONE_GPU.named("web-gpu-abcde").owned_by(b.pod("web", uid="pod-uid")).obj()), True, "is not allocated: report it"),
    ],
    ids=["template missing claim", "user claim missing", "deleted", "finished", "reserve", "foreign claim", "unallocated"],
)
def test_pod_needs_work(pod: dict[str, Any], claims: dict[str, Any], needed: bool, why: str) -> None:
    got, reason = c.pod_needs_work(pod, claims)
    assert got == needed
    assert why in reason


@pytest.mark.parametrize(
    ("pod", "deleted", "released"),
    [
        (WEB, False, False),
        (WEB, True, True),
        (DONE, False, True),
        (b.pod("p", deleting=True), False, True),
        (b.pod("p", node="n", deleting=True), False, False),
    ],
    ids=["running", "deleted", "terminal", "deleted unscheduled", "deleting scheduled"],
)
def test_pod_releases_claims(pod: dict[str, Any], deleted: bool, released: bool) -> None:
    assert c.pod_releases_claims(pod, deleted=deleted) == released


def test_without_finalizer_keeps_others() -> None:
    claim = b.ONE_GPU.named("x").finalizer().obj()
    claim["metadata"]["finalizers"].append("example.com/keep")
    out = c.without_finalizer(claim)
    assert out["metadata"]["finalizers"] == ["example.com/keep"]
    assert "example.com/keep" in claim["metadata"]["finalizers"] and len(claim["metadata"]["finalizers"]) == 2
