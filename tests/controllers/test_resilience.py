"""The controllers survive what a real cluster does to them, on the real kube-apiserver:

- leader election between two ``dra-solver controllers`` processes: the leader is SIGKILLed,
  the standby takes over once the Lease expires, and nothing is done twice;
- watch expiry: etcd is compacted while every component watches; their resumed watches get
  ``410 Gone``, they list again, and the run completes with no device in two claims. The
  watchers are the controllers' informers, the double-allocation checker's and the solver
  service's inventory. The kubelet plugin has none to expire: its claim source GETs each claim
  when the kubelet asks to prepare it, and its slice publisher lists slices when it publishes,
  so a compaction cannot reach them; the test still reads the new claims through the plugin's
  claim source after the compaction;
- kube-apiserver restarted mid-run: every component reconnects, nothing is lost or
  allocated twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.kubeletplugin.claims import KubeClaimSource
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.localcluster.controlplane import ControlPlane, binaries
from tests import builders as b
from tests.controllers.conftest import Env, start_solver, wait_for
from tests.realkube import KubeCluster

ROOT = Path(__file__).resolve().parents[2]
LEASE_DURATION = 3.0
RETRY_PERIOD = 0.25


def _lease_holder(env: Env, name: str) -> str:
    lease = env.get("Lease", name)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _controllers_process(env: Env, identity: str, lease: str, logs: Path) -> subprocess.Popen[bytes]:
    assert env.solver is not None
    args = [
        sys.executable, "-m", "controllers", "--kubeconfig", env.kc.kubeconfig, "--solver", env.solver.target,
        "--leader-elect", "--lease-namespace", b.NS, "--lease-name", lease, "--identity", identity,
        "--lease-duration", str(LEASE_DURATION), "--renew-deadline", "2", "--retry-period", str(RETRY_PERIOD),
        "--metrics-port", "-1", "--log-level", "info",
    ]
    with (logs / f"{identity}.log").open("ab") as out:
        return subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _no_duplicates(env: Env, pods: list[str]) -> None:
    """Each pod: bound, exactly one generated claim (owned by it), one Scheduled event."""
    claims = env.objects("ResourceClaim")
    owners = Counter(ob.owning_pod(c)[1] for c in claims)
    assert all(n == 1 for n in owners.values()), f"a pod got two claims: {owners}"
    assert len(claims) == len(pods)
    scheduled = Counter(e["involvedObject"]["name"] for e in env.events("Scheduled"))
    for name in pods:
        pod = env.pod(name)
        assert pod is not None and ob.pod_node(pod)
        assert owners[ob.uid(pod)] == 1
        assert scheduled[name] == 1, f"pod {name} scheduled {scheduled[name]} times"
    devices = env.allocated_devices()
    assert len(devices) == len(set(devices)) == len(pods)


def test_leader_killed_standby_takes_over_within_the_lease_and_nothing_is_done_twice(env: Env, tmp_path: Path) -> None:
    env.cluster(nodes=2, gpus=4)
    env.create(b.template("one-gpu"))
    checker = env.checker()
    lease = f"dra-solver-{uuid.uuid4().hex[:6]}"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["one"] = _controllers_process(env, "one", lease, tmp_path)
        wait_for(lambda: _lease_holder(env, lease) == "one", timeout=60, what="replica one to lead")
        procs["two"] = _controllers_process(env, "two", lease, tmp_path)
        wait_for(lambda: "held by one; standing by" in (tmp_path / "two.log").read_text(errors="replace"), timeout=60,
                 interval=0.05, what="replica two to stand by")
        before = [f"before-{i}" for i in range(3)]
        for n in before:
            env.create(b.pod(n, templates={"gpu": "one-gpu"}))
        wait_for(lambda: env.bound(*before), timeout=30, what="pods bound by the leader")
        # Its Scheduled events too: they are sent in the background, and a leader killed first
        # loses them (as kube-scheduler would); the check below is that none comes twice.
        wait_for(lambda: {e["involvedObject"]["name"] for e in env.events("Scheduled")} >= set(before), timeout=30,
                 what="the leader's Scheduled events")
        assert _lease_holder(env, lease) == "one"
        assert procs["two"].poll() is None, "the standby keeps running"

        procs["one"].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        procs["one"].wait(10)
        after = [f"after-{i}" for i in range(3)]
        for n in after:
            env.create(b.pod(n, templates={"gpu": "one-gpu"}))
        wait_for(lambda: _lease_holder(env, lease) == "two", timeout=30, interval=0.05, what="replica two to take over")
        takeover = time.monotonic() - killed
        # The standby may take the Lease once it has seen it unrenewed for leaseDuration; it
        # checks every retryPeriod (plus slack for a busy machine).
        assert takeover <= LEASE_DURATION + 4 * RETRY_PERIOD + 2.0, f"took {takeover:.2f}s"
        wait_for(lambda: env.bound(*after), timeout=30, what="pods bound by the new leader")
        wait_for(lambda: {e["involvedObject"]["name"] for e in env.events("Scheduled")} >= set(after), timeout=30,
                 what="the new leader's Scheduled events (posted after the binding)")
        time.sleep(0.5)  # long enough for a duplicate claim or binding to show up, were there one
        _no_duplicates(env, before + after)
        assert not checker.violations, checker.violations[:3]
        lease_obj = env.get("Lease", lease)
        assert lease_obj is not None and lease_obj["spec"]["leaseTransitions"] >= 1
        log_two = (tmp_path / "two.log").read_text(errors="replace")
        assert "Traceback" not in log_two, log_two[-2000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def uncached_control_plane() -> Iterator[ControlPlane]:
    """A control plane of its own whose kube-apiserver serves watches straight from etcd.

    With the watch cache (the default) a resumed watch is served from the apiserver's memory
    and an etcd compaction never reaches the clients; with ``--watch-cache=false`` a watch
    resumed from a compacted revision gets ``410 Gone`` exactly as the compaction dictates.
    """
    cp = ControlPlane(binaries(), extra_apiserver_args=["--watch-cache=false"])
    cp.start()
    yield cp
    cp.stop()


def test_watch_expiry_every_watcher_lists_again_and_nothing_is_allocated_twice(uncached_control_plane: ControlPlane) -> None:
    kc = KubeCluster(uncached_control_plane)
    env = Env(kc, start_solver(kc.kubeconfig, watch_timeout=1))
    try:
        env.cluster(nodes=2, gpus=4)
        env.create(b.template("one-gpu"))
        checker = env.checker(watch_timeout=1)
        manager = env.manager(watch_timeout=1)  # watches end every second and resume from the last version
        first = [f"first-{i}" for i in range(3)]
        for n in first:
            env.create(b.pod(n, templates={"gpu": "one-gpu"}))
        wait_for(lambda: env.bound(*first), timeout=30, what="the first pods bound")
        env.settle()
        # A write nobody watches moves etcd past every watcher's last version; compact there.
        kc.create("/api/v1/namespaces/default/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "marker"}})
        revision = uncached_control_plane.compact_etcd()
        informers = {f"controllers/{name}": i for name, i in manager.cluster.informers.items()}
        informers["checker/resourceclaims"] = checker.informer
        assert env.solver is not None
        informers.update(_solver_informers(env.solver))
        assert any(k.startswith("solver/") for k in informers), "the solver's inventory watches through the shared informers"
        wait_for(lambda: all(i.stats.relists_after_gone >= 1 for i in informers.values()), timeout=30,
                 what="every watcher to get 410 Gone and list again")
        second = [f"second-{i}" for i in range(3)]
        for n in second:
            env.create(b.pod(n, templates={"gpu": "one-gpu"}))
        wait_for(lambda: env.bound(*second), timeout=30, what="the pods created after the compaction bound")
        env.settle()
        _no_duplicates(env, first + second)
        assert not checker.violations, checker.violations[:3]
        assert revision > 0
        # The kubelet plugin's claim source (GET, no watch) reads what was allocated since.
        source = KubeClaimSource(kube.api_client(kubeconfig=kc.kubeconfig))
        for n in second:
            [claim] = env.claims_of(env.pod(n) or {})
            meta = claim["metadata"]
            assert source.get(meta["namespace"], meta["name"], meta["uid"]).allocated, n
        env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 6)
    finally:
        env.stop()


def _solver_informers(solver: Any) -> dict[str, Any]:
    """The informers behind the solver's inventory (its watches on the API server)."""
    informers = getattr(solver.engine.source, "informers", None) or {}
    return {f"solver/{name}": i for name, i in informers.items()}


