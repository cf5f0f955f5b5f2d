"""``dra-solver explain pod/NAME`` and ``compare pod/NAME`` against the real kube-apiserver.

The objects are created directly (no controllers run): four nodes, two of them with GPUs the
pod's node selector picks, one tainted, one with the wrong label; a claim holding both GPUs of
worker-1; a pod whose claim comes from a template the claim controller has not used yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_solver import cli
from tests import builders as b
from tests.realkube import KubeCluster

RESOURCE = "/apis/resource.k8s.io/v1"
CLAIM_STATUS = {"allocation": {"devices": {"results": [
    {"request": "gpu", "driver": b.DRIVER, "pool": "worker-1", "device": "gpu-0"},
    {"request": "gpu", "driver": b.DRIVER, "pool": "worker-1", "device": "gpu-1"},
]}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
    {"key": "metadata.name", "operator": "In", "values": ["worker-1"]}]}]}}}


def make_cluster(kube: KubeCluster, *, gpus_per_pod: int) -> str:
    ns = kube.namespace("explain")
    kube.create(f"{RESOURCE}/deviceclasses", b.device_class())
    for name, labels in (("worker-1", {"gpu": "yes"}), ("worker-2", {"gpu": "yes"}),
                         ("worker-3", {"gpu": "yes"}), ("worker-4", {"gpu": "no"})):
        kube.node(name, labels=labels)
        kube.create(f"{RESOURCE}/resourceslices", b.gpu_slice(name, count=2))
    kube.request("PATCH", "/api/v1/nodes/worker-3", {"spec": {"taints": [{"key": "gpu", "value": "broken", "effect": "NoSchedule"}]}},
                 content_type="application/merge-patch+json")
    holder = b.ONE_GPU.named("holder", ns=ns).obj()
    holder["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", holder)
    current = kube.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/holder")
    current["status"] = CLAIM_STATUS
    kube.request("PUT", f"{RESOURCE}/namespaces/{ns}/resourceclaims/holder/status", current)
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", b.template("gpus", ns=ns, count=gpus_per_pod))
    kube.create(f"/api/v1/namespaces/{ns}/pods", b.pod("train-0", ns=ns, templates={"gpus": "gpus"}, node_selector={"gpu": "yes"}))
    return ns


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_a_pending_pod_per_candidate_node(kube_cluster: KubeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    ns = make_cluster(kube_cluster, gpus_per_pod=2)
    code, out, err = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "pod/train-0")
    assert code == 0, err  # worker-2 has two free GPUs
    lines = out.splitlines()
    assert lines[0] == f"pod {ns}/train-0: 1 claim to allocate: {ns}/train-0-gpus"
    assert f"claim {ns}/train-0-gpus: not created yet; as ResourceClaimTemplate gpus will make it" in lines[1]
    assert "the claims fit on 1 of 4 nodes: worker-2" in out
    assert "node worker-3: node(s) had untolerated taint {gpu: broken}" in out
    assert "node worker-4: node(s) didn't match Pod's node affinity/selector" in out
    assert f"node worker-1: the claims do not fit: device gpu.example.com/worker-1/gpu-0 is in use by claim {ns}/holder" in out
    assert "node worker-2: the claims fit; nothing blocks them." in out

    # --node: one candidate; -o json: the same answer for scripts.
    code, out, _ = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "--node", "worker-1", "-o", "json", "pod/train-0")
    doc = json.loads(out)
    assert code == 1 and doc["fits"] == [] and doc["claims"] == [f"{ns}/train-0-gpus"]
    (group,) = doc["explained"]
    assert group["nodes"] == ["worker-1"] and [r["kind"] for r in group["answer"]["fixes"]] == ["in-use", "in-use"]
    assert doc["nodes"]["filtered"] == {"worker-3": "node(s) had untolerated taint {gpu: broken}",
                                        "worker-4": "node(s) didn't match Pod's node affinity/selector"}
    # --node the scheduler would not consider: its reason, and "does not fit".
    code, out, _ = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "--node", "worker-3", "pod/train-0")
    assert code == 1 and out.splitlines()[2] == "node worker-3: node(s) had untolerated taint {gpu: broken}"


def test_explain_a_pod_that_fits_nowhere_says_so_like_the_scheduler(kube_cluster: KubeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    ns = make_cluster(kube_cluster, gpus_per_pod=3)
    code, out, err = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "pod/train-0")
    assert code == 1, err
    assert ("0/4 nodes are available: 2 cannot allocate all claims, 1 node(s) didn't match Pod's node affinity/selector, "
            "1 node(s) had untolerated taint {gpu: broken}.") in out
    # worker-2: three GPUs asked of a node with two; nothing to change on the node helps.
    assert "node worker-2: the claims do not fit: claim " in out
    assert "no change makes them fit on this node" in out
    assert "deadline reached" not in out


def test_explain_a_claim_and_the_errors(kube_cluster: KubeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    ns = make_cluster(kube_cluster, gpus_per_pod=1)
    code, out, _ = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "resourceclaim/holder")
    assert code == 0 and f"claim {ns}/holder: allocated already" in out
    kube_cluster.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", b.ONE_GPU.named("one", ns=ns).obj())
    code, out, err = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "resourceclaim/one")
    assert code == 0, err  # a claim alone: every node is a candidate (no pod to select or tolerate)
    assert out.splitlines()[:2] == [f"resourceclaim {ns}/one: 1 claim to allocate: {ns}/one",
                                    "the claims fit on 3 of 4 nodes: worker-2, worker-3, worker-4"]
    assert f"node worker-1: the claims do not fit: device gpu.example.com/worker-1/gpu-0 is in use by claim {ns}/holder" in out
    code, _, err = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "pod/nope")
    assert code == 2 and err.startswith("error: get pod ") and "not found" in err
    code, _, err = _main(capsys, "explain", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "--node", "worker-9", "pod/train-0")
    assert code == 2 and 'error: --node: Not found: "worker-9"' in err


def test_compare_a_pending_pod_with_upstreams_allocator(kube_cluster: KubeCluster, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ns = make_cluster(kube_cluster, gpus_per_pod=2)
    report = tmp_path / "report.html"
    code, out, err = _main(capsys, "compare", "--kubeconfig", kube_cluster.kubeconfig, "-n", ns, "--upstream", "on", "-o", "json",
                           "--quiet", "--report", str(report), "pod/train-0")
    assert code == 0 and err == f"report written to {report}\n"
    assert "pod/train-0" in report.read_text()
    doc: dict[str, Any] = json.loads(out)
    rows = {r["node"]: r for r in doc["rows"]}
    assert sorted(rows) == ["worker-1", "worker-2"]
    assert {rows["worker-1"][side]["verdict"] for side in ("cpsat", "backtracking", "upstream")} == {"unsatisfiable"}
    two = rows["worker-2"]
    assert two["agree"] and two["upstream"]["devices"] == [
        f"{ns}/train-0-gpus/gpu=gpu.example.com/worker-2/gpu-0", f"{ns}/train-0-gpus/gpu=gpu.example.com/worker-2/gpu-1"]
    assert two["cpsat"]["devices"] == two["upstream"]["devices"] and two["why"] == ""
    assert doc["nodes"]["filtered"]["worker-4"] == "node(s) didn't match Pod's node affinity/selector"


def test_pod_targets_and_files_do_not_mix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mixed = "error: Invalid value: give one pod/NAME or resourceclaim/NAME and no FILEs with it\n"
    for command in ("explain", "compare"):
        for inputs in (["pod/train-0", str(tmp_path / "x.yaml")], [str(tmp_path / "x.yaml"), "pod/train-0"],
                       ["pod/train-0", "resourceclaim/c"]):
            assert _main(capsys, command, *inputs) == (2, "", mixed)
    code, _, err = _main(capsys, "explain", "--kubeconfig", str(tmp_path / "kc"), "--node", "n", str(tmp_path / "x.yaml"))
    assert code == 2 and "error: --kubeconfig: Forbidden" in err
    code, _, err = _main(capsys, "explain", "-n", "ml", "--node", "n", str(tmp_path / "x.yaml"))
    assert code == 2 and err.startswith("error: --namespace: Forbidden: a live cluster is asked about pod/NAME")
    code, _, err = _main(capsys, "explain", "--kubeconfig", str(tmp_path / "kc"), "pod/train-0")
    assert code == 2 and f"kubeconfig {tmp_path / 'kc'}: no such file" in err


def test_an_api_server_that_does_not_answer_exits_4_not_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],  # nothing listens on port 1
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    for command in ("explain", "compare"):
        code, out, err = _main(capsys, command, "--kubeconfig", str(kubeconfig), "pod/train-0")
        assert (code, out) == (4, "") and err.count("\n") == 1
        assert err.startswith("error: cannot reach the Kubernetes API server at https://127.0.0.1:1 (from kubeconfig ")
