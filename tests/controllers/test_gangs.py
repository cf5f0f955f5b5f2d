"""Gang scheduling on the real kube-apiserver: a PodGroup (scheduling.k8s.io/v1beta1) placed
whole through ``ScheduleGroup``, or not at all.

- a gang waits for ``minCount`` pods, then is placed whole in one rack;
- the PodGroup's claim is reserved for the PodGroup, each pod's own claim for the pod;
- ``PodGroupInitiallyScheduled`` says Scheduled, or Unschedulable with the group explanation;
- failing the k-th write of an attempt, for every k up to and including the first bind,
  leaves nothing allocated, reserved or bound, and the retry places the gang.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from dra_solver.controllers import objects as ob
from dra_solver.controllers.scheduler import Scheduler
from dra_solver.service.kubeapi import client as kube
from tests import builders as b
from tests import gang_builders as gb
from tests.controllers.conftest import Env, FaultyKube, collection, wait_for

GPU_TEMPLATE = "gpus-8"
FABRIC = {"name": "fabric", "resourceClaimName": "train-fabric"}


def _racks(env: Env, racks: list[gb.Rack], ns: str) -> None:
    for obj in gb.cluster(racks):
        if obj["kind"] == "Node":
            env.node(ob.name(obj), cpu=obj["status"]["allocatable"]["cpu"], labels=obj["metadata"]["labels"])
        elif obj["kind"] == "ResourceClaim":
            status = obj.pop("status")
            obj["metadata"]["namespace"] = ns
            created = env.create(obj)
            created["status"] = status
            env.kc.request("PUT", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{ob.name(obj)}/status", created)
        else:
            env.create(obj)


def _gang(env: Env, ns: str, name: str, pods: int, *, min_count: int, gpus: int = 8, start: int = 0, fabric: bool = True,
          create_group: bool = True) -> list[str]:
    if create_group:
        env.create(b.template(f"gpus-{gpus}", ns=ns, count=gpus))
        if fabric:
            env.create(b.claim("train-fabric", ns=ns, cls=gb.FABRIC_CLASS).request("link").obj())
        env.create(gb.podgroup(name, min_count, ns=ns, key=gb.RACK_LABEL, claims=[FABRIC] if fabric else ()))
    names = [f"{name}-{i}" for i in range(start, start + pods)]
    for pod in names:
        env.create(gb.member(pod, name, gpus_template=f"gpus-{gpus}", shared=[FABRIC] if fabric else (), ns=ns))
    return names


def _condition(env: Env, ns: str, name: str) -> dict[str, Any] | None:
    pg = env.get("PodGroup", name, ns) or {}
    for c in ob.status(pg).get("conditions") or []:
        if c.get("type") == "PodGroupInitiallyScheduled":
            return dict(c)
    return None


def _own_claims(env: Env, ns: str) -> list[dict[str, Any]]:
    return [c for c in env.objects("ResourceClaim", ns) if not ob.name(c).startswith(("busy-", "train-fabric"))]


def test_gang_waits_for_min_count_then_is_placed_whole_in_one_rack(env: Env) -> None:
    ns = env.kc.namespace("gang")
    # r1 has 4 nodes but only two with 8 free GPUs; r2 has three: a gang of 3 x 8 GPUs fits r2 only.
    _racks(env, [gb.Rack("r1", [gb.Node(busy=0), gb.Node(busy=0), gb.Node(busy=2), gb.Node(busy=4)], fabric=2),
                 gb.Rack("r2", [gb.Node(), gb.Node(), gb.Node()], fabric=2)], ns)
    manager = env.manager()
    first = _gang(env, ns, "train", 2, min_count=3)
    env.settle()
    wait_for(lambda: all(env.claims_of(env.pod(p, ns) or {}) for p in first), what="the pods' own claims")
    env.settle()
    assert env.bound_pods(ns) == {}
    assert not [c for c in env.objects("ResourceClaim", ns) if ob.allocation(c) and not ob.name(c).startswith("busy-")]
    assert _condition(env, ns, "train") is None  # waiting for minCount is not a verdict

    last = _gang(env, ns, "train", 1, min_count=3, start=2, create_group=False)
    wait_for(lambda: len(env.bound_pods(ns)) == 3, timeout=30, what="the gang to be bound")
    bound = env.bound_pods(ns)
    assert set(bound) == {*first, *last}
    # The group's claims, written, go with every Schedule to solver replicas for a while (a
    # replica whose watch lags must not hand their devices out again), as a pod's do.
    scheduler = manager.controllers["scheduler"]
    assert isinstance(scheduler, Scheduler)
    sent = {json.loads(c)["metadata"]["name"] for c in scheduler._in_flight_claims()}
    written = {ob.name(c) for p in bound for c in env.claims_of(env.pod(p, ns) or {})}
    assert len(written) == 4 and written <= sent, (written, sent)
    assert {n.split("-")[0] for n in bound.values()} == {"r2"}
    assert len(set(bound.values())) == 3

    group = env.get("PodGroup", "train", ns)
    assert group is not None
    fabric = env.get("ResourceClaim", "train-fabric", ns)
    assert fabric is not None and ob.allocation(fabric) is not None
    assert ob.reserved_for(fabric) == [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": ob.uid(group)}]
    assert ob.allocated_devices(fabric)[0]["pool"] == "r2-fabric"
    for pod_name in bound:
        pod = env.pod(pod_name, ns)
        assert pod is not None
        own = [c for c in env.claims_of(pod) if ob.name(c) != "train-fabric"]
        assert len(own) == 1 and len(ob.allocated_devices(own[0])) == 8
        assert ob.reserved_for(own[0]) == [{"resource": "pods", "name": pod_name, "uid": ob.uid(pod)}]
        assert {r["pool"] for r in ob.allocated_devices(own[0])} == {bound[pod_name]}
    condition = wait_for(lambda: _condition(env, ns, "train"), what="the PodGroup condition")
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "Scheduled", "")
    assert condition.get("observedGeneration") == ob.meta(group).get("generation")


def test_a_gang_that_fits_nowhere_says_why_and_holds_nothing(env: Env) -> None:
    ns = env.kc.namespace("gang")
    # Each rack has two nodes with 8 free GPUs: a gang of three never fits one rack.
    _racks(env, [gb.Rack("r1", [gb.Node(), gb.Node(), gb.Node(busy=1)], fabric=1),
                 gb.Rack("r2", [gb.Node(), gb.Node(busy=3), gb.Node()], fabric=1)], ns)
    env.manager()
    names = _gang(env, ns, "train", 3, min_count=3)
    condition = wait_for(lambda: _condition(env, ns, "train"), timeout=30, what="the PodGroup condition")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"].startswith("pod group is unschedulable: ")
    assert "2 of 3" in condition["message"], condition["message"]
    env.settle()
    assert env.bound_pods(ns) == {}
    assert not [c for c in env.objects("ResourceClaim", ns) if ob.allocation(c) and not ob.name(c).startswith("busy-")]
    for name in names:
        pod = env.pod(name, ns) or {}
        scheduled = [c for c in ob.status(pod).get("conditions") or [] if c.get("type") == "PodScheduled"]
        assert scheduled and scheduled[0]["status"] == "False" and scheduled[0]["message"] == condition["message"]

    # Room appears (a busy GPU claim goes away): the parked gang is tried again and placed.
    env.delete("ResourceClaim", "busy-r1-n2", ns=ns)
    wait_for(lambda: len(env.bound_pods(ns)) == 3, timeout=30, what="the gang to be placed once r1 has room")
    assert {n.split("-")[0] for n in env.bound_pods(ns).values()} == {"r1"}
    assert wait_for(lambda: (_condition(env, ns, "train") or {}).get("status") == "True", what="Scheduled")


WRITES = ("update_claim", "update_claim_status", "bind_pod")
"""The writes of an attempt, in order: per claim the finalizer (metadata update) and the
allocation with reservedFor (status update), the group's claim first; then the binds."""