def test_apiserver_restart_mid_run_every_component_reconnects(env: Env) -> None:
    env.cluster(nodes=2, gpus=4)
    env.create(b.template("one-gpu"))
    checker = env.checker()
    manager = env.manager()
    first = [f"first-{i}" for i in range(3)]
    for n in first:
        env.create(b.pod(n, templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound(*first), timeout=30, what="the first pods bound")
    assert env.solver is not None
    informers = {f"controllers/{name}": i for name, i in manager.cluster.informers.items()}
    informers.update(_solver_informers(env.solver))
    informers["checker/resourceclaims"] = checker.informer
    restarts = {name: i.stats.watch_restarts for name, i in informers.items()}
    env.kc.cp.restart_apiserver(down_for=1.0, crash=True)  # killed: a graceful stop waits out the open watches
    second = [f"second-{i}" for i in range(3)]
    for n in second:
        env.create(b.pod(n, templates={"gpu": "one-gpu"}))
    wait_for(lambda: env.bound(*second), timeout=60, what="the pods created after the restart bound")
    env.settle()
    stale = [name for name, i in informers.items() if i.stats.watch_restarts <= restarts[name]]
    assert not stale, f"watches that never reconnected: {stale}"
    _no_duplicates(env, first + second)
    assert not checker.violations, checker.violations[:3]
    # The solver's inventory reconnected too: it sees every allocation made after the restart.
    env.wait_solver_sees(lambda snap: len(snap.allocated_claims()) == 6)
