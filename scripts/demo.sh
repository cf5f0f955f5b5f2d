#!/usr/bin/env bash
# The main job from a fresh clone: install dra-solver into .venv and run the end-to-end demo
# (service up on the bundled demo cluster, a workload driven over gRPC, results and the
# CP-SAT vs backtracking comparison printed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
echo "==> installing dra-solver"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
exec .venv/bin/dra-solver demo "$@"
