"""The client layer through the real ``kubernetes`` client against the fake API server: every
request kind the controllers make, error mapping, informers (list, watch, 410 Gone relist,
optional resources), the store's assumed writes, the work queue and leader election."""

from __future__ import annotations

import threading
import time

import pytest

from controllers import kube
from controllers import objects as ob
from controllers.informer import Informer, Store
from controllers.leaderelection import ElectionConfig, LeaderElector
from controllers.workqueue import ExponentialBackoff, WorkQueue
from tests.controllers import builders as b
from tests.controllers.conftest import kube_for
from tests.controllers.fake_apiserver import FakeApiServer

# --- requests --------------------------------------------------------------------------------


def test_create_with_generate_name_get_update_and_conflict(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    created = k.create_claim("default", {**b.claim("x"), "metadata": {"generateName": "web-gpu-", "namespace": "default"}})
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
        k.create_claim("default", b.claim(name))


def test_status_subresource_semantics(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    claim = k.create_claim("default", b.claim("c"))
    # A status update changes only the status ...
    body = ob.deep_copy(claim)
    body["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
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


def test_pod_status_strategic_merge_with_uid_precondition(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    pod = fake.create(b.pod("p", templates={"a": "t", "b": "t"}))
    uid = ob.uid(pod)
    k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"resourceClaimStatuses": [{"name": "a", "resourceClaimName": "p-a-1"}]}})
    k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-1"}]}})
    k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"conditions": [{"type": "PodScheduled", "status": "False", "message": "x"}]}})
    patched = k.patch_pod_status("default", "p", {"metadata": {"uid": uid}, "status": {"conditions": [{"type": "PodScheduled", "message": "y"}]}})
    assert patched["status"]["resourceClaimStatuses"] == [{"name": "a", "resourceClaimName": "p-a-1"}, {"name": "b", "resourceClaimName": "p-b-1"}]
    assert patched["status"]["conditions"] == [{"type": "PodScheduled", "status": "False", "message": "y"}]
    assert patched["status"]["phase"] == "Pending"
    with pytest.raises(kube.Conflict, match="Precondition failed"):
        k.patch_pod_status("default", "p", {"metadata": {"uid": "someone-else"}, "status": {"conditions": []}})


