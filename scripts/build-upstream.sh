#!/usr/bin/env bash
# Builds upstream's own components from the Go module proxy into a cache outside the repository:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, plus our thin Go
# wrappers under tools/ (e.g. the upstream allocator). Versions are pinned in
# tools/upstream-versions.env and the go.mod/go.sum files beside each module; a module is rebuilt
# only when its pins or sources change.
#
# Usage: scripts/build-upstream.sh [--print-dir] [MODULE...]
#   MODULE: a folder name under tools/ (default: all of them)
#   --print-dir: print the binary directory (building first if needed) and nothing else on stdout
#   --no-build: never build; exit 3 when a module is not built at its current pins
# Environment: DRA_SOLVER_CACHE (default: ${XDG_CACHE_HOME:-~/.cache}/dra-solver)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/tools"
# shellcheck source=/dev/null
source "$tools/upstream-versions.env"

cache="${DRA_SOLVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dra-solver}"
bin="$cache/k8s-$KUBERNETES_VERSION/bin"
stamps="$cache/k8s-$KUBERNETES_VERSION/stamps"

print_dir=0
no_build=0
modules=()
for arg in "$@"; do
  case "$arg" in
    --print-dir) print_dir=1 ;;
    --no-build) no_build=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build-upstream: unknown flag $arg" >&2; exit 2 ;;
    *) modules+=("$arg") ;;
  esac
done
if [ ${#modules[@]} -eq 0 ]; then
  for d in "$tools"/*/; do [ -f "$d/go.mod" ] && modules+=("$(basename "$d")"); done
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-upstream: 'go' is not on PATH: install Go 1.26 or newer to build upstream's components" >&2
  exit 2
fi

log() { echo "build-upstream: $*" >&2; }

# What a release build stamps into the binaries (upstream's hack/lib/version.sh does it from
# git; a module-proxy build has no git, so the pinned versions say it): without it
# kube-apiserver's /version and `kubectl version` report v0.0.0-master+$Format:%H$.
version_ldflags() {
  case "$1" in
    kube)
      local v="${KUBERNETES_VERSION#v}" pkg
      local major="${v%%.*}" rest="${v#*.}"
      local minor="${rest%%.*}"
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        printf ' -X %s' "$pkg.gitVersion=$KUBERNETES_VERSION" "$pkg.gitMajor=$major" \
          "$pkg.gitMinor=$minor" "$pkg.gitTreeState=clean" "$pkg.gitCommit="
      done ;;
    # etcd's version is a constant in its source (etcd --version says 3.6.x already); its
    # Git SHA is unknown without git and stays "Not provided".
    helm)
      # helm's release builds stamp the full version (the source says only vX.Y); the pinned
      # one is the helm.sh/helm/v4 line of tools/helm/go.mod.
      local hv
      hv="$(awk '$1 == "helm.sh/helm/v4" {print $2}' "$tools/helm/go.mod")"
      printf ' -X helm.sh/helm/v4/internal/version.version=%s -X helm.sh/helm/v4/internal/version.gitTreeState=clean' "$hv" ;;
  esac
}

mkdir -p "$bin" "$stamps"
# One build at a time (parallel test workers may all ask for the binaries).
exec 9>"$cache/build.lock"
flock 9

for m in "${modules[@]}"; do
  dir="$tools/$m"
  if [ ! -f "$dir/go.mod" ]; then log "no Go module at tools/$m"; exit 2; fi
  stamp="$(version_ldflags "$m")"
  ldflags="-s -w$stamp"
  key="$( { cat "$tools/upstream-versions.env"; go version; printf '%s' "$stamp";
            find "$dir" -type f \( -name 'go.mod' -o -name 'go.sum' -o -name '*.go' \) -print0 \
              | sort -z | xargs -0 cat; } | sha256sum | cut -c1-16)"
  if [ -f "$stamps/$m" ] && [ "$(cat "$stamps/$m")" = "$key" ]; then
    continue
  fi
  if [ "$no_build" = 1 ]; then
    log "tools/$m is not built at its current pins: run scripts/build-upstream.sh"
    exit 3
  fi
  log "building tools/$m into $bin (first build of Kubernetes takes 10-25 minutes on 2 cores)"
  start=$(date +%s)
  tmp="$(mktemp -d "$cache/build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  if grep -q '^tool' "$dir/go.mod"; then
    (cd "$dir" && GOBIN="$tmp" GOFLAGS=-mod=mod go install -trimpath -ldflags="$ldflags" tool)
  else
    (cd "$dir" && GOFLAGS=-mod=mod go build -trimpath -ldflags="$ldflags" -o "$tmp/$m" .)
  fi
  for f in "$tmp"/*; do mv -f "$f" "$bin/"; done
  rm -rf "$tmp"
  trap - EXIT
  # etcd's server module builds a binary named "server": give it its usual name.
  if [ -f "$bin/server" ]; then mv -f "$bin/server" "$bin/etcd"; fi
  echo "$key" > "$stamps/$m"
  log "tools/$m built in $(( $(date +%s) - start )) s"
done

if [ "$print_dir" = 1 ]; then echo "$bin"; else ls "$bin" >&2; fi
