"""The controllers' shells against the fake API server: the ResourceClaim controller's jobs and
its restart safety, leader election between two replicas, the exact set of API requests
(what RBAC must grant), and the command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controllers import objects as ob
from controllers.rbac_calls import API_CALLS, BY_CONTROLLER
from tests.controllers import builders as b
from tests.controllers.conftest import Env, write_kubeconfig
from tests.controllers.fake_apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]
CLAIM_ONLY = frozenset({"claim"})


def _claims(fake: FakeApiServer) -> list[str]:
    return sorted(ob.name(c) for c in fake.list("resourceclaims"))


def test_claim_created_once_even_when_recording_it_fails(env_no_solver: Env) -> None:
    fake = env_no_solver.fake
    fake.create(b.template("tmpl", labels={"team": "ml"}))
    fault = fake.inject("PATCH", "/pods/web/status$", 500, times=2)
    manager = env_no_solver.manager(enable=CLAIM_ONLY)
    fake.create(b.pod("web", templates={"gpu": "tmpl"}))
    fake.wait_for(lambda: (ob.status(env_no_solver.pod("web") or {}).get("resourceClaimStatuses")), timeout=15)
    env_no_solver.settle()
    assert fault.hits == 2
    [name] = _claims(fake)
    pod = env_no_solver.pod("web")
    assert pod is not None
    assert pod["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": name}]
    assert manager.metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 1


def test_restart_makes_no_duplicates_and_finishes_the_work(env_no_solver: Env) -> None:
    fake = env_no_solver.fake
    fake.create(b.template("tmpl"))
    first = env_no_solver.manager("first", enable=CLAIM_ONLY)
    fake.create(b.pod("a", templates={"x": "tmpl", "y": "tmpl"}))
    fake.wait_for(lambda: len(_claims(fake)) == 2 and len(ob.status(env_no_solver.pod("a") or {}).get("resourceClaimStatuses") or []) == 2, timeout=15)
    first.stop()
    fake.create(b.pod("b", templates={"x": "tmpl"}))
    second = env_no_solver.manager("second", enable=CLAIM_ONLY)
    fake.wait_for(lambda: len(_claims(fake)) == 3, timeout=15)
    env_no_solver.settle()
    assert len(_claims(fake)) == 3
    assert not [r for r in fake.writes(user_agent="dra-solver-controllers/second") if "/pods/a" in r.path or "a-" in r.path]
    assert second.metrics.claim_creates.labels(status="success", admin_access="false")._value.get() == 1


def test_pod_placed_by_someone_else_gets_its_claim_reserved_and_released(env_no_solver: Env) -> None:
    fake = env_no_solver.fake
    claim = fake.create(b.claim("shared", devices=["gpu-0"], finalizer=True))
    env_no_solver.manager(enable=CLAIM_ONLY)
    pod = fake.create(b.pod("runner", claims={"gpu": "shared"}, node="node-a", phase="Running"))
    fake.wait_for(lambda: ob.reserved_for(fake.get("resourceclaims", "shared", b.NS) or {}), timeout=15)
    current = fake.get("resourceclaims", "shared", b.NS)
    assert current is not None and ob.is_reserved_for_pod(pod, current)
    # The pod finishes: the reservation goes, and as nobody uses the claim any more (and the
    # finalizer says the allocation is ours to clear) it is deallocated and unprotected.
    finished = fake.get("pods", "runner", b.NS)
    assert finished is not None
    finished["status"]["phase"] = "Succeeded"
    fake.put(finished)

    def released() -> bool:
        c = fake.get("resourceclaims", "shared", b.NS) or {}
        return not ob.reserved_for(c) and ob.allocation(c) is None and not ob.finalizers(c)

    fake.wait_for(released, timeout=15)
    assert ob.uid(fake.get("resourceclaims", "shared", b.NS) or {}) == ob.uid(claim), "a user's claim is never deleted"


def test_generated_claim_of_finished_pod_is_deleted_and_stale_reservation_dropped(env_no_solver: Env) -> None:
    fake = env_no_solver.fake
    ghost = b.pod("ghost", uid="ghost-uid")  # never existed as far as the API server knows
    fake.create(b.claim("stale", devices=["gpu-1"], reserved=[ghost], finalizer=True))
    fake.create(b.template("tmpl"))
    env_no_solver.manager(enable=CLAIM_ONLY)
    fake.create(b.pod("job", templates={"gpu": "tmpl"}))
    fake.wait_for(lambda: len(_claims(fake)) == 2, timeout=15)
    # The stale reservation is checked with the API server (the pod is not cached) and dropped.
    fake.wait_for(lambda: ob.allocation(fake.get("resourceclaims", "stale", b.NS) or {}) is None, timeout=15)
    assert any(r.method == "GET" and r.path.endswith("/pods/ghost") for r in fake.requests)
    job = fake.get("pods", "job", b.NS)
    assert job is not None
    job["status"]["phase"] = "Failed"
    fake.put(job)
    fake.wait_for(lambda: _claims(fake) == ["stale"], timeout=15)


def test_leader_election_only_the_leader_acts(env: Env) -> None:
    fake = env.fake
    env.cluster(nodes=1, gpus=4)
    fake.create(b.template("tmpl"))
    one = env.manager("one", leader_elect=True, lease_namespace="dra-solver")
    fake.wait_for(lambda: one.leading.is_set(), timeout=10)
    two = env.manager("two", leader_elect=True, lease_namespace="dra-solver")
    for i in range(3):
        fake.create(b.pod(f"p{i}", templates={"gpu": "tmpl"}))
    fake.wait_for(lambda: env.bound("p0", "p1", "p2"), timeout=20)
    env.settle()
    assert not two.leading.is_set()
    acting = {r.user_agent for r in fake.writes() if "/leases/" not in r.path and r.user_agent.startswith("dra-solver-controllers/")}
    assert acting == {"dra-solver-controllers/one"}
    lease = fake.get("leases", "dra-solver-controllers", "dra-solver")
    assert lease is not None and lease["spec"]["holderIdentity"] == "one"
    # The leader stops cleanly: it releases the Lease and the standby takes over at once.
    one.stop()
    fake.wait_for(lambda: two.leading.is_set(), timeout=10)
    fake.create(b.pod("after", templates={"gpu": "tmpl"}))
    fake.wait_for(lambda: env.bound("after"), timeout=20)
    acting_after = {r.user_agent for r in fake.writes() if "/pods/after" in r.path}
    assert acting_after == {"dra-solver-controllers/two"}
    assert two.metrics.leader._value.get() == 1 and one.metrics.leader._value.get() == 0


def test_losing_the_lease_stops_the_controllers(env_no_solver: Env) -> None:
    fake = env_no_solver.fake
    manager = env_no_solver.manager("solo", enable=CLAIM_ONLY, leader_elect=True)
    fake.wait_for(lambda: manager.leading.is_set(), timeout=10)
    fake.inject("PUT", "/leases/", 500, times=10_000)
    assert manager.wait(10), "the manager ends when it cannot renew"
    assert manager.lost_leadership.is_set()
    assert not manager.leading.is_set()


def test_requests_are_exactly_the_declared_rbac(env: Env) -> None:
    """Drive every path of the three controllers and compare the requests the fake API server
    saw with controllers/rbac_calls.py, in both directions."""
    fake = env.fake
    env.cluster(nodes=1, gpus=3)
    fake.create(b.template("tmpl"))
    ghost = b.pod("ghost", uid="ghost-uid")
    fake.create(b.claim("stale", devices=["gpu-2"], node="node-a", reserved=[ghost], finalizer=True))
    fake.inject("PUT", r"/resourceclaims/victim-gpu-[^/]+/status$", 409, times=1)  # the scheduler re-reads the claim
    env.manager("rbac", leader_elect=True)
    fake.create(b.pod("victim", templates={"gpu": "tmpl"}))
    fake.create(b.pod("job", templates={"gpu": "tmpl"}))
    fake.create(b.pod("huge", templates={"gpu": "tmpl"}, cpu="100"))
    fake.wait_for(lambda: env.bound("victim", "job"), timeout=20)
    job = fake.get("pods", "job", b.NS)
    assert job is not None
    job["status"]["phase"] = "Succeeded"
    fake.put(job)
    slice_ = fake.get("resourceslices", "node-a-gpus")
    assert slice_ is not None
    for d in slice_["spec"]["devices"]:
        d["taints"] = [b.taint(time_added=ob.format_time(time.time()))]
    fake.put(slice_)
    fake.wait_for(lambda: env.pod("victim") is None, timeout=20)
    fake.wait_for(lambda: len(_claims(fake)) == 2, timeout=20)  # job's claim deleted, huge's kept
    env.settle()
    seen = fake.calls("dra-solver-controllers/")
    declared = set(API_CALLS)
    assert seen - declared == set(), f"requests not in rbac_calls.py: {sorted(seen - declared)}"
    assert declared - seen == set(), f"declared but never made: {sorted(declared - seen)}"
    union: set[tuple[str, str, str]] = set()
    for calls in BY_CONTROLLER.values():
        union |= calls
    assert union == declared


# --- command line -------------------------------------------------------------------------------


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from controllers import cli

    assert cli.main(["--kubeconfig", "/nonexistent", "--enable", "claim,nonsense", "--metrics-port", "-1"]) == 2
    assert "unknown controller(s) nonsense" in capsys.readouterr().err
    assert cli.main(["--kubeconfig", "/nonexistent", "--enable", "scheduler", "--metrics-port", "-1"]) == 2
    assert "--solver ADDRESS is required" in capsys.readouterr().err
    assert cli.main(["--kubeconfig", "/nonexistent", "--enable", "claim", "--metrics-port", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_dra_solver_controllers_help() -> None:
    from service.cli import build_parser

    parser = build_parser(["controllers"])
    args = parser.parse_args(["controllers", "--kubeconfig", "k", "--solver", "h:1", "--enable", "claim,scheduler"])
    assert args.enable == "claim,scheduler" and args.solver == "h:1"


def test_python_m_controllers_runs_and_stops_on_sigterm(fake: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(fake, tmp_path / "kubeconfig")
    fake.create(b.template("tmpl"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controllers", "--kubeconfig", str(kubeconfig), "--enable", "claim", "--metrics-port", "0",
         "--metrics-address", "127.0.0.1", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("metrics=127.0.0.1:"), first
        fake.create(b.pod("web", templates={"gpu": "tmpl"}))
        fake.wait_for(lambda: len(fake.list("resourceclaims")) == 1, timeout=60)
        import urllib.request

        def metrics() -> str:
            with urllib.request.urlopen(f"http://{first.strip().split('=', 1)[1]}/metrics", timeout=5) as resp:
                return str(resp.read().decode())

        fake.wait_for(lambda: 'resourceclaim_controller_creates_total{admin_access="false",status="success"} 1.0' in metrics(), timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_manager_gives_up_when_the_api_server_is_unreachable() -> None:
    from controllers import kube
    from controllers.manager import Manager
    from tests.controllers.conftest import fast_options

    dead = kube.Kube(kube.api_client(host="http://127.0.0.1:1"))
    manager = Manager(dead, fast_options(enable=CLAIM_ONLY, sync_timeout=0.5))
    manager.start()
    try:
        assert manager.wait(10)
        assert manager.failure == "caches did not sync within 0.5s: claims, pods, templates"
        assert not manager.lost_leadership.is_set()
    finally:
        manager.stop()
