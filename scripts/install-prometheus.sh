#!/usr/bin/env bash
# Install the Prometheus server and promtool for tests/integration (test_prometheus.py scrapes
# with the server; test_metrics_conventions.py runs `promtool check metrics`).
# Idempotent: does nothing when `prometheus` and `promtool` are already on PATH. Uses Debian/Ubuntu's
# `prometheus` package; needs root (CI runs as root) or passwordless sudo. The package's
# service is not started here: the test runs the binary itself on loopback.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "prometheus already installed: $(prometheus --version 2>&1 | head -n1)"
  exit 0
fi

# No recommendations: the node exporter and alertmanager are not needed.
"$(dirname "$0")/apt-install.sh" prometheus "install Prometheus (https://prometheus.io/download/) and put it on PATH" prometheus
echo "installed: $(prometheus --version 2>&1 | head -n1)"
