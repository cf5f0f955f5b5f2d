#!/usr/bin/env bash
# apt-install.sh NAME HINT PACKAGE...: install Debian PACKAGEs without recommendations, as root
# or through passwordless sudo (CI runs as root). NAME is what the messages call it; HINT says
# what to do where there is no apt-get. Shared by install-prometheus.sh and install-chromium.sh.
set -euo pipefail
name=$1 hint=$2
shift 2

if ! command -v apt-get >/dev/null 2>&1; then
  echo "no apt-get here; $hint" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "installing the $name package needs root (or passwordless sudo)" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