class KthWrite:
    """Fail the k-th write of the attempts (once); count every write."""

    def __init__(self, api: FaultyKube, k: int) -> None:
        self.k = k
        self.count = 0
        self.fired = threading.Event()
        self._lock = threading.Lock()
        for method in WRITES:
            api.inject(method, self._maybe_fail, times=1000)

    def _maybe_fail(self, _args: tuple[Any, ...]) -> None:
        with self._lock:
            self.count += 1
            if self.count != self.k:
                return
        self.fired.set()
        raise kube.Transient(f"injected failure of write {self.k}", status=500)


def test_failing_any_write_before_the_first_bind_leaves_nothing_and_the_retry_places_the_gang(env: Env) -> None:
    # Two pods with a claim of one GPU each and the group's fabric claim: three claims, each
    # written twice (finalizer, then allocation with reservedFor), then the first bind: write 7.
    _racks(env, [gb.Rack("r1", [gb.Node(gpus=8), gb.Node(gpus=8)], fabric=8)], b.NS)
    solver = env.solver
    assert solver is not None
    for k in range(1, 8):
        ns = env.kc.namespace(f"k{k}")
        api = env.client(f"gang-k{k}", faulty=True)
        assert isinstance(api, FaultyKube)
        fault = KthWrite(api, k)
        # A backoff longer than the checks below: the state they see is the rolled-back one.
        manager = env.manager(f"gang-k{k}", kube_api=api, backoff_initial=2.5, backoff_max=2.5, enable=frozenset({"scheduler"}))
        env.create(b.claim("train-fabric", ns=ns, cls=gb.FABRIC_CLASS).request("link").obj())
        env.create(gb.podgroup("train", 2, ns=ns, key=gb.RACK_LABEL, claims=[FABRIC]))
        for i in range(2):
            env.create(b.claim(f"train-{i}-gpu", ns=ns, cls=b.CLASS).request("gpu").obj())
            pod = b.pod(f"train-{i}", ns=ns, claims={"gpu": f"train-{i}-gpu", "fabric": "train-fabric"}, cpu="1")
            pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
            env.create(pod)
        assert fault.fired.wait(30), f"write {k} never happened"

        def rolled_back(ns: str = ns) -> bool:
            claims = env.objects("ResourceClaim", ns)
            held = [c for c in claims if ob.allocation(c) or ob.reserved_for(c) or ob.DELETE_PROTECTION_FINALIZER in ob.finalizers(c)]
            return not held and not env.bound_pods(ns)

        wait_for(rolled_back, timeout=2.0, interval=0.05, what=f"the rollback after write {k} failed")
        wait_for(lambda: not solver.engine.reservations.all(), timeout=2.0, what=f"the reservation released after write {k} failed")
        wait_for(lambda ns=ns: len(env.bound_pods(ns)) == 2, timeout=30, what=f"the retry after write {k} failed")
        wait_for(lambda ns=ns: (_condition(env, ns, "train") or {}).get("status") == "True", what="PodGroupInitiallyScheduled=True")
        assert fault.count > k
        fabric = env.get("ResourceClaim", "train-fabric", ns) or {}
        assert [r["resource"] for r in ob.reserved_for(fabric)] == ["podgroups"]
        manager.stop()
        env.managers.remove(manager)


