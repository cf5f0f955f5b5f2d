"""Regenerate the Python code for the kubelet's protos (``proto/k8s.io/...``) into ``kubeletplugin/gen/``.

    python -m dra_solver.kubeletplugin.protogen            # rewrite kubeletplugin/gen/ in place
    python -m dra_solver.kubeletplugin.protogen --out DIR  # write elsewhere (the freshness test compares)

The generated code is committed so that installing dra-solver needs no protoc. protoc turns the
proto path ``k8s.io/kubelet/pkg/apis/dra-health/v1/api.proto`` into the module path
``k8s.io.kubelet.pkg.apis.dra_health.v1``; the imports it writes (and the module names it
records in the descriptors) are rewritten to live under ``kubeletplugin.gen`` so the code
imports as an ordinary subpackage, without touching ``sys.path``. The proto file names inside
the descriptors stay upstream's, so they cannot collide in protobuf's default pool.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
GEN_PACKAGE = "dra_solver.kubeletplugin.gen"
DEFAULT_OUT = ROOT / "kubeletplugin" / "gen"

# ``from k8s.io.kubelet... import`` and ``'k8s.io.kubelet....api_pb2'`` (the module name given
# to the descriptor builder) both become ``kubeletplugin.gen.k8s.io...``. Nothing else may
# change: service names such as 'k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin' are the wire format.
_IMPORT = re.compile(r"^from k8s\.io\.", re.MULTILINE)
_MODULE_NAME = re.compile(r"'k8s\.io\.(kubelet\.[\w.]+\.api_pb2)'")
_INIT_TEXT = '"""Generated code; regenerate with ``python -m dra_solver.kubeletplugin.protogen``."""\n'


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("k8s.io/kubelet/pkg/apis/**/*.proto"))


def generate(out: Path) -> list[Path]:
    """Run protoc (grpcio-tools) on every kubelet proto; returns the files written."""
    # lazy import: grpcio-tools (a build-time tool from the test extra), only when regenerating
    from grpc_tools import protoc  # type: ignore[import-untyped]

    out.mkdir(parents=True, exist_ok=True)
    files = [p.relative_to(PROTO_ROOT).as_posix() for p in proto_files()]
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(files)}")
    written: list[Path] = []
    for path in sorted((out / "k8s").rglob("*")):
        if path.suffix not in (".py", ".pyi") or path.name == "__init__.py":
            continue
        text = path.read_text(encoding="utf-8")
        text = _IMPORT.sub(f"from {GEN_PACKAGE}.k8s.io.", text)
        text = _MODULE_NAME.sub(rf"'{GEN_PACKAGE}.k8s.io.\1'", text)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    # Packages all the way down, so ``kubeletplugin.gen.k8s.io.kubelet...`` imports normally.
    for directory in sorted({p.parent for p in written} | {out}):
        while True:
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text(_INIT_TEXT, encoding="utf-8")
            if directory == out:
                break
            directory = directory.parent
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
