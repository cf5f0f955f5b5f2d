"""The controllers' shells against the real kube-apiserver: the ResourceClaim controller's jobs
and its restart safety, leader election between two replicas (and a leader that loses its
Lease stopping), and the command line."""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.controllers.manager import Manager
from dra_solver.service.kubeapi import client as kube
from tests import builders as b
from tests.controllers.conftest import Env, FaultyKube, fast_options, wait_for
from tests.realkube import KubeCluster

ROOT = Path(__file__).resolve().parents[2]
CLAIM_ONLY = frozenset({"claim"})
WRITES = ("create_claim", "update_claim", "update_claim_status", "delete_claim", "patch_pod_status", "bind_pod", "delete_pod", "create_event")
"""The client calls that change the cluster (leases aside)."""


def _claims(env: Env) -> list[str]:
    return sorted(ob.name(c) for c in env.objects("ResourceClaim"))


def _set_status(env: Env, claim: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Write a claim's status as another component would (the status subresource)."""
    body = dict(claim, status=status)
    out: dict[str, Any] = env.kc.request("PUT", f"/apis/resource.k8s.io/v1/namespaces/{b.NS}/resourceclaims/{ob.name(claim)}/status", body)
    return out


def _set_phase(env: Env, name: str, phase: str) -> None:
    env.patch("Pod", name, {"status": {"phase": phase}}, subresource="status")


def _claims_for_web_failing(env: Env, call: str, what: str, *, times: int) -> tuple[FaultyKube, Manager]:
    """The claim controller alone on a client whose ``call`` fails ``times`` times (etcd
    timing out), then pod ``web`` made from template ``tmpl``."""
    faulty = env.client("flaky", faulty=True)
    assert isinstance(faulty, FaultyKube)
    faulty.fail(call, kube.Transient(f"{what}: etcdserver: request timed out", status=500), times=times)
    manager = env.manager(enable=CLAIM_ONLY, kube_api=faulty)
    env.create(b.pod("web", templates={"gpu": "tmpl"}))
    return faulty, manager


def test_claim_created_once_even_when_recording_it_fails(env_no_solver: Env) -> None:
    env = env_no_solver
    env.create(b.template("tmpl", labels={"team": "ml"}))
    faulty, manager = _claims_for_web_failing(env, "patch_pod_status", "patch pod default/web status", times=2)
    wait_for(lambda: ob.status(env.pod("web") or {}).get("resourceClaimStatuses"), what="the claim recorded in the pod status")
    env.settle()
    assert faulty.calls["patch_pod_status"] == 3
    [name] = _claims(env)
    pod = env.pod("web")
    assert pod is not None
    assert pod["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": name}]
    assert manager.metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 1


def test_a_failed_claim_creation_is_said_on_its_owner_and_retried(env_no_solver: Env) -> None:
    env = env_no_solver
    env.create(b.template("tmpl"))
    _, manager = _claims_for_web_failing(env, "create_claim", "create claim in default", times=1)
    wait_for(lambda: ob.status(env.pod("web") or {}).get("resourceClaimStatuses"), what="the claim made on the retry")
    [event] = wait_for(lambda: env.events("FailedResourceClaimCreation"), what="the failure said on the pod")
    assert event["involvedObject"]["name"] == "web" and event["involvedObject"]["kind"] == "Pod"
    assert event["message"].startswith("PodResourceClaim gpu: ") and "etcdserver: request timed out" in event["message"]
    assert len(_claims(env)) == 1
    assert manager.metrics.claim_creates.labels(status="failure", admin_access="false")._value.get() == 1
    assert manager.metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 1


