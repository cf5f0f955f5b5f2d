#!/usr/bin/env bash
# A local Kubernetes with dra-solver in it, no Docker: upstream's kube-apiserver, etcd and
# kube-controller-manager (built once into ~/.cache/dra-solver), the solver service, the
# companion controllers and a simulated kubelet plugin per node.
#
#   ./scripts/local-cluster.sh up [--nodes N]   # last line of stdout: export KUBECONFIG=PATH
#   ./scripts/local-cluster.sh down             # stops everything 'up' started
#
# Installs dra-solver into .venv first if needed (like scripts/demo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv" >&2
  "$PY" -m venv .venv
fi
# -I: the check must not find the package through the current directory (the repository
# root) when it is not installed.
if [ ! -x .venv/bin/dra-solver ] || ! .venv/bin/python -I -c 'import dra_solver.service.localcluster, kubernetes' 2>/dev/null; then
  echo "==> installing dra-solver" >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2
  .venv/bin/python -m pip install -q -e . >&2
fi
exec .venv/bin/dra-solver local-cluster "$@"
