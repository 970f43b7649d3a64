#!/usr/bin/env bash
# Builds the soft-RoCE test guest's image, once per version of this script
# and of guest-init, and prints the folder that holds it. The image lives
# outside the repository, in ${XDG_CACHE_HOME:-$HOME/.cache}/shiftlock/rxe/
# KEY, where KEY hashes the two files; a changed script builds a new image
# and older ones are removed. Building takes about 2.5 min (debootstrap of
# Debian bookworm, most of it); needs root and a Debian mirror.
#
# What is in it: the stock Debian kernel (6.1, with rdma_rxe), rdma-core's
# libibverbs and its providers (librxe), iproute2 (rdma link). No compiler:
# binaries are built on the host and run in the guest. The kernel is also
# kept uncompressed, so that qemu boots it through its PVH entry and skips
# the decompressor (about 3 s a boot under TCG).
set -euo pipefail
# Only the image's folder goes to stdout; everything else to stderr.
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/image.sh" "$here/guest-init" | sha256sum | cut -c1-16)
base=${SHIFTLOCK_RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shiftlock/rxe}
dir=$base/$key
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=linux-image-amd64,initramfs-tools,kmod,iproute2,rdma-core,ibverbs-providers,libibverbs1,ibverbs-utils,procps
mkdir -p "$base"
exec 9>"$base/.lock"
flock 9 # one build at a time; a second caller waits and then finds it

if [ -e "$dir/ready" ]; then
  echo "$dir"
  exit 0
fi
log() { echo "image.sh: $*" >&2; }
t0=$(date +%s)
work=$(mktemp -d "$base/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
log "building the guest image $key (debootstrap bookworm; about 2.5 min)"
timeout 1500 debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -20 "$work/debootstrap.log" >&2
  exit 1
}
kver=$(basename "$(ls -d "$root"/lib/modules/* | head -1)")
# Modules no guest of ours loads: drop them, which halves the image.
for d in drivers/gpu drivers/media drivers/net/wireless drivers/staging sound drivers/infiniband/hw drivers/scsi drivers/usb drivers/bluetooth net/wireless drivers/hid drivers/input; do
  rm -rf "$root/lib/modules/$kver/kernel/$d"
done
chroot "$root" depmod "$kver"
# A small initrd: enough to mount an ext4 root on virtio-blk.
sed -i 's/^MODULES=.*/MODULES=list/' "$root/etc/initramfs-tools/initramfs.conf"
printf '%s\n' virtio_pci virtio_blk ext4 >"$root/etc/initramfs-tools/modules"
chroot "$root" update-initramfs -u -k "$kver" >/dev/null 2>&1
install -m 0755 "$here/guest-init" "$root/sbin/shiftlock-rxe-init"
echo 'LABEL=rxeroot / ext4 defaults 0 1' >"$root/etc/fstab"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale
cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/initrd.img"
# The uncompressed kernel: Debian's bzImage carries it as an xz stream.
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$work/vmlinuz" | head -1 | cut -d: -f1 || true)
if [ -n "$off" ] && tail -c +$((off + 1)) "$work/vmlinuz" | xz -dc >"$work/vmlinux" 2>/dev/null; [ -s "$work/vmlinux" ]; then
  :
else
  rm -f "$work/vmlinux"
  log "no uncompressed kernel; booting the bzImage (slower)"
fi
timeout 900 mkfs.ext4 -q -L rxeroot -d "$root" "$work/root.img" 2G >&2
rm -rf "$root"
echo "$kver" >"$work/kernel-version"
date -u +%FT%TZ >"$work/ready"
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
# Older images (other keys) are dead weight.
for old in "$base"/*/; do
  [ "${old%/}" = "$dir" ] || rm -rf "$old"
done
log "image $key ready in $(( $(date +%s) - t0 )) s: $dir"
echo "$dir"