def test_restart_makes_no_duplicates_and_finishes_the_work(env_no_solver: Env) -> None:
    env = env_no_solver
    env.create(b.template("tmpl"))
    first = env.manager("first", enable=CLAIM_ONLY)
    env.create(b.pod("a", templates={"x": "tmpl", "y": "tmpl"}))
    wait_for(lambda: len(_claims(env)) == 2 and len(ob.status(env.pod("a") or {}).get("resourceClaimStatuses") or []) == 2,
             what="pod a's two claims")
    first.stop()
    env.create(b.pod("b", templates={"x": "tmpl"}))
    faulty = env.client("second", faulty=True)
    second = env.manager("second", enable=CLAIM_ONLY, kube_api=faulty)
    wait_for(lambda: len(_claims(env)) == 3, what="pod b's claim")
    env.settle()
    assert len(_claims(env)) == 3
    assert second.metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 1
    assert isinstance(faulty, FaultyKube) and faulty.calls.get("patch_pod_status") == 1, "pod a was left alone"


def test_pod_placed_by_someone_else_gets_its_claim_reserved_and_released(env_no_solver: Env) -> None:
    env = env_no_solver
    claim = env.create(b.ONE_GPU.named("shared").finalizer().obj())
    claim = _set_status(env, claim, b.ONE_GPU.named("shared").allocated("gpu-0", node="node-a").obj()["status"])
    env.manager(enable=CLAIM_ONLY)
    pod = env.create(b.pod("runner", claims={"gpu": "shared"}, node="node-a"))
    _set_phase(env, "runner", "Running")
    wait_for(lambda: ob.reserved_for(env.get("ResourceClaim", "shared") or {}), what="the claim reserved for the pod")
    current = env.get("ResourceClaim", "shared")
    assert current is not None and ob.is_reserved_for_pod(pod, current)
    # The pod finishes: the reservation goes, and as nobody uses the claim any more (and the
    # finalizer says the allocation is ours to clear) it is deallocated and unprotected.
    _set_phase(env, "runner", "Succeeded")

    def released() -> bool:
        c = env.get("ResourceClaim", "shared") or {}
        return not ob.reserved_for(c) and ob.allocation(c) is None and not ob.finalizers(c)

    wait_for(released, what="the claim released")
    assert ob.uid(env.get("ResourceClaim", "shared") or {}) == ob.uid(claim), "a user's claim is never deleted"


def test_an_unallocated_claim_is_reported_only_when_it_stays_so(env_no_solver: Env) -> None:
    """A scheduler allocates and reserves a pod's claim before it binds the pod, but the claim
    change may reach the controller after the pod's: a claim that shows allocated within the
    grace is no warning; one that stays unallocated is reported once the grace is up."""
    env = env_no_solver
    soon = env.create(b.ONE_GPU.named("soon").obj())
    env.create(b.ONE_GPU.named("never").obj())
    manager = env.manager(enable=CLAIM_ONLY, start=False)
    manager.controllers["claim"].unallocated_grace = 3.0
    manager.start()
    pod = env.create(b.pod("fine", claims={"gpu": "soon"}, node="node-a"))
    started = time.monotonic()
    env.create(b.pod("stuck", claims={"gpu": "never"}, node="node-a"))
    time.sleep(1.0)  # both pods seen on their node with the claim not allocated
    _set_status(env, env.get("ResourceClaim", "soon") or soon,
                b.ONE_GPU.named("soon").allocated("gpu-0", node="node-a").reserved_for(pod).obj()["status"])
    [event] = wait_for(lambda: env.events("ResourceClaimNotAllocated"), timeout=20, what="the warning for the stuck pod")
    assert time.monotonic() - started >= 3.0, "reported before the grace was up"
    assert event["involvedObject"]["name"] == "stuck" and "ResourceClaim default/never is not allocated" in event["message"]
    time.sleep(1.0)
    assert [e["involvedObject"]["name"] for e in env.events("ResourceClaimNotAllocated")] == ["stuck"]


