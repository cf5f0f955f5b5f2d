"""``options.validate`` over real gRPC, and ``serve --validate`` on a file inventory: the same
decoder and the same three modes as the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
import yaml

from dra_solver.model.decode import check_mode
from dra_solver.service.gen.drasolver.v1 import allocation_pb2 as pb
from dra_solver.service.inventory import FileSource
from tests import builders as b
from tests.service.conftest import DEMO, Running, start


def _node(r: Running) -> str:
    return sorted(r.engine.current().index.nodes_by_name)[0]


def _allocate(r: Running, claim: dict[str, object], validate: str) -> tuple[pb.AllocateResponse, tuple[tuple[str, str], ...]]:
    request = pb.AllocateRequest(
        claims=[json.dumps(claim).encode()], node=_node(r), options=pb.SolveOptions(validate=validate)
    )
    response, call = r.client.stub.Allocate.with_call(request, timeout=30)
    return response, tuple((m.key, m.value) for m in call.trailing_metadata() or ())


TYPO = b.SOLVER_TEST.named("typo").request("gpu", cout=2)
"""``cout: 2``: a typo the API server's strict decoding refuses."""


@pytest.mark.parametrize("validate", ["", "strict"])
def test_strict_is_the_default_and_names_the_field(running: Running, validate: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _allocate(running, TYPO.obj(), validate)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 'strict decoding error: unknown field "spec.devices.requests[0].exactly.cout"' in (info.value.details() or "")


def test_warn_answers_and_sends_the_warning_as_trailing_metadata(running: Running) -> None:
    response, metadata = _allocate(running, TYPO.obj(), "warn")
    assert response.allocated
    assert ("warning", 'claims[0]: ResourceClaim test/typo: unknown field "spec.devices.requests[0].exactly.cout"') in metadata


def test_ignore_skips_strictness_and_api_validation(running: Running) -> None:
    response, metadata = _allocate(running, TYPO.obj(), "ignore")
    assert response.allocated and not [m for m in metadata if m[0] == "warning"]
    bad_name = b.SOLVER_TEST.named("bad").request("gpu").obj()
    bad_name["spec"]["devices"]["requests"][0]["name"] = "Not_A_Label"
    with pytest.raises(grpc.RpcError) as info:
        _allocate(running, bad_name, "strict")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "Not_A_Label" in (info.value.details() or "")
    response, _ = _allocate(running, bad_name, "ignore")
    assert response.allocated


def test_an_unknown_mode_is_invalid_argument(running: Running) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _allocate(running, b.SOLVER_TEST.named("c").request("gpu").obj(), "Strict")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 'options.validate: Unsupported value: "Strict"' in (info.value.details() or "")


def _inventory_with_a_typo(tmp_path: Path) -> tuple[Path, str]:
    docs = list(yaml.safe_load_all((DEMO / "cluster.yaml").read_text()))
    sliced = next(d for d in docs if d and d["kind"] == "ResourceSlice" and d["spec"].get("devices"))
    sliced["spec"]["devices"][0]["attributez"] = {}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path, f"{sliced['spec']['driver']}/{sliced['spec']['pool']['name']}"


@pytest.mark.parametrize(
    ("mode", "pool_invalid"), [("strict", True), ("warn", False), ("ignore", False)]
)
def test_file_inventory_follows_serve_validate(
    tmp_path: Path, mode: str, pool_invalid: bool, caplog: pytest.LogCaptureFixture
) -> None:
    path, pool = _inventory_with_a_typo(tmp_path)
    source = FileSource(str(path), field_validation=check_mode(mode), validate=mode != "ignore")
    r = start(source)
    try:
        status = r.client.inventory()
    finally:
        r.client.close()
        r.service.stop(0)
    invalid = {f"{p.driver}/{p.pool}": p.reason for p in status.invalid_pools}
    assert (pool in invalid) is pool_invalid
    if pool_invalid:
        assert 'unknown field "spec.devices[0].attributez"' in invalid[pool]
    if mode == "warn":
        assert 'unknown field "spec.devices[0].attributez"' in caplog.text
