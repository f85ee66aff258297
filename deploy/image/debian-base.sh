#!/bin/sh
# Builds the local Debian base image (TAG, default localhost/blockx-debian-base:bookworm)
# for machines that reach the Debian archive but no container registry: debootstrap a
# minimal bookworm with python3 and python3-venv, then `podman import` it. Does nothing
# when the image already exists (delete it with `podman rmi TAG` to rebuild).
set -eu
TAG=${1:-localhost/blockx-debian-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PODMAN=${PODMAN:-podman}
if $PODMAN image exists "$TAG"; then
    echo "debian-base: $TAG exists, not rebuilding"
    exit 0
fi
root=$(mktemp -d /var/tmp/blockx-debian-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "debian-base: debootstrap $SUITE from $MIRROR into $root"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# An apt that works inside the image (the build stage installs a compiler with it).
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" >"$root/etc/apt/sources.list"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
tar -C "$root" -c . | $PODMAN import --change 'CMD ["/bin/bash"]' - "$TAG"
echo "debian-base: imported $TAG"
