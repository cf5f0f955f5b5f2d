"""Regenerate the Python code for ``proto/drasolver/v1/*.proto`` into ``service/gen/``.

    python -m dra_solver.service.protogen            # rewrite service/gen/ in place
    python -m dra_solver.service.protogen --out DIR  # write elsewhere (the freshness test compares)

The generated code is committed so that installing dra-solver needs no protoc. protoc writes
imports relative to the proto root (``from drasolver.v1 import ...``); they are rewritten to
the package path ``service.gen.drasolver.v1`` so the code imports without touching sys.path.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from google.rpc import status_pb2

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
GEN_PACKAGE = "dra_solver.service.gen"
DEFAULT_OUT = ROOT / "service" / "gen"

_IMPORT = re.compile(r"^from drasolver\.", re.MULTILINE)


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.glob("drasolver/**/*.proto"))


def _googleapis_root() -> Path:
    """Where googleapis-common-protos installed ``google/rpc/status.proto`` (imported by ours)."""
    return Path(status_pb2.__file__).resolve().parents[2]


def generate(out: Path) -> list[Path]:
    """Run protoc (grpcio-tools) on every proto file; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    # A subprocess: protoc's C++ runtime must not share a process with the protobuf runtime
    # that has already loaded the generated code (it aborts when both are present).
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{_googleapis_root()}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed on {', '.join(files)}: {done.stderr.strip()}")
    written: list[Path] = []
    for path in sorted(out.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or path.name == "__init__.py":
            continue
        text = path.read_text(encoding="utf-8")
        path.write_text(_IMPORT.sub(f"from {GEN_PACKAGE}.drasolver.", text), encoding="utf-8")
        written.append(path)
    # Packages all the way down, so ``service.gen.drasolver.v1`` imports normally.
    for directory in sorted({p.parent for p in written} | {out}):
        while True:
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text('"""Generated code; regenerate with ``python -m dra_solver.service.protogen``."""\n')
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
