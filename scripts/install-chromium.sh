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

"$(dirname "$0")/apt-install.sh" chromium "install Chromium and put it on PATH as 'chromium'" chromium fonts-dejavu-core
echo "installed: $(chromium --version 2>/dev/null | head -n1)"
