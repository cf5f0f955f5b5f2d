"""``dra-solver explain`` on files (no service), and ``allocate``'s "does not fit" line.

Exit status: 0 the claims fit, 1 they do not (with reasons), 2 invalid input. The messages tell
"no change makes them fit on this node" from "deadline reached: the reasons may not be the
fewest" (issue 18: a claim no change could fit printed "time ran out" after 18 ms).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_solver import cli
from dra_solver.service.commands.explain import render
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo"
CLUSTER = str(DEMO / "cluster.yaml")
SIXTEEN = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: sixteen, namespace: default}
spec:
  devices:
    requests:
    - name: gpus
      exactly: {deviceClassName: gpu.example.com, count: 16}
"""


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as done:  # argparse
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def sixteen(tmp_path: Path) -> str:
    path = tmp_path / "sixteen.yaml"
    path.write_text(SIXTEEN)
    return str(path)


def test_claims_that_fit_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "explain", "--node", "node-a", CLUSTER, str(DEMO / "claims" / "notebook.yaml"))
    assert (code, out, err) == (0, "node node-a: the claims fit; nothing blocks them.\n", "")


def test_claims_that_do_not_fit_exit_1_with_the_reasons_and_the_fewest_changes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "explain", "--node", "node-a", CLUSTER, str(DEMO / "claims" / "big-training.yaml"))
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[0] == ("node node-a: the claims do not fit: claim demo/big-training, constraint #0: matchAttribute "
                        "gpu.example.com/numa over requests gpus (devices per value on this node: 0: 2, 1: 2) (and 1 more reason)")
    assert lines[1:4] == [
        "reasons (together they block the claims; each one is needed):",
        "  - [request] claim demo/big-training, request gpus needs 4 devices of class gpu.example.com (the node has 4 devices)",
        "  - [constraint] claim demo/big-training, constraint #0: matchAttribute gpu.example.com/numa over requests gpus "
        "(devices per value on this node: 0: 2, 1: 2)",
    ]
    assert "fewest changes that would make them fit:" in lines
    assert "  - [in-use] device gpu.example.com/node-a/gpu-0 is in use by claim team-a/existing-training" in lines
    assert "deadline reached" not in out and "no change" not in out


def test_no_change_that_fits_is_said_as_such_not_as_a_deadline(sixteen: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, "explain", "--node", "node-a", CLUSTER, sixteen)
    assert code == 1
    assert out.splitlines() == [
        "node node-a: the claims do not fit: claim default/sixteen, request gpus needs 16 devices of class gpu.example.com "
        "(the node has 4 devices)",
        "reasons (together they block the claims; each one is needed):",
        "  - [request] claim default/sixteen, request gpus needs 16 devices of class gpu.example.com (the node has 4 devices)",
        "no change makes them fit on this node: what the claims ask is more than it has",
    ]
    code, out, _ = _main(capsys, "explain", "--node", "node-a", "-o", "json", CLUSTER, sixteen)
    answer = json.loads(out)
    assert code == 1 and answer["noFix"] is True and answer["minimal"] is True and "limit" not in answer
    assert answer["summary"].endswith("No change makes them fit on this node.")


def test_a_deadline_is_said_as_such() -> None:
    reason = pb.Reason(kind="in-use", message="device d is in use by claim x")
    answer = pb.ExplainResponse(node="n", reasons=[reason], fixes=[reason], minimal=False, limit="deadline")
    assert render(answer).splitlines()[-1] == (
        "(deadline reached: these reasons suffice but may not be the fewest (a longer --timeout may give fewer))")
    budget = pb.ExplainResponse(node="n", reasons=[reason], minimal=False, limit="budget")
    assert render(budget).splitlines()[-1] == "(search limit reached: these reasons suffice but may not be the fewest)"


@pytest.mark.parametrize(("args", "error"), [
    (["--node", "node-z", CLUSTER], 'error: --node: Not found: "node-z": known nodes: node-a, node-b, node-c'),
    ([CLUSTER], "error: --node: Required value: the node to explain"),
    (["--node", "node-a", "--timeout", "0", CLUSTER], "error: --timeout: Invalid value: 0.0: must be greater than zero"),
    (["--node", "node-a", "--feature-gates", "DRAPrioritizedList=maybe", CLUSTER],
     "error: --feature-gates: invalid value of DRAPrioritizedList=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax"),
])
def test_invalid_input_exits_2_with_one_line(args: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "explain", *args)
    assert (code, out, err) == (2, "", error + "\n")


def test_a_bad_file_exits_2_naming_file_object_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SIXTEEN.replace("count: 16", "count: 0"))
    code, out, err = _main(capsys, "explain", "--node", "node-a", CLUSTER, str(bad))
    assert code == 2 and out == ""
    assert err == (f"error: {bad}: ResourceClaim default/sixteen: spec.devices.requests[0].exactly.count: Invalid value: 0: "
                   "must be greater than zero\n")


def test_allocate_names_the_first_blocking_reason(sixteen: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "allocate", "--node", "node-a", CLUSTER, str(DEMO / "claims" / "big-training.yaml"))
    assert code == 1 and out == ""
    assert err == ("cannot allocate all claims on node node-a: claim demo/big-training, constraint #0: matchAttribute "
                   "gpu.example.com/numa over requests gpus (devices per value on this node: 0: 2, 1: 2) (and 1 more reason)\n")
    code, _, err = _main(capsys, "allocate", "--node", "node-a", "--allocator", "backtracking", CLUSTER, sixteen)
    assert code == 1
    assert err == ("cannot allocate all claims on node node-a: claim default/sixteen, request gpus needs 16 devices of "
                   "class gpu.example.com (the node has 4 devices)\n")