def test_generated_claim_of_finished_pod_is_deleted_and_stale_reservation_dropped(env_no_solver: Env) -> None:
    env = env_no_solver
    ghost = b.pod("ghost", uid="0b5e7e1c-0000-4000-8000-000000000000")  # never existed as far as the API server knows
    stale = env.create(b.ONE_GPU.named("stale").finalizer().obj())
    _set_status(env, stale, b.ONE_GPU.named("stale").allocated("gpu-1", node="node-a").reserved_for(ghost).obj()["status"])
    env.create(b.template("tmpl"))
    faulty = env.client("cleanup", faulty=True)
    env.manager(enable=CLAIM_ONLY, kube_api=faulty)
    env.create(b.pod("job", templates={"gpu": "tmpl"}))
    wait_for(lambda: len(_claims(env)) == 2, what="job's claim")
    # The stale reservation is checked with the API server (the pod is not cached) and dropped.
    wait_for(lambda: ob.allocation(env.get("ResourceClaim", "stale") or {}) is None, what="the stale claim deallocated")
    assert isinstance(faulty, FaultyKube) and faulty.calls.get("get_pod", 0) >= 1
    _set_phase(env, "job", "Failed")
    wait_for(lambda: _claims(env) == ["stale"], what="the finished pod's claim deleted")


