#!/usr/bin/env bash
# Prints the path of a helm binary, building it from its Go module on first use.
# The binary is cached outside the clone, so a machine pays for the build once:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kairos/helm-<version>/bin/helm
# KAIROS_HELM_VERSION picks the version; GO (default: go on PATH, else /usr/local/go/bin/go)
# picks the toolchain. Build output goes to stderr; stdout carries only the path.
set -euo pipefail

version="${KAIROS_HELM_VERSION:-v4.3.2}"
major="${version%%.*}"  # v4.3.2 -> v4
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kairos/helm-${version}"
helm="$cache/bin/helm"

if [[ ! -x "$helm" ]]; then
    go="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
    if [[ ! -x "$go" ]]; then
        echo "scripts/helm.sh: no Go toolchain (set GO=/path/to/go)" >&2
        exit 1
    fi
    mkdir -p "$cache"
    tmp="$(mktemp -d "$cache/build.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    echo "scripts/helm.sh: building helm $version with $("$go" version)" >&2
    start=$SECONDS
    GOBIN="$tmp" GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0 \
        "$go" install "helm.sh/helm/${major}/cmd/helm@${version}" >&2
    mkdir -p "$cache/bin"
    mv -f "$tmp/helm" "$helm"  # atomic within one filesystem: a concurrent caller sees all or nothing
    echo "scripts/helm.sh: built in $((SECONDS - start)) s -> $helm" >&2
fi
echo "$helm"
