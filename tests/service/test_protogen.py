"""The committed generated code is what protoc makes from proto/ today."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from dra_solver.service.protogen import DEFAULT_OUT

# Version stamps differ between grpcio-tools patch releases; the code itself must not.
_VERSIONS = re.compile(r"^(GRPC_GENERATED_VERSION = .*|# Protobuf Python Version: .*|\s*\d+,\s*$)", re.MULTILINE)


def _normalized(path: Path) -> str:
    return _VERSIONS.sub("", path.read_text())


def test_generated_code_is_current(tmp_path: Path) -> None:
    # protoc runs in a fresh interpreter: grpc_tools' bundled protobuf aborts the process when
    # loaded beside OR-Tools' copy (which other tests in the same worker import).
    subprocess.run(
        [sys.executable, "-c", "import sys, pathlib; from dra_solver.service.protogen import generate; generate(pathlib.Path(sys.argv[1]))",
         str(tmp_path)],
        check=True, timeout=120,
    )
    fresh = {p.relative_to(tmp_path) for p in tmp_path.rglob("*_pb2*.py*")}
    committed = {p.relative_to(DEFAULT_OUT) for p in DEFAULT_OUT.rglob("*_pb2*.py*")}
    assert fresh == committed
    for rel in sorted(fresh):
        assert _normalized(tmp_path / rel) == _normalized(DEFAULT_OUT / rel), f"{rel} is stale: run python -m dra_solver.service.protogen"