def test_binding_and_delete_with_uid_precondition(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    pod = fake.create(b.pod("p"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "uid": ob.uid(pod)}, "target": {"kind": "Node", "name": "node-a"}}
    k.bind_pod("default", "p", binding)
    bound = k.get_pod("default", "p")
    assert ob.pod_node(bound) == "node-a"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()
    with pytest.raises(kube.Conflict, match="already assigned"):
        k.bind_pod("default", "p", binding)
    with pytest.raises(kube.Conflict, match="Precondition failed"):
        k.delete_pod("default", "p", uid="not-this-one")
    k.delete_pod("default", "p", uid=ob.uid(pod))
    with pytest.raises(kube.NotFound):
        k.get_pod("default", "p")


def test_finalizer_blocks_delete_until_removed(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    claim = k.create_claim("default", b.claim("c", finalizer=True))
    k.delete_claim("default", "c", uid=ob.uid(claim))
    pending = k.get_claim("default", "c")
    assert ob.deleting(pending)
    pending["metadata"]["finalizers"] = []
    k.update_claim(pending)
    with pytest.raises(kube.NotFound):
        k.get_claim("default", "c")


def test_error_mapping(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    fake.inject("GET", "/pods/p$", 500)
    with pytest.raises(kube.Transient):
        k.get_pod("default", "p")
    fake.inject("GET", "/pods/p$", 429)
    with pytest.raises(kube.Transient):
        k.get_pod("default", "p")
    fake.inject("GET", "/pods/p$", 422, reason="Invalid")
    with pytest.raises(kube.Invalid):
        k.get_pod("default", "p")
    fake.inject("GET", "/pods/p$", 410)
    with pytest.raises(kube.Gone):
        k.get_pod("default", "p")
    dead = kube.Kube(kube.api_client(host="http://127.0.0.1:1"))
    with pytest.raises(kube.Transient):
        dead.get_pod("default", "p")


def test_events_and_leases(fake: FakeApiServer) -> None:
    k = kube_for(fake)
    event = k.create_event("default", {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "p."}, "reason": "Test", "involvedObject": {"kind": "Pod", "name": "p"}})
    assert ob.name(event).startswith("p.")
    lease = k.create_lease("ns", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    lease["spec"]["holderIdentity"] = "b"
    assert k.update_lease(lease)["spec"]["holderIdentity"] == "b"
    assert k.get_lease("ns", "l")["spec"]["holderIdentity"] == "b"
    with pytest.raises(kube.Conflict):
        k.update_lease(lease)


def test_unsupported_taint_rule_version() -> None:
    with pytest.raises(ValueError, match="v1, v1beta2 or v1alpha3"):
        kube.Kube(None, taint_rule_version="v2")


# --- informers ---------------------------------------------------------------------------------


def _events(informer: Informer) -> list[tuple[str | None, str | None]]:
    seen: list[tuple[str | None, str | None]] = []
    informer.add_handler(lambda old, new: seen.append((ob.name(old) if old else None, ob.name(new) if new else None)))
    return seen


def test_informer_lists_then_watches(fake: FakeApiServer) -> None:
    fake.create(b.pod("a"))
    informer = Informer(kube_for(fake).pods(), watch_timeout=10)
    seen = _events(informer)
    informer.start()
    try:
        assert informer.wait_synced(5)
        fake.create(b.pod("b", ns="other"))
        pod = fake.get("pods", "a", "default")
        assert pod is not None
        pod["metadata"]["labels"] = {"x": "y"}
        fake.put(pod)
        fake.delete("pods", "a", "default")
        fake.wait_for(lambda: len(seen) == 4, timeout=5)
        assert seen == [(None, "a"), (None, "b"), ("a", "a"), ("a", None)]
        assert informer.store.keys() == ["other/b"]
        got = informer.store.get("other/b")
        assert got is not None and got["kind"] == "Pod" and got["apiVersion"] == "v1"
    finally:
        informer.stop()


def test_informer_relists_after_410_gone_and_reports_differences(fake: FakeApiServer) -> None:
    fake.create(b.pod("a"))
    fake.create(b.pod("b"))
    informer = Informer(kube_for(fake).pods(), watch_timeout=10, retry_delay=0.05)
    seen = _events(informer)
    informer.start()
    try:
        assert informer.wait_synced(5)
        # While the watch is down, history is compacted and objects change: the watch resumes
        # from a version that is too old, gets 410, lists again and reports the differences.
        fake.compact()
        fake.delete("pods", "a", "default")
        fake.create(b.pod("c"))
        fake.wait_for(lambda: informer.store.keys() == ["default/b", "default/c"], timeout=10)
        assert informer.stats.relists_after_gone >= 1
        assert (("a", None) in seen) and ((None, "c") in seen)
    finally:
        informer.stop()


def test_optional_resource_not_served_is_empty(fake: FakeApiServer) -> None:
    k = kube.Kube(kube.api_client(host=fake.host), taint_rule_version="v1beta2")
    fake.create(b.taint_rule("r"))
    informer = Informer(k.taint_rules())
    informer.start()
    try:
        assert informer.wait_synced(5)
        assert informer.store.keys() == ["r"]  # served at v1beta2 by the fake
    finally:
        informer.stop()
    missing = Informer(kube.ListSource("things", "Thing", "example.com/v1", lambda **kw: k.rules.list_device_taint_rule(**kw), optional=True))
    fake.inject("GET", "/devicetaintrules$", 404, times=1)
    missing.start()
    try:
        assert missing.wait_synced(5)
        assert not missing.served and missing.store.keys() == []
    finally:
        missing.stop()


def test_store_keeps_own_writes_until_the_watch_catches_up() -> None:
    store = Store()
    store.add_index("ns", lambda o: [ob.namespace(o)])
    old = {**b.claim("c"), "metadata": {**b.claim("c")["metadata"], "resourceVersion": "5"}}
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


# --- work queue --------------------------------------------------------------------------------


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


def _elector(fake: FakeApiServer, identity: str, log: list[str]) -> LeaderElector:
    config = ElectionConfig("kube-system", "test-lease", identity, lease_duration=1.0, renew_deadline=0.8, retry_period=0.1)
    return LeaderElector(
        kube_for(fake, identity), config,
        on_started_leading=lambda: log.append(f"{identity} started"),
        on_stopped_leading=lambda: log.append(f"{identity} stopped"),
    )


def test_leader_election_one_leader_and_handover(fake: FakeApiServer) -> None:
    log: list[str] = []
    a, c = _elector(fake, "a", log), _elector(fake, "c", log)
    a.start()
    fake.wait_for(lambda: a.is_leader, timeout=5)
    c.start()
    time.sleep(0.5)
    assert not c.is_leader
    lease = fake.get("leases", "test-lease", "kube-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseDurationSeconds"] == 1
    a.stop(release=True)  # clean stop: the lease is released, c takes over without waiting
    fake.wait_for(lambda: c.is_leader, timeout=5)
    lease = fake.get("leases", "test-lease", "kube-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == "c" and lease["spec"]["leaseTransitions"] >= 1
    c.stop()
    assert log == ["a started", "a stopped", "c started", "c stopped"]


def test_leader_that_cannot_renew_steps_down_and_expired_lease_is_taken(fake: FakeApiServer) -> None:
    log: list[str] = []
    a = _elector(fake, "a", log)
    a.start()
    fake.wait_for(lambda: a.is_leader, timeout=5)
    fake.inject("PUT", "/leases/test-lease$", 500, times=1000)
    fake.wait_for(lambda: "a stopped" in log, timeout=5)
    assert not a.is_leader
    fake.faults.clear()
    # Nobody renews now: a new candidate takes the lease once it has looked expired for a while.
    c = _elector(fake, "c", log)
    c.start()
    fake.wait_for(lambda: c.is_leader, timeout=5)
    c.stop()
    a.stop()


def test_election_config_is_checked() -> None:
    with pytest.raises(ValueError, match="lease-duration > renew-deadline > retry-period"):
        ElectionConfig("ns", "l", "me", lease_duration=1, renew_deadline=2, retry_period=0.1)
    with pytest.raises(ValueError, match="identity"):
        ElectionConfig("ns", "l", "")