def test_a_podgroup_template_claim_is_made_once_for_the_group_and_reserved_for_it(env: Env) -> None:
    ns = env.kc.namespace("gang")
    _racks(env, [gb.Rack("r1", [gb.Node(), gb.Node()], fabric=1), gb.Rack("r2", [gb.Node(busy=4), gb.Node()], fabric=1)], ns)
    env.create(b.template("gpus-8", ns=ns, count=8))
    env.create(b.claim("rack-fabric", ns=ns, cls=gb.FABRIC_CLASS).request("link").template())
    entry = {"name": "fabric", "resourceClaimTemplateName": "rack-fabric"}
    group = env.create(gb.podgroup("train", 2, ns=ns, key=gb.RACK_LABEL, claims=[entry]))
    env.manager()
    for i in range(2):
        env.create(gb.member(f"train-{i}", "train", gpus_template="gpus-8", shared=[entry], ns=ns))
    wait_for(lambda: len(env.bound_pods(ns)) == 2, timeout=30, what="the gang to be bound")
    assert {n.split("-")[0] for n in env.bound_pods(ns).values()} == {"r1"}

    made = [c for c in env.objects("ResourceClaim", ns) if ob.controller_ref(c) and ob.controller_ref(c)["kind"] == "PodGroup"]
    assert len(made) == 1, [ob.name(c) for c in made]
    fabric = made[0]
    assert ob.name(fabric).startswith("train-fabric-")
    assert ob.controller_ref(fabric)["uid"] == ob.uid(group)
    assert ob.annotations_of(fabric)["resource.kubernetes.io/podgroup-claim-name"] == "fabric"
    assert ob.reserved_for(fabric) == [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": ob.uid(group)}]
    assert ob.allocated_devices(fabric)[0]["pool"] == "r1-fabric"
    recorded = ob.status(env.get("PodGroup", "train", ns) or {}).get("resourceClaimStatuses")
    assert recorded == [{"name": "fabric", "resourceClaimName": ob.name(fabric)}]
    for i in range(2):
        pod = env.pod(f"train-{i}", ns) or {}
        statuses = {s["name"]: s["resourceClaimName"] for s in ob.status(pod).get("resourceClaimStatuses") or []}
        assert statuses["fabric"] == ob.name(fabric)
        assert statuses["gpu"] != ob.name(fabric)
    # No claim from the group's template was made per pod.
    assert sum(1 for c in env.objects("ResourceClaim", ns) if ob.name(c).startswith("train-") and "fabric" in ob.name(c)) == 1


def test_a_deleted_podgroup_releases_its_claims_and_its_template_claim_goes(env: Env) -> None:
    """Upstream's claim controller drops a PodGroup's reservedFor entry once the group is gone;
    without that, the claim made from the group's template (owned by the group, so deleted by
    the garbage collector) would keep its delete-protection finalizer forever."""
    ns = env.kc.namespace("gang")
    _racks(env, [gb.Rack("r1", [gb.Node(), gb.Node()], fabric=2)], ns)
    env.create(b.template("gpus-8", ns=ns, count=8))
    env.create(b.claim("rack-fabric", ns=ns, cls=gb.FABRIC_CLASS).request("link").template())
    env.create(b.claim("train-fabric", ns=ns, cls=gb.FABRIC_CLASS).request("link").obj())
    made_entry = {"name": "made", "resourceClaimTemplateName": "rack-fabric"}
    env.create(gb.podgroup("train", 2, ns=ns, key=gb.RACK_LABEL, claims=[made_entry, FABRIC]))
    env.manager()
    for i in range(2):
        env.create(gb.member(f"train-{i}", "train", gpus_template="gpus-8", shared=[made_entry, FABRIC], ns=ns))
    wait_for(lambda: len(env.bound_pods(ns)) == 2, timeout=30, what="the gang to be bound")
    made = next(ob.name(c) for c in env.objects("ResourceClaim", ns) if (ob.controller_ref(c) or {}).get("kind") == "PodGroup")
    for name in (made, "train-fabric"):
        assert [r["resource"] for r in ob.reserved_for(env.get("ResourceClaim", name, ns) or {})] == ["podgroups"]

    for i in range(2):
        env.delete("Pod", f"train-{i}", ns=ns, force=True)
    env.delete("PodGroup", "train", ns=ns)
    # kcm's podgroup-protection-controller (not run here) lifts this finalizer once no pod uses the group.
    env.kc.request("PATCH", f"{collection('PodGroup', ns)}/train", {"metadata": {"finalizers": None}},
                   content_type="application/merge-patch+json")
    wait_for(lambda: env.get("PodGroup", "train", ns) is None, timeout=20, what="the PodGroup gone")

    def released() -> bool:
        standalone = env.get("ResourceClaim", "train-fabric", ns) or {}
        return not ob.reserved_for(standalone) and ob.allocation(standalone) is None
    wait_for(released, timeout=30, what="the standalone claim's reservation dropped and its devices freed")
    wait_for(lambda: env.get("ResourceClaim", made, ns) is None, timeout=30,
             what="the template claim deleted by the garbage collector, its finalizer lifted")
    assert env.allocated_devices(ns) == [], env.allocated_devices(ns)


def test_a_bind_failing_after_the_first_keeps_the_bound_pod_and_the_retry_binds_the_rest(env: Env) -> None:
    _racks(env, [gb.Rack("r1", [gb.Node(gpus=8), gb.Node(gpus=8)], fabric=2)], b.NS)
    api = env.client("gang-bind", faulty=True)
    assert isinstance(api, FaultyKube)
    binds: list[str] = []

    def second_bind_fails(args: tuple[Any, ...]) -> None:
        binds.append(str(args[1]))
        if len(binds) == 2:
            raise kube.Transient("injected failure of the second bind", status=500)

    api.inject("bind_pod", second_bind_fails, times=1000)
    manager = env.manager("gang-bind", kube_api=api, enable=frozenset({"scheduler"}))
    env.create(b.claim("train-fabric", cls=gb.FABRIC_CLASS).request("link").obj())
    env.create(gb.podgroup("train", 2, key=gb.RACK_LABEL, claims=[FABRIC]))
    for i in range(2):
        env.create(b.claim(f"train-{i}-gpu", cls=b.CLASS).request("gpu", count=8).obj())
        pod = b.pod(f"train-{i}", claims={"gpu": f"train-{i}-gpu", "fabric": "train-fabric"}, cpu="1")
        pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
        env.create(pod)
    wait_for(lambda: len(env.bound_pods()) == 2, timeout=30, what="both pods bound after the retry")
    assert binds[0] != binds[1] and binds[1] == binds[2], binds  # the retry binds the pod whose bind failed, alone
    assert len(binds) == 3
    assert manager.metrics.rollbacks._value.get() == 0  # nothing was undone
    bound = env.bound_pods()
    for i in range(2):
        claim = env.get("ResourceClaim", f"train-{i}-gpu") or {}
        assert {r["pool"] for r in ob.allocated_devices(claim)} == {bound[f"train-{i}"]}
    fabric = env.get("ResourceClaim", "train-fabric") or {}
    assert [r["resource"] for r in ob.reserved_for(fabric)] == ["podgroups"]
    wait_for(lambda: (_condition(env, b.NS, "train") or {}).get("status") == "True", what="PodGroupInitiallyScheduled=True")


def test_a_failed_podgroup_claim_creation_is_said_on_the_podgroup_and_retried(env: Env) -> None:
    ns = env.kc.namespace("gang")
    env.create(b.claim("rack-fabric", ns=ns, cls=gb.FABRIC_CLASS).request("link").template())
    entry = {"name": "fabric", "resourceClaimTemplateName": "rack-fabric"}
    api = env.client("gang-create", faulty=True)
    assert isinstance(api, FaultyKube)
    api.fail("create_claim", kube.Transient(f"create claim in {ns}: etcdserver: request timed out", status=500), times=1)
    env.manager(enable=frozenset({"claim"}), kube_api=api)
    env.create(gb.podgroup("train", 2, ns=ns, claims=[entry]))
    recorded = wait_for(lambda: ob.status(env.get("PodGroup", "train", ns) or {}).get("resourceClaimStatuses"),
                        what="the group's claim made on the retry")
    [event] = wait_for(lambda: env.events("FailedResourceClaimCreation", ns), what="the failure said on the PodGroup")
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"]) == ("PodGroup", "train")
    assert event["message"].startswith("resourceClaims entry fabric: ") and "etcdserver: request timed out" in event["message"]
    made = [c for c in env.objects("ResourceClaim", ns) if ob.name(c).startswith("train-fabric-")]
    assert [ob.name(c) for c in made] == [recorded[0]["resourceClaimName"]]
