"""controllers/rbac_calls.py is exactly what the controllers ask of the real kube-apiserver.

Every HTTP request the controllers' client sends is recorded (as RBAC sees it: API group,
resource[/subresource], verb) while a scenario drives every path of the three controllers and
leader election; the set must equal ``API_CALLS`` in both directions.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlparse

from dra_solver.controllers import objects as ob
from dra_solver.controllers.rbac_calls import API_CALLS, BY_CONTROLLER
from tests import builders as b
from tests import gang_builders as gb
from tests.controllers.conftest import Env, FaultyKube, wait_for

Call = tuple[str, str, str]


def rbac_call(method: str, url: str) -> Call | None:
    """(apiGroup, resource[/subresource], verb) of a request; None for non-resource URLs."""
    parsed = urlparse(url)
    parts = [p for p in parsed.path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    if not rest:
        return None
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    query = parse_qs(parsed.query)
    verb = {
        "GET": ("watch" if query.get("watch") in (["true"], ["True"]) else "list") if not name else "get",
        "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete" if name else "deletecollection",
    }[method]
    return group, f"{resource}/{sub}" if sub else resource, verb


class Recorder:
    """Every request of one client: reads through urllib3, writes through its own transport."""

    def __init__(self, client: FaultyKube) -> None:
        self.calls: set[Call] = set()
        self._lock = threading.Lock()
        client.api_client.call_api = self._recording(client.api_client.call_api)
        assert client.transport is not None, "writes take the direct transport on this server"
        client.transport.request = self._recording(client.transport.request)  # type: ignore[method-assign]

    def _recording(self, real: Any) -> Any:
        def send(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            call = rbac_call(method, url)
            if call is not None:
                with self._lock:
                    self.calls.add(call)
            return real(method, url, *args, **kwargs)

        return send


def test_requests_are_exactly_the_declared_rbac(env: Env) -> None:
    env.cluster(nodes=1, gpus=3)
    env.create(b.template("tmpl"))
    ghost = b.pod("ghost", uid="0b5e7e1c-0000-4000-8000-000000000001")
    stale = env.create(b.ONE_GPU.named("stale").finalizer().obj())
    env.kc.request("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/stale/status",
                   dict(stale, status=b.ONE_GPU.named("stale").allocated("gpu-2", node="node-a").reserved_for(ghost).obj()["status"]))
    # Reserved for a PodGroup the cache never saw: the claim controller asks the API server.
    ghost_group = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "ghost-group", "uid": "0b5e7e1c-0000-4000-8000-000000000002"}
    orphan = env.create(b.ONE_GPU.named("orphan").finalizer().obj())
    orphan_status = b.ONE_GPU.named("orphan").allocated("gpu-7", node="node-a").obj()["status"]
    env.kc.request("PUT", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/orphan/status",
                   dict(orphan, status={**orphan_status, "reservedFor": [ghost_group]}))
    faulty = env.client("rbac", faulty=True)
    assert isinstance(faulty, FaultyKube)
    recorder = Recorder(faulty)
    bumps: list[str] = []

    def someone_else_writes(args: tuple[Any, ...]) -> None:  # a real 409: the scheduler re-reads the claim
        name = ob.name(args[0])
        if name.startswith("victim-") and not bumps and ob.allocation(args[0]) is not None:
            bumps.append(name)
            env.patch("ResourceClaim", name, {"metadata": {"labels": {"bump": "1"}}})

    faulty.inject("update_claim_status", someone_else_writes, times=1000)
    lease = f"rbac-{uuid.uuid4().hex[:6]}"  # a Lease of its own: creating it is one of the calls
    env.manager("rbac", leader_elect=True, lease_namespace=b.NS, lease_name=lease, kube_api=faulty)
    env.create(b.pod("victim", templates={"gpu": "tmpl"}))
    env.create(b.pod("job", templates={"gpu": "tmpl"}))
    env.create(b.pod("huge", templates={"gpu": "tmpl"}, cpu="100"))
    wait_for(lambda: env.bound("victim", "job"), what="victim and job bound")
    env.patch("Pod", "job", {"status": {"phase": "Succeeded"}}, subresource="status")
    slice_ = env.get("ResourceSlice", "node-a-gpus")
    assert slice_ is not None
    for d in slice_["spec"]["devices"]:
        d["taints"] = [b.taint(time_added=ob.format_time(time.time()))]
    env.replace(slice_)
    wait_for(lambda: ob.deleting(env.pod("victim") or {"metadata": {"deletionTimestamp": "x"}}), what="victim evicted")
    wait_for(lambda: sorted(ob.name(c) for c in env.objects("ResourceClaim") if ob.owning_pod(c)[0] == "job") == [],
             what="job's claim deleted")
    # A gang of one (no claims: the GPUs are taken or tainted): ScheduleGroup, bind, and the
    # PodGroup's PodGroupInitiallyScheduled condition.
    env.create(gb.podgroup("gang", 1))
    env.create(gb.member("gang-0", "gang"))
    wait_for(lambda: env.bound("gang-0"), what="the gang bound")
    wait_for(lambda: (env.get("PodGroup", "gang") or {}).get("status", {}).get("conditions"), what="the PodGroup's condition")
    env.create(b.taint_rule("dry-run", pool="node-a", effect="None"))
    wait_for(lambda: (env.get("DeviceTaintRule", "dry-run") or {}).get("status", {}).get("conditions"), what="the rule's status")
    wait_for(lambda: ob.allocation(env.get("ResourceClaim", "orphan") or {}) is None, what="the ghost PodGroup's claim released")
    env.settle()
    assert bumps, "the scheduler's status write conflicted once"
    seen = recorder.calls
    declared = set(API_CALLS)
    assert seen - declared == set(), f"requests not in rbac_calls.py: {sorted(seen - declared)}"
    assert declared - seen == set(), f"declared but never made: {sorted(declared - seen)}"
    union: set[Call] = set()
    for calls in BY_CONTROLLER.values():
        union |= calls
    assert union == declared


def test_rbac_call_parsing() -> None:
    assert rbac_call("GET", "https://h/api/v1/pods?watch=true&resourceVersion=1") == ("", "pods", "watch")
    assert rbac_call("GET", "https://h/api/v1/namespaces/ns/pods/p") == ("", "pods", "get")
    assert rbac_call("PATCH", "https://h/api/v1/namespaces/ns/pods/p/status") == ("", "pods/status", "patch")
    assert rbac_call("POST", "https://h/api/v1/namespaces/ns/pods/p/binding") == ("", "pods/binding", "create")
    assert rbac_call("PUT", "https://h/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status") == (
        "resource.k8s.io", "resourceclaims/status", "update")
    assert rbac_call("GET", "https://h/apis/resource.k8s.io/v1/resourceslices") == ("resource.k8s.io", "resourceslices", "list")
    assert rbac_call("GET", "https://h/apis/resource.k8s.io/v1") is None
