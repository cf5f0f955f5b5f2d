"""The committed generated code is what protoc makes from proto/ today."""

from __future__ import annotations

import re
from pathlib import Path

from service.protogen import DEFAULT_OUT, generate

# Version stamps differ between grpcio-tools patch releases; the code itself must not.
_VERSIONS = re.compile(r"^(GRPC_GENERATED_VERSION = .*|# Protobuf Python Version: .*|\s*\d+,\s*$)", re.MULTILINE)


def _normalized(path: Path) -> str:
    return _VERSIONS.sub("", path.read_text())


def test_generated_code_is_current(tmp_path: Path) -> None:
    fresh = {p.relative_to(tmp_path) for p in generate(tmp_path)}
    committed = {p.relative_to(DEFAULT_OUT) for p in DEFAULT_OUT.rglob("*_pb2*.py*")}
    assert fresh == committed
    for rel in sorted(fresh):
        assert _normalized(tmp_path / rel) == _normalized(DEFAULT_OUT / rel), f"{rel} is stale: run python -m service.protogen"
