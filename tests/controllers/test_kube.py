"""The client layer (service/kubeapi) through the real ``kubernetes`` client against the real
kube-apiserver: every request kind the controllers make, error mapping, informers (list,
watch, optional resources), the store's assumed writes, the work queue and leader election.

The only faults not produced by the real server are 5xx and 429 answers: a tiny HTTP responder
(:class:`FaultServer`) gives those, to check they map to :class:`kube.Transient` with the
server's Retry-After. (410 Gone on a resumed watch is produced by the real server in
test_resilience.py.)"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.controllers.manager import Options
from dra_solver.controllers.metrics import ControllerMetrics
from dra_solver.controllers.runtime import new_queue
from dra_solver.controllers.workqueue import ExponentialBackoff, WorkQueue
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi.informer import Informer, Store, without_managed_fields
from dra_solver.service.kubeapi.leaderelection import ElectionConfig, LeaderElector
from tests import builders as b
from tests.controllers.conftest import Env, FaultServer, wait_for
from tests.realkube import KubeCluster


@pytest.fixture
def cluster(kube_cluster: KubeCluster) -> Env:
    return Env(kube_cluster, None)


def _kube(cluster: Env, identity: str = "test", **kw: Any) -> kube.Kube:
    return cluster.client(identity, **kw)


# --- requests --------------------------------------------------------------------------------


def test_create_with_generate_name_get_update_and_conflict(cluster: Env) -> None:
    k = _kube(cluster)
    created = k.create_claim("default", {**b.ONE_GPU.named("x").obj(), "metadata": {"generateName": "web-gpu-", "namespace": "default"}})
    name = ob.name(created)
    assert name.startswith("web-gpu-") and len(name) == len("web-gpu-") + 5
    assert ob.uid(created) and ob.resource_version(created)
    got = k.get_claim("default", name)
    assert got["apiVersion"] == "resource.k8s.io/v1" and got["kind"] == "ResourceClaim"
    got["metadata"]["finalizers"] = [ob.DELETE_PROTECTION_FINALIZER]
    updated = k.update_claim(got)
    assert ob.finalizers(updated) == [ob.DELETE_PROTECTION_FINALIZER]
    with pytest.raises(kube.Conflict, match="has been modified"):
        k.update_claim(got)  # stale resourceVersion
    with pytest.raises(kube.NotFound):
        k.get_claim("default", "nope")
    with pytest.raises(kube.Conflict, match="already exists"):
        k.create_claim("default", b.ONE_GPU.named(name).obj())
    with pytest.raises(kube.Invalid, match="count"):
        k.create_claim("default", b.claim("bad", cls=b.CLASS, driver=b.DRIVER).request("gpu", count=-1).obj())


def test_an_update_without_managed_fields_leaves_the_servers_unchanged(cluster: Env) -> None:
    """What the store keeps (no managed fields) is written back as it is: the server keeps the
    field ownership it had and records the update."""
    k = _kube(cluster)
    created = k.create_claim("default", b.ONE_GPU.named("owned").obj())
    before = [e["manager"] for e in ob.meta(created).get("managedFields") or []]
    assert before
    bare = without_managed_fields(copy.deepcopy(created))
    bare["metadata"]["labels"] = {"team": "a"}
    k.update_claim(bare)
    after = ob.meta(k.get_claim("default", "owned")).get("managedFields") or []
    assert [e["manager"] for e in after][: len(before)] == before
    assert any("f:labels" in (e.get("fieldsV1") or {}).get("f:metadata", {}) for e in after)


def test_status_subresource_semantics(cluster: Env) -> None:
    k = _kube(cluster)
    claim = k.create_claim("default", b.ONE_GPU.named("c").obj())
    # A status update changes only the status ...
    body = ob.deep_copy(claim)
    pod = {"metadata": {"name": "p", "uid": str(uuid.uuid4())}}
    body["status"] = b.ONE_GPU.named("c").allocated("gpu-0", node="node-a").reserved_for(pod).obj()["status"]
    body["metadata"]["labels"] = {"ignored": "yes"}
    after_status = k.update_claim_status(body)
    assert after_status["status"]["reservedFor"][0]["name"] == "p"
    assert "labels" not in after_status["metadata"]
    # ... and a main-resource update never touches it.
    body = ob.deep_copy(after_status)
    body["status"] = {}
    body["metadata"]["labels"] = {"kept": "yes"}
    after_main = k.update_claim(body)
    assert after_main["metadata"]["labels"] == {"kept": "yes"}
    assert after_main["status"]["reservedFor"][0]["name"] == "p"


def test_pod_status_strategic_merge_with_uid_precondition(cluster: Env) -> None:
    k = _kube(cluster)
    pod = cluster.create(b.pod("p", templates={"a": "t", "b": "t"}))
    uid = ob.uid(pod)
    k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"resourceClaimStatuses": [{"name": "a", "resourceClaimName": "p-a-1"}]}})
    k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-1"}]}})
    k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"conditions": [{"type": "PodScheduled", "status": "False", "message": "x"}]}})
    patched = k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"conditions": [{"type": "PodScheduled", "message": "y"}]}})
    # Merged by name (the server puts the newer entry first): both kept.
    assert sorted(patched["status"]["resourceClaimStatuses"], key=lambda e: e["name"]) == [
        {"name": "a", "resourceClaimName": "p-a-1"}, {"name": "b", "resourceClaimName": "p-b-1"}]
    assert [(c["type"], c["status"], c["message"]) for c in patched["status"]["conditions"]] == [("PodScheduled", "False", "y")]
    assert patched["status"]["phase"] == "Pending"
    # The UID in the patch guards against a pod re-created under the same name: the API server
    # refuses to change it (422), so the patch never lands on the wrong pod.
    with pytest.raises(kube.Invalid, match=r"metadata\.uid: Invalid value"):
        k.patch_pod_status("default", "p", {"metadata": {"uid": str(uuid.uuid4())}, "status": {"conditions": []}})


def test_binding_and_delete_with_uid_precondition(cluster: Env) -> None:
    k = _kube(cluster)
    pod = cluster.create(b.pod("p"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "uid": ob.uid(pod)}, "target": {"kind": "Node", "name": "node-a"}}
    k.bind_pod("default", "p", binding)
    bound = k.get_pod("default", "p")
    assert ob.pod_node(bound) == "node-a"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()
    with pytest.raises(kube.Conflict, match="already assigned"):
        k.bind_pod("default", "p", binding)
    with pytest.raises(kube.Conflict, match="UID in the precondition"):
        k.delete_pod("default", "p", uid=str(uuid.uuid4()))
    k.delete_pod("default", "p", uid=ob.uid(pod))
    # Bound to a node: a graceful delete, which the (absent) kubelet would finish.
    assert ob.deleting(k.get_pod("default", "p"))


def test_finalizer_blocks_delete_until_removed(cluster: Env) -> None:
    k = _kube(cluster)
    claim = k.create_claim("default", b.ONE_GPU.named("c").finalizer().obj())
    k.delete_claim("default", "c", uid=ob.uid(claim))
    pending = k.get_claim("default", "c")
    assert ob.deleting(pending)
    pending["metadata"]["finalizers"] = []
    k.update_claim(pending)
    with pytest.raises(kube.NotFound):
        k.get_claim("default", "c")


@pytest.fixture
def faults() -> Iterator[FaultServer]:
    server = FaultServer()
    yield server
    server.stop()


def test_the_connection_pool_holds_every_worker_at_once(cluster: Env, caplog: pytest.LogCaptureFixture) -> None:
    # Every worker and binder waits on its own request; a pool smaller than that discards a
    # connection after each request beyond it, and the next request handshakes TLS again.
    options = Options(scheduler_binders=100)
    api = kube.api_client(kubeconfig=cluster.kc.kubeconfig, user_agent="dra-solver-controllers/pool", connections=options.connections())
    k = kube.Kube(api)
    at_once = options.scheduler_binders + options.scheduler_workers
    ready = threading.Barrier(at_once)
    errors: list[BaseException] = []

    def request() -> None:
        ready.wait()
        try:
            # A watch the server ends after a second holds its connection that long, so every
            # request overlaps every other one however slowly the threads start (a plain read
            # could finish before the last thread sends, and reuse a connection).
            response = k.core.list_namespace(watch=True, timeout_seconds=1, field_selector="metadata.name=default",
                                             _preload_content=False)
            response.read()
            response.release_conn()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=request) for _ in range(at_once)]
    with caplog.at_level("WARNING", logger="urllib3.connectionpool"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
    pools = api.rest_client.pool_manager.pools
    pool = pools[next(iter(pools.keys()))]
    assert pool.num_connections == at_once, "every request held its own connection"


def test_error_mapping(faults: FaultServer) -> None:
    k = kube.Kube(kube.api_client(host=faults.host))
    faults.answers.append((500, {}))
    with pytest.raises(kube.Transient, match="injected") as err:
        k.get_pod("default", "p")
    assert err.value.status == 500 and err.value.delay == 0
    # (An answer with Retry-After is retried by urllib3 itself before it reaches us.)
    faults.answers.append((429, {}))
    with pytest.raises(kube.Transient) as throttled:
        k.get_pod("default", "p")
    assert throttled.value.status == 429
    faults.answers.append((503, {}))
    with pytest.raises(kube.Transient):
        k.get_pod("default", "p")
    assert faults.requests == ["/api/v1/namespaces/default/pods/p"] * 3
    dead = kube.Kube(kube.api_client(host="http://127.0.0.1:1"))
    with pytest.raises(kube.Transient):
        dead.get_pod("default", "p")


def test_real_server_errors_map_to_the_hierarchy(cluster: Env) -> None:
    k = _kube(cluster)
    with pytest.raises(kube.NotFound, match='pods "nope" not found'):
        k.get_pod("default", "nope")
    with pytest.raises(kube.Invalid) as invalid:
        k.create_claim("default", b.ONE_GPU.named("Not_A_Name").obj())
    assert invalid.value.status == 422 and invalid.value.reason == "Invalid"


def test_events_and_leases(cluster: Env) -> None:
    k = _kube(cluster)
    event = k.create_event("default", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "p.", "namespace": "default"}, "reason": "Test",
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "type": "Normal", "message": "m",
        "source": {"component": "test"},
    })
    assert ob.name(event).startswith("p.")
    name = f"l-{uuid.uuid4().hex[:6]}"
    lease = k.create_lease("default", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
                                       "spec": {"holderIdentity": "a"}})
    lease["spec"]["holderIdentity"] = "b"
    assert k.update_lease(lease)["spec"]["holderIdentity"] == "b"
    assert k.get_lease("default", name)["spec"]["holderIdentity"] == "b"
    with pytest.raises(kube.Conflict):
        k.update_lease(lease)


def test_unsupported_taint_rule_version() -> None:
    with pytest.raises(ValueError, match="v1, v1beta2 or v1alpha3"):
        kube.Kube(None, taint_rule_version="v2")


# --- informers ---------------------------------------------------------------------------------


def _events(informer: Informer, names: set[str]) -> list[tuple[str | None, str | None]]:
    seen: list[tuple[str | None, str | None]] = []

    def record(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if ob.name(new or old or {}) in names:
            seen.append((ob.name(old) if old else None, ob.name(new) if new else None))

    informer.add_handler(record)
    return seen


def test_informer_lists_then_watches(cluster: Env) -> None:
    cluster.create(b.pod("a"))
    other = cluster.kc.namespace("other")
    informer = Informer(_kube(cluster).pods(), watch_timeout=10)
    seen = _events(informer, {"a", "b"})
    informer.start()
    try:
        assert informer.wait_synced(10)
        cluster.create(b.pod("b", ns=other))
        cluster.patch("Pod", "a", {"metadata": {"labels": {"x": "y"}}})
        cluster.delete("Pod", "a")  # not on a node: deleted at once
        wait_for(lambda: seen and seen[-1] == ("a", None), what="a's deletion")
        assert seen[:3] == [(None, "a"), (None, "b"), ("a", "a")], seen
        assert set(seen[3:]) <= {("a", "a"), ("a", None)}, seen  # the deletion may first set deletionTimestamp
        keys = informer.store.keys()
        assert f"{other}/b" in keys and "default/a" not in keys
        got = informer.store.get(f"{other}/b")
        assert got is not None and got["kind"] == "Pod" and got["apiVersion"] == "v1"
    finally:
        informer.stop()


def test_relist_reports_the_differences() -> None:
    """After 410 Gone the informer lists again; what changed meanwhile reaches the handlers."""
    store = Store()
    a, b_ = b.pod("a"), b.pod("b")
    for i, pod in enumerate((a, b_)):
        pod["metadata"]["resourceVersion"] = str(i + 1)
        store._apply("ADDED", pod)
    c = b.pod("c")
    c["metadata"]["resourceVersion"] = "5"
    changes = store._replace([b_, c])
    assert [(ob.name(o) if o else None, ob.name(n) if n else None) for o, n in changes] == [("a", None), (None, "c")]


def test_optional_resource_not_served_is_empty(cluster: Env) -> None:
    cluster.create(b.taint_rule("r"))
    served = Informer(_kube(cluster).taint_rules())
    served.start()
    try:
        assert served.wait_synced(10)
        assert served.served and served.store.keys() == ["r"]  # resource.k8s.io/v1 in v1.37
    finally:
        served.stop()
    # v1alpha3 is not served by a default v1.37 API server: an empty cache, not an error.
    missing = Informer(_kube(cluster, taint_rule_version="v1alpha3").taint_rules())
    missing.start()
    try:
        assert missing.wait_synced(10)
        assert not missing.served and missing.store.keys() == []
    finally:
        missing.stop()


def test_store_keeps_own_writes_until_the_watch_catches_up() -> None:
    store = Store()
    store.add_index("ns", lambda o: [ob.namespace(o)])
    old = {**b.ONE_GPU.named("c").obj(), "metadata": {**b.ONE_GPU.named("c").obj()["metadata"], "resourceVersion": "5"}}
    store._apply("ADDED", old)
    newer = {**old, "metadata": {**old["metadata"], "resourceVersion": "9"}, "status": {"x": 1}}
    store.assume(newer)
    assert store.get("default/c") == newer
    store._apply("MODIFIED", {**old, "metadata": {**old["metadata"], "resourceVersion": "7"}})
    assert store.get("default/c") == newer, "an older event does not hide our write"
    store._apply("MODIFIED", newer)
    assert store.get("default/c") == newer and not store._assumed
    assert [ob.name(o) for o in store.by_index("ns", "default")] == ["c"]
    store._apply("DELETED", {**newer, "metadata": {**newer["metadata"], "resourceVersion": "11"}})
    store.assume(newer)
    assert store.get("default/c") is None, "a deleted object is not brought back by a late assume"
    assert store.by_index("ns", "default") == []


def test_store_listing_follows_every_change_and_is_the_callers_own() -> None:
    store = Store()

    def node(name: str, rv: int, **labels: str) -> dict[str, Any]:
        return {"kind": "Node", "metadata": {"name": name, "resourceVersion": str(rv), "labels": labels}}

    def listed() -> list[tuple[str, str]]:
        return [(ob.name(o), ob.resource_version(o)) for o in store.objects()]

    store._apply("ADDED", node("b", 1))
    store._apply("ADDED", node("a", 2))
    assert listed() == [("a", "2"), ("b", "1")]
    store.by_key().clear()  # also the caller's own
    assert [(k, ob.resource_version(o)) for k, o in store.by_key().items()] == [("a", "2"), ("b", "1")]
    store.objects().clear()  # a caller's list: the next listing is whole
    assert listed() == [("a", "2"), ("b", "1")]
    store.assume(node("a", 5, x="y"))
    assert listed() == [("a", "5"), ("b", "1")]
    store.forget_assumed("a")
    assert listed() == [("a", "2"), ("b", "1")]
    store._apply("MODIFIED", node("b", 6))
    assert listed() == [("a", "2"), ("b", "6")]
    store._apply("DELETED", node("a", 7))
    assert listed() == [("b", "6")]
    store._replace([node("c", 8)])
    assert listed() == [("c", "8")]
    assert list(store.by_key()) == ["c"]


# --- work queue --------------------------------------------------------------------------------


def test_a_queue_reports_its_depth_and_waits_under_its_name() -> None:
    metrics = ControllerMetrics()
    queue, other = new_queue("claims", metrics), new_queue("pods", metrics)
    queue.add("ns/a")
    queue.add("ns/b")
    other.add("ns/c")

    def sample(metric: str, name: str) -> float | None:
        return metrics.registry.get_sample_value(metric, {"name": name})

    assert (sample("workqueue_depth", "claims"), sample("workqueue_depth", "pods")) == (2, 1)
    assert queue.get(timeout=1) == "ns/a"
    assert sample("workqueue_queue_duration_seconds_count", "claims") == 1
    assert sample("workqueue_queue_duration_seconds_count", "pods") == 0  # its series exists from the start


def test_queue_dedupes_and_never_hands_out_a_key_twice() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get(0) == "a"
    q.add("a")  # while processing: not handed out again until done
    assert q.get(0) == "b"
    assert q.get(0) is None
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    q.done("b")
    assert q.idle()


def test_queue_reports_how_long_a_key_waited() -> None:
    now = [0.0]
    waits: list[float] = []
    q: WorkQueue[str] = WorkQueue("t", clock=lambda: now[0], on_wait=waits.append)
    q.add("a")
    now[0] = 2.0
    q.add("a")  # already queued: the wait counts from the first add
    now[0] = 3.0
    assert q.get(0) == "a"
    q.add("a")  # while processing: queued again at done
    now[0] = 4.0
    q.done("a")
    now[0] = 4.5
    assert q.get(0) == "a"
    assert waits == [3.0, 0.5]


def test_queue_delays_and_backoff() -> None:
    now = [0.0]
    q: WorkQueue[str] = WorkQueue("t", backoff=ExponentialBackoff(base=1.0, cap=4.0), clock=lambda: now[0])
    q.add_after("x", 5.0)
    assert q.get(0) is None
    now[0] = 5.0
    assert q.get(0) == "x"
    q.done("x")
    assert [q.backoff.when("y") for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    q.forget("y")
    assert q.backoff.when("y") == 1.0
    q.shutdown()
    assert q.get() is None


def test_an_event_about_a_failing_key_waits_out_its_backoff() -> None:
    now = [0.0]
    q: WorkQueue[str] = WorkQueue("t", backoff=ExponentialBackoff(base=1.0, cap=4.0), clock=lambda: now[0])
    q.add_unless_backing_off("ok")  # never failed: at once
    assert q.get(0) == "ok"
    q.done("ok")
    for delay in (1.0, 2.0):  # a sync fails, and its own writes raise an event about the key
        q.add_rate_limited("x")
        q.add_unless_backing_off("x")
        now[0] += delay - 0.01
        assert q.get(0) is None, "retried before its backoff"
        now[0] += 0.01
        assert q.get(0) == "x"
        q.done("x")
        assert q.get(0) is None, "the retry and the event ran it twice"
    q.forget("x")  # a success: events run it at once again
    q.add_unless_backing_off("x")
    assert q.get(0) == "x"


def test_queue_wakes_a_waiting_worker() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get(5)))
    t.start()
    time.sleep(0.05)
    q.add_after("k", 0.05)
    t.join(5)
    assert got == ["k"]


# --- leader election ----------------------------------------------------------------------------


def _elector(cluster: Env, lease: str, identity: str, log: list[str]) -> LeaderElector:
    config = ElectionConfig("default", lease, identity, lease_duration=1.0, renew_deadline=0.8, retry_period=0.1)
    return LeaderElector(
        _kube(cluster, identity), config,
        on_started_leading=lambda: log.append(f"{identity} started"),
        on_stopped_leading=lambda: log.append(f"{identity} stopped"),
    )


def test_leader_election_one_leader_and_handover(cluster: Env) -> None:
    log: list[str] = []
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a, c = _elector(cluster, name, "a", log), _elector(cluster, name, "c", log)
    a.start()
    wait_for(lambda: a.is_leader, what="a to lead")
    c.start()
    time.sleep(0.5)  # several of c's retry periods: it must stay a standby while a renews
    assert not c.is_leader
    lease = cluster.get("Lease", name)
    assert lease is not None and lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 1
    a.stop(release=True)  # clean stop: the lease is released, c takes over without waiting
    wait_for(lambda: c.is_leader, what="c to take over")
    lease = cluster.get("Lease", name)
    assert lease is not None and lease["spec"]["holderIdentity"] == "c" and lease["spec"]["leaseTransitions"] >= 1
    c.stop()
    assert log == ["a started", "a stopped", "c started", "c stopped"]


def test_leader_that_cannot_renew_steps_down_and_expired_lease_is_taken(cluster: Env) -> None:
    log: list[str] = []
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a = _elector(cluster, name, "a", log)
    a.start()
    wait_for(lambda: a.is_leader, what="a to lead")
    lease = cluster.get("Lease", name)
    assert lease is not None
    lease["spec"]["holderIdentity"] = "intruder"
    lease["spec"]["renewTime"] = b.micro_time(time.time())
    cluster.replace(lease)
    wait_for(lambda: "a stopped" in log, what="a to step down")
    assert not a.is_leader
    # The intruder never renews: a new candidate takes the lease once it has looked expired.
    c = _elector(cluster, name, "c", log)
    c.start()
    wait_for(lambda: c.is_leader, what="c to take the expired lease")
    c.stop()
    a.stop()


def test_election_config_is_checked() -> None:
    with pytest.raises(ValueError, match="lease-duration > renew-deadline > retry-period"):
        ElectionConfig("ns", "l", "me", lease_duration=1, renew_deadline=2, retry_period=0.1)
    with pytest.raises(ValueError, match="identity"):
        ElectionConfig("ns", "l", "")


def test_watch_events_are_decoded_once_and_keep_what_the_client_resumes_from() -> None:
    watch = kube.json_watch()
    event = watch.unmarshal_event('{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"7"}}}', "object")
    assert event is not None and event["raw_object"] is event["object"]  # no model, no second decode
    assert event["object"]["metadata"]["name"] == "a" and watch.resource_version == "7"
    bookmark = watch.unmarshal_event('{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}', "object")
    assert bookmark is not None and watch.resource_version == "9"
    # The client reads an ERROR's code from raw_object (410 Gone: list again); no version taken.
    error = watch.unmarshal_event('{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}', "object")
    assert error is not None and error["raw_object"]["code"] == 410 and watch.resource_version == "9"
    assert watch.unmarshal_event("  ", "object") is None and watch.unmarshal_event("{not json", "object") is None


def test_the_store_keeps_objects_without_their_managed_fields() -> None:
    store = Store()
    fields = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {}}}]
    seen = {"kind": "Node", "metadata": {"name": "a", "resourceVersion": "1", "managedFields": fields}}
    mine = {"kind": "Node", "metadata": {"name": "a", "resourceVersion": "2", "managedFields": fields}}
    store._apply("ADDED", seen)
    assert "managedFields" not in (store.get("a") or {})["metadata"]
    store.assume(mine)
    got = store.get("a") or {}
    assert ob.resource_version(got) == "2" and "managedFields" not in got["metadata"]
