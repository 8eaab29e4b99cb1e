#!/usr/bin/env bash
# Boots Debian's kernel under QEMU with BASE (from build-initramfs.sh) plus PAYLOAD_DIR packed
# as /payload; the guest runs /payload/run.sh and powers off. The serial console goes to
# stdout. The guest has no network device; extra QEMU arguments (e.g. a virtio-serial port
# connected to a host UNIX socket) follow the memory size.
#
# Usage: scripts/vm/boot.sh BASE.cpio.gz PAYLOAD_DIR [MEM_MB [QEMU_ARG...]]
# Environment: ACCEL=tcg (default) or kvm; VM_TIMEOUT_SECONDS (default 900) ends a guest
# that never powers off, with exit status 124.
#
# TCG is the default because KVM nested in the build machines' own VMs hangs right after the
# kernel is decompressed; TCG boots in about 10 s.
set -euo pipefail
base=${1:?usage: boot.sh BASE.cpio.gz PAYLOAD_DIR [MEM_MB [QEMU_ARG...]]}
payload=${2:?payload directory}
memory_mb=${3:-1024}
shift $(($# < 3 ? $# : 3))
kernel_version=$("$(dirname "$0")/kernel-version.sh")
command -v qemu-system-x86_64 >/dev/null || {
  echo "boot: qemu-system-x86_64 is missing (install qemu-system-x86: scripts/setup.sh --vm)" >&2
  exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/payload"
cp -a "$payload"/. "$work/payload/"
# The kernel unpacks concatenated cpio archives in order: the payload lands on top of BASE.
(cd "$work" && find payload | cpio -o -H newc --quiet) | gzip -1 > "$work/payload.cpio.gz"
cat "$base" "$work/payload.cpio.gz" > "$work/initrd"
accel=${ACCEL:-tcg}
cpu=max
[ "$accel" = kvm ] && cpu=host,-arch-capabilities
timeout --foreground "${VM_TIMEOUT_SECONDS:-900}" \
  qemu-system-x86_64 -machine pc,accel="$accel" -cpu "$cpu" -smp 2 -m "$memory_mb" \
  -nographic -no-reboot -nic none -kernel "/boot/vmlinuz-$kernel_version" -initrd "$work/initrd" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init" "$@" </dev/null
