#!/usr/bin/env bash
# Boots the soft-RoCE test guest once and runs a job in it:
#   vm.sh IMAGE_DIR JOB_DIR [SRC_DIR]
# JOB_DIR is shared read-write as /job and must hold run.sh, which the guest
# runs as root in /job; its output comes back on stdout and in JOB_DIR/out,
# and its exit status is vm.sh's. SRC_DIR (the repository) is shared
# read-only as /src. Environment variables do not reach the guest: put
# them in run.sh.
#
# The guest runs under TCG (no hardware virtualisation here; RXE_ACCEL=kvm
# forces KVM where the CPU has VMX or SVM): a boot takes 8-15 s and latencies
# are emulated, so use it for function, never for performance.
#   RXE_CPUS (2), RXE_MEM (MiB, 2048), RXE_TIMEOUT (s, 2400)
# The timeout only stops a hung guest: make test-verbs's tests took 10 min
# in the guest on a quiet host and more than 20 on one with a load average
# of 17 (emulation slows down with the host's load), where 1200 s cut them
# off before the end-to-end tests.
set -euo pipefail
img=$1 job=$2 src=${3:-}
[ -e "$img/ready" ] || { echo "vm.sh: no image in $img (scripts/rxe/image.sh builds it)" >&2; exit 2; }
[ -f "$job/run.sh" ] || { echo "vm.sh: $job/run.sh missing" >&2; exit 2; }
rm -f "$job/rc" "$job/out"
accel=${RXE_ACCEL:-auto}
if [ "$accel" = auto ]; then
  # A /dev/kvm without VMX/SVM (a paravirtual one) cannot boot a stock
  # kernel: it hangs in the bzImage decompressor.
  if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then accel=kvm; else accel=tcg; fi
fi
if [ "$accel" = kvm ]; then
  acc=(-enable-kvm -cpu host)
else
  acc=(-accel tcg,thread=multi -cpu max)
fi
kernel=$img/vmlinux
[ -s "$kernel" ] || kernel=$img/vmlinuz
share=(-virtfs "local,path=$(cd "$job" && pwd),mount_tag=job,security_model=none")
[ -n "$src" ] && share+=(-virtfs "local,path=$(cd "$src" && pwd),mount_tag=src,security_model=none,readonly=on")
set +e
timeout "${RXE_TIMEOUT:-2400}" qemu-system-x86_64 "${acc[@]}" -smp "${RXE_CPUS:-2}" -m "${RXE_MEM:-2048}" -machine q35 \
  -kernel "$kernel" -initrd "$img/initrd.img" \
  -append "root=/dev/vda rw init=/sbin/shiftlock-rxe-init console=ttyS0 quiet loglevel=3 panic=-1 ${RXE_APPEND:-}" \
  -drive "file=$img/root.img,if=virtio,format=raw,snapshot=on" \
  -netdev hubport,id=n0,hubid=0 -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:01,romfile= \
  "${share[@]}" -nographic -serial stdio -monitor none -no-reboot -nodefaults </dev/null 2>&1 |
  grep -v 'hub 0 is not connected to host network'
qrc=${PIPESTATUS[0]}
set -e
if [ ! -f "$job/rc" ]; then
  echo "vm.sh: the guest reported no exit status (qemu exit $qrc; 124 is the RXE_TIMEOUT)" >&2
  exit 99
fi
exit "$(cat "$job/rc")"