def test_leader_election_only_the_leader_acts(env: Env) -> None:
    env.cluster(nodes=1, gpus=4)
    env.create(b.template("tmpl"))
    kube_one, kube_two = env.client("one", faulty=True), env.client("two", faulty=True)
    assert isinstance(kube_one, FaultyKube) and isinstance(kube_two, FaultyKube)
    lease_name = f"leader-{uuid.uuid4().hex[:6]}"
    one = env.manager("one", leader_elect=True, lease_namespace=b.NS, lease_name=lease_name, kube_api=kube_one)
    wait_for(lambda: one.leading.is_set(), what="one to lead")
    two = env.manager("two", leader_elect=True, lease_namespace=b.NS, lease_name=lease_name, kube_api=kube_two)
    for i in range(3):
        env.create(b.pod(f"p{i}", templates={"gpu": "tmpl"}))
    wait_for(lambda: env.bound("p0", "p1", "p2"), what="pods bound")
    env.settle()
    assert not two.leading.is_set()
    assert sum(kube_two.calls.get(w, 0) for w in WRITES) == 0, f"the standby wrote: {kube_two.calls}"
    assert kube_one.calls.get("bind_pod") == 3
    lease = env.get("Lease", lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"] == "one"
    # The leader stops cleanly: it releases the Lease and the standby takes over at once.
    one.stop()
    wait_for(lambda: two.leading.is_set(), what="two to take over")
    env.create(b.pod("after", templates={"gpu": "tmpl"}))
    wait_for(lambda: env.bound("after"), what="the new pod bound")
    assert kube_one.calls.get("bind_pod") == 3 and kube_two.calls.get("bind_pod") == 1
    assert two.metrics.leader._value.get() == 1 and one.metrics.leader._value.get() == 0


def test_losing_the_lease_stops_the_controllers(env_no_solver: Env) -> None:
    env = env_no_solver
    lease_name = f"stolen-{uuid.uuid4().hex[:6]}"
    manager = env.manager("solo", enable=CLAIM_ONLY, leader_elect=True, lease_namespace=b.NS, lease_name=lease_name)
    wait_for(lambda: manager.leading.is_set(), what="solo to lead")
    # Someone else writes itself into the Lease (as a replica that believed it expired would):
    # the leader's renewals now fail, and after renewDeadline it must stop acting.
    # The leader renews meanwhile: a write against the Lease it just renewed is refused (409),
    # and the intruder reads it again, as a real one would.
    for _ in range(20):
        lease = env.get("Lease", lease_name)
        assert lease is not None
        lease["spec"]["holderIdentity"] = "intruder"
        lease["spec"]["leaseDurationSeconds"] = 3600
        lease["spec"]["renewTime"] = b.micro_time(time.time())
        try:
            env.replace(lease)
            break
        except urllib.error.HTTPError as err:
            if err.code != 409:
                raise
    else:
        pytest.fail("the Lease could not be taken over in 20 tries")
    assert manager.wait(10), "the manager ends when it cannot renew"
    assert manager.lost_leadership.is_set()
    assert not manager.leading.is_set()


# --- command line -------------------------------------------------------------------------------


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from dra_solver.controllers import cli

    assert cli.main(["--kubeconfig", "/nonexistent", "--enable", "claim,nonsense", "--metrics-port", "-1"]) == 2
    assert "unknown controller(s) nonsense" in capsys.readouterr().err
    assert cli.main(["--kubeconfig", "/nonexistent", "--enable", "scheduler", "--metrics-port", "-1"]) == 2
    assert "--solver ADDRESS is required" in capsys.readouterr().err
    assert cli.main(["--kubeconfig", "/nonexistent", "--enable", "claim", "--metrics-port", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_dra_solver_controllers_help() -> None:
    from dra_solver.cli import build_parser

    parser = build_parser(["controllers"])
    args = parser.parse_args(["controllers", "--kubeconfig", "k", "--solver", "h:1", "--enable", "claim,scheduler"])
    assert args.enable == "claim,scheduler" and args.solver == "h:1"


def test_python_m_controllers_runs_and_stops_on_sigterm(kube_cluster: KubeCluster) -> None:
    cluster = Env(kube_cluster, None)
    cluster.create(b.template("tmpl"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controllers", "--kubeconfig", kube_cluster.kubeconfig, "--enable", "claim", "--metrics-port", "0",
         "--metrics-address", "127.0.0.1", "--log-level", "info"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("metrics=127.0.0.1:"), first
        cluster.create(b.pod("web", templates={"gpu": "tmpl"}))
        wait_for(lambda: len(cluster.objects("ResourceClaim")) == 1, timeout=60, what="the claim created")
        import urllib.request

        def metrics() -> str:
            with urllib.request.urlopen(f"http://{first.strip().split('=', 1)[1]}/metrics", timeout=5) as resp:
                return str(resp.read().decode())

        wait_for(lambda: 'resourceclaim_controller_creates_total{admin_access="false",status="success"} 1.0' in metrics(), timeout=30,
                 what="the metric")
        # The endpoint follows the same conventions as the solver's and the kubelet plugin's.
        from tests import promlint
        from tests.integration.test_metrics_conventions import check_paths

        assert promlint.problems(check_paths(f"http://{first.strip().split('=', 1)[1]}")) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        # Once synced, the caches are left out of the collector's scans (controllers.cli.settle_collector).
        settled = [line for line in proc.stderr.read().splitlines() if "caches synced:" in line]
        assert len(settled) == 1, settled
        assert re.search(r"caches synced: [1-9]\d* objects left out of garbage collection scans", settled[0]), settled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_settled_collector_leaves_what_is_kept_out_of_its_scans() -> None:
    from dra_solver.controllers.cli import settle_collector

    kept = [{"metadata": {"name": f"pod-{i}"}} for i in range(1000)]
    settle_collector()
    try:
        assert gc.get_freeze_count() >= len(kept)
        assert not any(gc.is_tracked(obj) and obj in gc.get_objects(generation=2) for obj in kept[:1])
    finally:
        gc.unfreeze()


def test_manager_gives_up_when_the_api_server_is_unreachable() -> None:
    from dra_solver.controllers.manager import Manager

    dead = kube.Kube(kube.api_client(host="http://127.0.0.1:1"))
    manager = Manager(dead, fast_options(enable=CLAIM_ONLY, sync_timeout=0.5))
    manager.start()
    try:
        assert manager.wait(10)
        assert manager.failure == "caches did not sync within 0.5s: claims, podgroups, pods, templates"
        assert not manager.lost_leadership.is_set()
    finally:
        manager.stop()
