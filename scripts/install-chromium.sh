#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for tests/compare/test_report_render.py, which
# renders the `compare --report` page and checks it loads without errors.
# Idempotent: does nothing when `chromium` is already on PATH. Needs root (CI runs as root) or
# passwordless sudo; only Debian's package is used (no browser download of its own).
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "chromium already installed: $(chromium --version 2>/dev/null | head -n1)"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here; install Chromium and put it on PATH as 'chromium'" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "installing the chromium package needs root (or passwordless sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "installed: $(chromium --version 2>/dev/null | head -n1)"
