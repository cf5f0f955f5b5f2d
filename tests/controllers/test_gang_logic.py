"""The pure decisions of gang scheduling (controllers/gang.py) and of the PodGroup claims in
the claim controller (controllers/claims.py): gate, group claims, conditions, rooms."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dra_solver.controllers import claims as c
from dra_solver.controllers import gang
from dra_solver.controllers import objects as ob
from dra_solver.controllers import scheduling as logic
from tests import builders as b
from tests import gang_builders as gb

Obj = dict[str, Any]
FABRIC = {"name": "fabric", "resourceClaimName": "train-fabric"}
TEMPLATE_ENTRY = {"name": "fabric", "resourceClaimTemplateName": "rack-fabric"}


def _group(min_count: int = 2, **kw: Any) -> Obj:
    pg = gb.podgroup("train", min_count, **kw)
    pg["metadata"].update(uid="pg-uid", generation=3, resourceVersion="7")
    return pg


def _member(name: str, **kw: Any) -> Obj:
    pod = gb.member(name, "train", **kw)
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def test_keys() -> None:
    assert gang.group_key("ns", "train") == "podgroup:ns/train"
    assert gang.parse_group_key("podgroup:ns/train") == ("ns", "train")
    assert gang.parse_group_key("ns/pod") is None
    assert gang.pod_group_key(_member("w0")) == "podgroup:default/train"
    assert gang.pod_group_key(b.pod("plain")) == ""


def test_gate_waits_for_the_group_and_for_min_count() -> None:
    pods = [_member("w0"), _member("w1")]
    assert gang.gate(None, pods, scheduler_name="dra-solver", name="train").wait == 'waiting for PodGroup "train" to be created'
    g = gang.gate(_group(3), pods, scheduler_name="dra-solver")
    assert not g.ready and g.wait == "waiting for minCount pods of PodGroup default/train: 2 of 3 exist"
    gated = _member("w2")
    gated["spec"]["schedulingGates"] = [{"name": "later"}]
    assert not gang.gate(_group(3), [*pods, gated], scheduler_name="dra-solver").ready
    g = gang.gate(_group(2), pods, scheduler_name="dra-solver")
    assert g.ready and [ob.name(p) for p in g.pending] == ["w0", "w1"] and g.quorum == 2


def test_gate_counts_bound_members_and_rejects_mixed_schedulers() -> None:
    bound = _member("w0")
    bound["spec"]["nodeName"] = "n1"
    g = gang.gate(_group(2), [bound, _member("w1")], scheduler_name="dra-solver")
    assert g.ready and [ob.name(p) for p in g.pending] == ["w1"] and g.quorum == 1
    other = _member("w2", scheduler="default-scheduler")
    g = gang.gate(_group(2), [_member("w1"), other], scheduler_name="dra-solver")
    assert not g.ready and g.error == "pods of PodGroup default/train name different schedulers: default-scheduler, dra-solver"
    basic = _group()
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    assert gang.min_count(basic) is None and not gang.gate(basic, [_member("w1")], scheduler_name="dra-solver").ready


def test_members_skip_deleted_finished_and_other_groups() -> None:
    done = _member("w1")
    done["status"] = {"phase": "Succeeded"}
    leaving = _member("w2")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    other = gb.member("w3", "other")
    assert [ob.name(p) for p in gang.members([_member("w0"), done, leaving, other], "default", "train")] == ["w0"]


def test_shared_claims_by_entry_and_template_claims_from_status() -> None:
    pg = _group(claims=[FABRIC, TEMPLATE_ENTRY | {"name": "data"}])
    shared = gang.shared_claims(pg)
    assert shared.wait.startswith("waiting for the claim of PodGroup default/train spec.resourceClaims[1]")
    pg["status"] = {"resourceClaimStatuses": [{"name": "data", "resourceClaimName": "train-data-x1"}]}
    shared = gang.shared_claims(pg)
    assert shared.keys == ("default/train-fabric", "default/train-data-x1")
    pod = _member("w0", shared=[FABRIC, {"name": "data", "resourceClaimTemplateName": "rack-fabric"}, {"name": "own", "resourceClaimName": "x"}])
    assert gang.pod_shared_entries(pod, shared) == {"fabric": "default/train-fabric", "data": "default/train-data-x1"}
    # Same claim under another entry name is the pod's own use, not the group's.
    assert gang.pod_shared_entries(_member("w1", shared=[{"name": "f2", "resourceClaimName": "train-fabric"}]), shared) == {}
    assert [e["name"] for e in gang.without_entries(pod, ["fabric", "data"])["spec"]["resourceClaims"]] == ["own"]


def test_podgroup_reference_and_reservation_of_members() -> None:
    pg = _group()
    ref = gang.podgroup_reference(pg)
    assert ref == {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "pg-uid"}
    claim = {"metadata": {"name": "f", "namespace": "default"}, "status": {"reservedFor": [ref]}}
    assert ob.is_reserved_for_pod(_member("w0"), claim)
    assert not ob.is_reserved_for_pod(b.pod("plain", uid="u"), claim)
    step = logic.write_step(b.ONE_GPU.named("f").obj(), pg, {"devices": {"results": []}}, reference=ref)
    assert step.kind == "finalizer"
    assert step.body is not None
    step = logic.write_step(step.body, pg, {"devices": {"results": []}}, reference=ref)
    assert step.kind == "status" and step.body is not None and step.body["reservedFor"] == [ref]


def test_condition_patch() -> None:
    pg = _group()
    patch = gang.condition_patch(pg, reason=gang.UNSCHEDULABLE, message="pod group is unschedulable: x", now=0)
    assert patch is not None
    (cond,) = patch["status"]["conditions"]
    assert cond == {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "pod group is unschedulable: x", "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 3}
    pg["status"] = patch["status"]
    assert gang.condition_patch(pg, reason=gang.UNSCHEDULABLE, message="pod group is unschedulable: x", now=5) is None
    done = gang.condition_patch(pg, reason=gang.SCHEDULED, message="", now=9)
    assert done is not None and done["status"]["conditions"][0]["status"] == "True"
    pg["status"] = done["status"]
    assert gang.scheduled(pg)
    assert gang.condition_patch(pg, reason=gang.UNSCHEDULABLE, message="later", now=10) is None  # terminal once True


def test_rooms_and_requests() -> None:
    nodes = [b.node("n1", cpu="8", memory="32Gi", pods="10"), b.node("n2", cpu="16")]
    used = {"n1": logic.Resources(Fraction(5, 2), Fraction(2**30), 3)}
    rooms = {r.node: r for r in gang.rooms(nodes, used)}
    assert rooms["n1"] == gang.Room("n1", 5500, 31 * 2**30, 7)
    assert rooms["n2"].cpu_millis == 16000
    requests = logic.pod_requests(b.pod("p", cpu="1500m", memory="1Mi"))
    assert (gang.cpu_millis(requests), gang.memory_bytes(requests)) == (1500, 2**20)


def test_domain_nodes_of_a_partly_bound_gang() -> None:
    nodes = [b.node("a1", labels={gb.RACK_LABEL: "a"}), b.node("a2", labels={gb.RACK_LABEL: "a"}), b.node("b1", labels={gb.RACK_LABEL: "b"})]
    bound = _member("w0")
    bound["spec"]["nodeName"] = "a2"
    assert gang.domain_nodes(nodes, gb.RACK_LABEL, [bound]) == {"a1", "a2"}
    assert gang.domain_nodes(nodes, "", [bound]) is None
    assert gang.domain_nodes(nodes, gb.RACK_LABEL, []) is None


# --- the claim controller's part ------------------------------------------------------------------


def test_a_podgroup_template_entry_gets_one_claim_owned_by_the_group() -> None:
    pg = _group(claims=[TEMPLATE_ENTRY, FABRIC])
    template = b.claim("rack-fabric", cls=gb.FABRIC_CLASS).request("link").template(labels={"l": "v"})
    plan = c.sync_pod_group(pg, claims={}, templates={"default/rack-fabric": template})
    (create,) = plan.creates
    meta = create.body["metadata"]
    assert meta["generateName"] == "train-fabric-"
    assert meta["ownerReferences"] == [{"apiVersion": gb.PODGROUP_API, "kind": "PodGroup", "name": "train", "uid": "pg-uid",
                                        "controller": True, "blockOwnerDeletion": True}]
    assert meta["annotations"] == {c.PODGROUP_CLAIM_ANNOTATION: "fabric"} and meta["labels"] == {"l": "v"}
    assert c.owning_group_uid(dict(create.body, metadata=dict(meta, name="train-fabric-abcde"))) == "pg-uid"

    made = dict(create.body, metadata=dict(meta, name="train-fabric-abcde", namespace="default"))
    # Made before a failed status write: found by owner and annotation, recorded, not made again.
    plan = c.sync_pod_group(pg, claims={"default/train-fabric-abcde": made}, templates={"default/rack-fabric": template}, owned=[made])
    assert not plan.creates and plan.record == {"fabric": "train-fabric-abcde"}
    assert c.group_status_patch(pg, plan.record) == {"status": {"resourceClaimStatuses": [{"name": "fabric", "resourceClaimName": "train-fabric-abcde"}]}}
    pg["status"] = {"resourceClaimStatuses": [{"name": "fabric", "resourceClaimName": "train-fabric-abcde"}]}
    assert c.sync_pod_group(pg, claims={"default/train-fabric-abcde": made}, templates={}, owned=[made]) == c.GroupPlan()
    missing = c.sync_pod_group(_group(claims=[TEMPLATE_ENTRY]), claims={}, templates={})
    assert missing.errors == ("PodGroup default/train, resourceClaim fabric: ResourceClaimTemplate default/rack-fabric not found",)


def test_a_member_records_the_group_claim_instead_of_making_one() -> None:
    pg = _group(claims=[TEMPLATE_ENTRY])
    pod = _member("w0", gpus_template="gpu-1", shared=[TEMPLATE_ENTRY])
    templates = {"default/gpu-1": b.template("gpu-1"), "default/rack-fabric": b.template("rack-fabric")}
    assert c.group_entries(pod, pg) == {"fabric": ""}
    plan = c.sync_pod(pod, claims={}, templates=templates, group=c.group_entries(pod, pg))
    assert [x.pod_claim for x in plan.creates] == ["gpu"] and plan.record == {}
    pg["status"] = {"resourceClaimStatuses": [{"name": "fabric", "resourceClaimName": "train-fabric-abcde"}]}
    plan = c.sync_pod(pod, claims={}, templates=templates, group=c.group_entries(pod, pg))
    assert [x.pod_claim for x in plan.creates] == ["gpu"] and plan.record == {"fabric": "train-fabric-abcde"}
    # Without the group (an entry of another name) the template is the pod's own.
    assert [x.pod_claim for x in c.sync_pod(pod, claims={}, templates=templates).creates] == ["gpu", "fabric"]
