#!/usr/bin/env bash
# The whole test suite from a fresh clone: creates .venv, installs dra-solver with its test
# extras, installs Prometheus for the real-scrape integration test when possible, runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
echo "==> installing dra-solver[test]"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
if [ -x scripts/install-prometheus.sh ]; then
  echo "==> ensuring Prometheus and promtool (for tests/integration)"
  scripts/install-prometheus.sh || echo "    (Prometheus could not be installed; its test will say so)"
fi
if [ -x scripts/install-chromium.sh ]; then
  echo "==> ensuring headless Chromium (for the comparison report's render test)"
  scripts/install-chromium.sh || echo "    (Chromium could not be installed; its test will say so)"
fi
echo "==> building or reusing upstream Kubernetes v1.37 binaries (scripts/build-upstream.sh)"
scripts/build-upstream.sh || echo "    (the build failed: the tests that need a real kube-apiserver will fail and say why)"
echo "==> running tests"
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" "$@"
