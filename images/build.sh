#!/usr/bin/env bash
# Builds the Sandhub sandbox image.
#   images/build.sh [--force] [TAG]
# Uses a registry base image when one can be pulled; otherwise builds the base offline with
# debootstrap from this machine's own apt mirror (read from its apt configuration) and
# `docker import`. Idempotent: does nothing when TAG exists and was built from this same
# recipe (a hash of this script and images/sandbox/, kept in an image label), unless --force.
set -euo pipefail

force=0
if [[ "${1:-}" == "--force" ]]; then force=1; shift; fi
tag="${1:-${SANDHUB_SANDBOX_IMAGE:-sandhub/sandbox:latest}}"
here="$(cd "$(dirname "$0")" && pwd)"
registry_base="debian:bookworm-slim"
packages="python3,python3-pip,python3-venv,python3-pytest,bash,coreutils,git,tini,procps,ca-certificates"
recipe="$(cat "$0" "$here"/sandbox/* | sha256sum | cut -c1-16)"
# The offline base depends only on the package list: a Dockerfile change reuses it.
offline_base="sandhub/base:bookworm-$(echo "$packages" | sha256sum | cut -c1-12)"

built_recipe="$(docker image inspect -f '{{index .Config.Labels "org.sandhub.recipe"}}' "$tag" 2>/dev/null || true)"
if [[ $force -eq 0 && "$built_recipe" == "$recipe" ]]; then
    echo "image $tag already present (recipe $recipe)"
    exit 0
fi

# First "URIs:" of a deb822 .sources file, else the first "deb" line of a classic list.
apt_mirror() {
    local uri
    uri=$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
          | awk '{print $2}' | grep -v security | head -n1 || true)
    if [[ -z "$uri" ]]; then
        uri=$(grep -h -E '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
              | grep -v security | awk '{for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
              | head -n1 || true)
    fi
    [[ -n "$uri" ]] || { echo "no apt mirror found in /etc/apt" >&2; return 1; }
    echo "$uri"
}

build_offline_base() {
    if [[ $force -eq 0 ]] && docker image inspect "$offline_base" >/dev/null 2>&1; then
        return 0
    fi
    command -v debootstrap >/dev/null || { echo "debootstrap is not installed" >&2; exit 1; }
    local mirror rootfs
    mirror="$(apt_mirror)"
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' RETURN
    echo "debootstrap bookworm from the machine's apt mirror into $rootfs"
    debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import - "$offline_base" >/dev/null
}

if timeout 60 docker pull "$registry_base" >/dev/null 2>&1; then
    base="$registry_base"
else
    echo "no registry base image reachable; building the base offline"
    build_offline_base
    base="$offline_base"
fi

docker build --quiet --build-arg BASE="$base" --label "org.sandhub.recipe=$recipe" \
    --tag "$tag" "$here/sandbox" >/dev/null
echo "built $tag from $base (recipe $recipe)"
