#!/usr/bin/env bash
# fsoc on raw NAND under a real Linux kernel: boots Debian's kernel under QEMU (scripts/vm/) and
# runs scripts/vm/mtd-workload.sh in the guest, which loads nandsim and runs fsoc on /dev/mtd0:
#   geometry_2k  2 KiB pages (64 OOB bytes): mkfs, FUSE mount, a tree copied in, umount,
#                remount, byte-identical read back, fsck clean, mount page reads
#   geometry_4k  4 KiB pages, 2 GiB: the same tree through the image tools (put -r, ls, get -r)
#                and then through the mount
#   bad_blocks   factory bad blocks (nandsim badblocks=): reported by mkfs, tree intact
#   bit_flips    nandsim bitflips=1: every byte read back right, corrections counted
#   grown_bad_blocks  nandsim weakpages=: programs fail, blocks retired, tree intact
#   array        two MTD partitions (nandsim parts=) as a 2-chip array: /dev/mtd0,/dev/mtd1
#   rebuild      (needs flash_erase, mtd-utils) three partitions as a 3-chip array with
#                --redundancy parity; chip 1 erased (blank), then garbage, then another fsoc
#                volume, then a rebuild killed halfway: each time the volume reads degraded
#                (info, fsck, get -r byte-identical, writes refused) where it can, `fsoc
#                rebuild --chip 1` (a rebuild of chip 2 refused first) makes it whole again:
#                fsck clean, the tree byte-identical, writes work, through the FUSE mount too
#   nfs_export   (needs nfs-kernel-server on the host and nfsd in the guest kernel) the FUSE
#                mount exported by the kernel's NFS server, mounted over loopback NFSv4.2:
#                create, read, write, rename and delete with the caches dropped between steps,
#                ESTALE for a removed directory's handle, handles kept across an unmount and
#                remount of the fsoc volume under the export, fsck clean
#   kill_rounds  kill -9 of the mount's server during fsync'd writes, remount: every fsync'd
#                file intact and fsck clean, ROUNDS times
#   mount_reads  (long set only; needs mtd-utils) page reads counted by kprobes: fsoc mount vs
#                UBI attach + UBIFS mount of the same tree at 256 MiB and 1 GiB
#   bench_quick  (long set only; needs mtd-utils and postmark) `fsoc bench mtd --quick` at
#                256 MiB (scripts/bench-mtd.sh's benchmark, scaled down): every measurement runs
# Prints PASS/FAIL per step, MEASURE lines and a summary; exits 0 if all passed, 1 on any
# failure, 77 (SKIP) when the machine cannot boot the guest (no QEMU, kernel or busybox): it
# never passes without running.
#
# Usage: scripts/test-mtd.sh [--short]
#   --short   fewer files (120) and kill rounds (5): a few minutes under TCG, for scripts/test.sh
# Environment: CASES (default: all, in the order above), FILES, ROUNDS (override the mode's),
# FSOC_BIN (use this fsoc binary instead of building one), KEEP=1 (keep the work directory),
# VM_TIMEOUT_SECONDS (default 1200; a guest still running then is stopped and the run fails).
# Needs: qemu-system-x86 linux-image-amd64 busybox-static cpio kmod fuse3 (scripts/setup.sh --vm).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
files=400
rounds=20
mode=long
for argument in "$@"; do
  case "$argument" in
    --short) files=120 rounds=5 mode=short ;;
    *) echo "usage: scripts/test-mtd.sh [--short]" >&2; exit 2 ;;
  esac
done
files=${FILES:-$files}
rounds=${ROUNDS:-$rounds}
default_cases="geometry_2k geometry_4k bad_blocks bit_flips grown_bad_blocks array"
if command -v flash_erase >/dev/null; then
  default_cases="$default_cases rebuild"
else
  echo "SKIP rebuild: flash_erase is missing (package mtd-utils)"
fi
nfs_missing=
for program in rpc.nfsd rpc.mountd exportfs mount.nfs; do
  command -v "$program" >/dev/null || nfs_missing="$nfs_missing $program"
