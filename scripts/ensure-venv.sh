# Sourced by scripts/local-cluster.sh and scripts/kube-up, from the repository root: makes sure
# .venv exists and has dra-solver installed (like scripts/demo.sh), quietly when it already does.
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
