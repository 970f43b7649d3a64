#!/usr/bin/env bash
# Installs what `make test-verbs` needs on the host (Debian bookworm, as
# root): qemu to run the guest under TCG, debootstrap and e2fsprogs to build
# its image, xz-utils to unpack its kernel, and gcc with libibverbs-dev to
# build the cgo binaries that run in it. Runs apt only when something is
# missing.
set -euo pipefail
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
exec "$(dirname "$0")/../apt-install.sh" "${need[@]}"
