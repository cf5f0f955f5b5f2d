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

if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here; install Prometheus (https://prometheus.io/download/) and put it on PATH" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "installing the prometheus package needs root (or passwordless sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends: the node exporter and alertmanager recommendations are not needed.
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
echo "installed: $(prometheus --version 2>&1 | head -n1)"