done
if [ -f /etc/netconfig ] && [ -z "$nfs_missing" ] && kernel_version=$(scripts/vm/kernel-version.sh 2>/dev/null) &&
  modprobe -S "$kernel_version" --show-depends nfsd >/dev/null 2>&1; then
  default_cases="$default_cases nfs_export"
else
  echo "SKIP nfs_export: needs the guest kernel's nfsd module, /etc/netconfig and${nfs_missing:- the NFS programs}" \
    "(package nfs-kernel-server: scripts/setup.sh --vm)"
fi
default_cases="$default_cases kill_rounds"
if [ $mode = long ]; then
  if command -v ubiformat >/dev/null && command -v ubiattach >/dev/null; then
    default_cases="$default_cases mount_reads"
  else
    echo "SKIP mount_reads: ubiformat, ubiattach, ubimkvol and ubidetach are missing (package mtd-utils)"
  fi
  if command -v ubiformat >/dev/null && command -v postmark >/dev/null; then
    default_cases="$default_cases bench_quick"
  else
    echo "SKIP bench_quick: needs mtd-utils and postmark"
  fi
fi
cases=${CASES:-$default_cases}

. scripts/vm/mtd-guest.sh
if ! mtd_guest_missing; then
  echo "SKIP test-mtd: cannot boot the guest; install with: sudo scripts/setup.sh --vm"
  exit 77
fi
mtd_guest_fsoc || { echo "FAIL build: cargo build -p fsoc-cli"; exit 1; }

work=$(mktemp -d /tmp/fsoc-mtd.XXXXXX)
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "test-mtd: work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

mkdir -p "$work/bin"
cp "$fsoc" "$work/bin/fsoc"
# PostMark for the bench_quick case, when the host has it.
mtd_guest_initramfs "$work/base.cpio.gz" "$work/bin" $(command -v postmark) >/dev/null || { echo "FAIL build: initramfs"; exit 1; }
mkdir -p "$work/payload"
install -m 755 scripts/vm/mtd-workload.sh "$work/payload/run.sh"
# libtirpc's network table, which the NFS server's programs read (nfs_export).
[ -f /etc/netconfig ] && cp /etc/netconfig "$work/payload/netconfig"
cat > "$work/payload/settings" <<EOF
CASES="$cases"
FILES=$files
ROUNDS=$rounds
EOF

echo "test-mtd: $mode set ($files files, $rounds kill rounds): booting the guest under QEMU;" \
  "console in $work/console.log"
VM_TIMEOUT_SECONDS=${VM_TIMEOUT_SECONDS:-1200} scripts/vm/boot.sh "$work/base.cpio.gz" "$work/payload" 1536 \
  2>&1 | sed -u 's/\r//g' > "$work/console.log"
boot_status=${PIPESTATUS[0]}
grep -E '^(RESULT (PASS|FAIL) |MEASURE |lost: )' "$work/console.log" | sed 's/^RESULT //'
failures=$(grep -c '^RESULT FAIL ' "$work/console.log")
passes=$(grep -c '^RESULT PASS ' "$work/console.log")
if ! grep -q '^RESULT DONE' "$work/console.log"; then
  echo "FAIL guest: the workload did not finish (boot.sh status $boot_status); the console's end:"
  tail -n 30 "$work/console.log"
  failures=$((failures + 1))
fi
if [ "$passes" = 0 ]; then
  echo "FAIL guest: no step passed"
  failures=$((failures + 1))
fi
if grep -qE 'panicked|Kernel panic|BUG:|Oops' "$work/console.log"; then
  echo "FAIL guest: $(grep -m1 -E 'panicked|Kernel panic|BUG:|Oops' "$work/console.log")"
  failures=$((failures + 1))
fi

echo "test-mtd: $mode set: $passes passed, $failures failed, $(($(date +%s) - started)) s wall"
if [ "$failures" != 0 ]; then
  KEEP=1
  exit 1
fi
exit 0
