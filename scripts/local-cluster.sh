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
# shellcheck source=scripts/ensure-venv.sh
source scripts/ensure-venv.sh
exec .venv/bin/dra-solver local-cluster "$@"
