#!/usr/bin/env bash
# `fsoc bench mtd` under a real Linux kernel: boots Debian's kernel under QEMU (scripts/vm/,
# the harness of scripts/test-mtd.sh) with the release fsoc, mtd-utils' UBI tools and
# PostMark in its initramfs, runs scripts/vm/mtd-bench-guest.sh there (fsoc against UBI +
# UBIFS on nandsim, counted by kprobes, nandsim's delays on), copies the JSON out of the
# console and writes the SVG chart beside it with `fsoc bench mtd --render`, which also prints
# the Markdown tables.
#
# Usage: scripts/bench-mtd.sh --json OUT [--quick] [-- MORE_BENCH_ARGUMENTS...]
#   --quick   256 MiB and 1 GiB, fewer files, 8 MiB sequential, PostMark scaled down: about
#             10 minutes under TCG; the full run takes a few hours (8 GiB with delays on)
#   after --, arguments for `fsoc bench mtd` in the guest, e.g. -- --sizes 256M,2G --mount-only
# Environment: FSOC_BIN (use this fsoc binary), KEEP=1 (keep the work directory and console
# log), VM_MEMORY_MB (default 3072), VM_TIMEOUT_SECONDS (default 14400; 1800 with --quick).
# Exit status: 0 when every measurement succeeded, 1 when one failed (the JSON says which), 2 on
# a usage error, 77 when the machine cannot boot the guest.
# Needs: what scripts/setup.sh --vm installs (QEMU, Debian's kernel, busybox-static, mtd-utils)
# and postmark (scripts/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
usage() { echo "usage: scripts/bench-mtd.sh --json OUT [--quick] [-- MORE_BENCH_ARGUMENTS...]" >&2; exit 2; }
json=
quick=
bench_arguments=()
while [ $# -gt 0 ]; do
  case "$1" in
    --json) [ $# -ge 2 ] || usage; json=$2; shift 2 ;;
    --quick) quick=--quick; shift ;;
    --) shift; bench_arguments=("$@"); break ;;
    *) usage ;;
  esac
done
[ -n "$json" ] || usage
case "$json" in *.svg) echo "bench-mtd: give the JSON file's name; the chart goes beside it as .svg" >&2; exit 2 ;; esac

. scripts/vm/mtd-guest.sh
missing=0
mtd_guest_missing || missing=1
for program in postmark ubiformat ubiattach ubidetach ubimkvol; do
  command -v "$program" >/dev/null || { echo "MISSING $program (packages postmark, mtd-utils)"; missing=1; }
done
if [ $missing = 1 ]; then
  echo "SKIP bench-mtd: cannot boot the guest; install with: sudo scripts/setup.sh --vm"
  exit 77
fi
mtd_guest_fsoc || { echo "bench-mtd: cargo build -p fsoc-cli failed" >&2; exit 1; }
code=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- crates 2>/dev/null || code="$code, with uncommitted changes"
[ -n "${FSOC_BIN:-}" ] && code="$code (fsoc binary given: $FSOC_BIN)"

work=$(mktemp -d /tmp/fsoc-bench-mtd.XXXXXX)
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "bench-mtd: work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$work/bin" "$work/payload"
cp "$fsoc" "$work/bin/fsoc"
mtd_guest_initramfs "$work/base.cpio.gz" "$work/bin" postmark >/dev/null ||
  { echo "bench-mtd: building the initramfs failed" >&2; exit 1; }
install -m 755 scripts/vm/mtd-bench-guest.sh "$work/payload/run.sh"
host="$(nproc) CPUs, $(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo) MiB, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
host="$(uname -r) host, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $host"
printf 'BENCH_ARGUMENTS="%s"\nBENCH_CODE="%s"\nBENCH_HOST="%s"\n' "$quick ${bench_arguments[*]}" "$code" "$host" \
  > "$work/payload/settings"

timeout_seconds=${VM_TIMEOUT_SECONDS:-$([ -n "$quick" ] && echo 1800 || echo 14400)}
echo "bench-mtd: booting the guest under QEMU (${VM_MEMORY_MB:-3072} MiB, at most $timeout_seconds s);" \
  "console in $work/console.log"
VM_TIMEOUT_SECONDS=$timeout_seconds scripts/vm/boot.sh "$work/base.cpio.gz" "$work/payload" \
  "${VM_MEMORY_MB:-3072}" 2>&1 | sed -u 's/\r//g' | tee "$work/console.log" | grep --line-buffered '^bench mtd: '
boot_status=${PIPESTATUS[0]}
done_line=$(grep -a '^BENCH DONE ' "$work/console.log" | tail -n 1)
if [ -z "$done_line" ]; then
  echo "bench-mtd: the guest did not finish (boot.sh status $boot_status); the console's end:" >&2
  tail -n 30 "$work/console.log" >&2
  KEEP=1
  exit 1
fi
if ! grep -aq '^JSON ' "$work/console.log"; then
  echo "bench-mtd: the guest wrote no JSON ($done_line); the console's end:" >&2
  tail -n 30 "$work/console.log" >&2
  KEEP=1
  exit 1
fi
mkdir -p "$(dirname "$json")"
grep -a '^JSON ' "$work/console.log" | sed 's/^JSON //' > "$json"
"$fsoc" bench mtd --render "$json" || { KEEP=1; exit 1; }
echo "bench-mtd: $json and ${json%.json}.svg in $(($(date +%s) - started)) s ($done_line);" \
  "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$done_line" = "BENCH DONE 0" ] || exit 1
exit 0
