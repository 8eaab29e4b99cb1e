#!/usr/bin/env bash
# The Linux kernel's own 9P2000.L client (v9fs) against `fsoc serve`: builds fsoc, formats an
# image, serves it on loopback TCP, boots Debian's kernel under QEMU with the workload of
# scripts/vm/v9fs-workload.sh (mount, files of 0 B to 1 MiB checked after a remount, ls,
# stat, renames, links, rm, rmdir, truncate, append, touch -d, chmod, find, df, fsync, tar,
# locks, mmap, large directories, parallel and killed readers, umount) once per mount mode
# (four over the fd transport through a virtio-serial port, one over TCP), then stops the
# server and checks the image with fsck and by reading a file back on the host. Prints PASS
# or FAIL per step and exits 1 on any failure, 2 when something it needs is missing (it never
# passes by skipping). Not part of scripts/test.sh: a guest under TCG takes minutes.
#
# Environment: CACHE_MODES (default "none loose mmap default tcp": the cache= option over the
# fd transport, "default" the client's own defaults, "tcp" trans=tcp with msize 1 MiB),
# MSIZE (default 65536, the fd modes'), MANY_FILES (default 400), MANY_FIDS (default 5000),
# TRACE=1 (the server's --trace log is kept and its path printed), FSOC_BIN (use this fsoc
# binary instead of building one), KEEP=1 (keep the work directory), VM_TIMEOUT_SECONDS
# (default 600: a guest still running then is stopped and the run fails).
# Needs: qemu-system-x86 linux-image-amd64 busybox-static cpio kmod gcc (scripts/setup.sh --vm).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=("qemu-system-x86_64 (package qemu-system-x86)")
scripts/vm/kernel-version.sh >/dev/null 2>&1 ||
  missing+=("a kernel with 9P modules in /boot and /lib/modules (package linux-image-amd64)")
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } ||
  missing+=("a static /bin/busybox (package busybox-static)")
command -v cpio >/dev/null || missing+=("cpio")
command -v modprobe >/dev/null || missing+=("modprobe (package kmod)")
command -v gcc >/dev/null || missing+=("gcc (builds the static v9fs-probe)")
if [ ${#missing[@]} -gt 0 ]; then
  for what in "${missing[@]}"; do echo "MISSING $what"; done
  echo "test-v9fs: cannot run; install with: sudo scripts/setup.sh --vm"
  exit 2
fi

if [ -n "${FSOC_BIN:-}" ]; then
  fsoc=$FSOC_BIN
else
  cargo build --release -q -p fsoc-cli || { echo "FAIL build: cargo build -p fsoc-cli"; exit 1; }
  fsoc=$PWD/target/release/fsoc
fi

work=$(mktemp -d /tmp/fsoc-v9fs.XXXXXX)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ] || [ "${TRACE:-0}" = 1 ]; then
    echo "test-v9fs: work directory kept: $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

failures=0
result() { # result PASS|FAIL NAME [DETAIL]
  echo "$1 ${2}${3:+: $3}"
  [ "$1" = PASS ] || failures=$((failures + 1))
}

image=$work/volume.img
"$fsoc" mkfs "$image" --size 128M >/dev/null || { echo "FAIL mkfs"; exit 1; }
trace_flag=()
[ "${TRACE:-0}" = 1 ] && trace_flag=(--trace)
# One server on loopback TCP, reached twice: by QEMU's virtio-serial port (trans=fd in the
# guest) and by the guest's own TCP connections through QEMU's user network (trans=tcp).
"$fsoc" serve "$image" --listen tcp:127.0.0.1:0 "${trace_flag[@]}" 2> "$work/serve.log" &
server_pid=$!
port=
for _ in $(seq 1 100); do
  port=$(sed -n 's/.* on tcp:127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$work/serve.log" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL serve: no listening address after 10 s"; cat "$work/serve.log"; exit 1; }

gcc -O2 -Wall -static -o "$work/v9fs-probe" scripts/vm/v9fs-probe.c || { echo "FAIL build: v9fs-probe"; exit 1; }
scripts/vm/build-initramfs.sh "$work/base.cpio.gz" >/dev/null || { echo "FAIL build: initramfs"; exit 1; }
mkdir -p "$work/payload"
install -m 755 scripts/vm/v9fs-workload.sh "$work/payload/run.sh"
cp "$work/v9fs-probe" "$work/payload/"
cat > "$work/payload/settings" <<EOF
CACHE_MODES="${CACHE_MODES:-none loose mmap default tcp}"
TCP_PORT=$port
MSIZE=${MSIZE:-65536}
MANY_FILES=${MANY_FILES:-400}
MANY_FIDS=${MANY_FIDS:-5000}
EXTRA_OPTIONS="${EXTRA_OPTIONS:-}"
EOF

echo "test-v9fs: booting the guest (TCG: a few minutes); console in $work/console.log"
VM_TIMEOUT_SECONDS=${VM_TIMEOUT_SECONDS:-600} scripts/vm/boot.sh "$work/base.cpio.gz" "$work/payload" 1024 \
  -device virtio-serial -chardev "socket,id=p9,host=127.0.0.1,port=$port" \
  -device virtserialport,chardev=p9,name=p9 -nic "user,model=virtio-net-pci" \
  2>&1 | tr -d '\r' > "$work/console.log"
boot_status=${PIPESTATUS[0]}
grep -E '^RESULT (PASS|FAIL) ' "$work/console.log" | sed 's/^RESULT //' | while read -r verdict cache rest; do
  echo "$verdict [cache=$cache] $rest"
done
guest_failures=$(grep -c '^RESULT FAIL ' "$work/console.log")
failures=$((failures + guest_failures))
if ! grep -q '^RESULT DONE ' "$work/console.log"; then
  result FAIL guest "the workload did not finish (boot.sh status $boot_status); the console's end:"
  tail -n 30 "$work/console.log"
fi

# The server stops cleanly (commits) and the image holds what the guest wrote.
kill -TERM "$server_pid"
wait "$server_pid"
serve_status=$?
server_pid=
if [ $serve_status = 0 ]; then
  result PASS server_stop
else
  result FAIL server_stop "status $serve_status"
  tail -n 20 "$work/serve.log"
fi
if grep -qE 'panic|internal error' "$work/serve.log"; then
  result FAIL server_log "$(grep -m1 -E 'panic|internal error' "$work/serve.log")"
fi
"$fsoc" fsck "$image" > "$work/fsck.log" 2>&1 && result PASS fsck || result FAIL fsck "$(tail -n 3 "$work/fsck.log")"
grep '^GUEST md5 ' "$work/console.log" | while read -r _ _ path md5; do
  host_md5=$("$fsoc" cat "$image:/$path" | md5sum | cut -d' ' -f1)
  if [ "$host_md5" = "$md5" ]; then
    echo "PASS image_content $path"
  else
    echo "FAIL image_content $path: $host_md5 on the image, $md5 in the guest"
  fi
done | tee "$work/content.log"
failures=$((failures + $(grep -c '^FAIL' "$work/content.log")))
[ "$(grep -c '^PASS' "$work/content.log")" -gt 0 ] ||
  result FAIL image_content "no file read back (no md5 from the guest)"

echo "test-v9fs: $failures failure(s), $(($(date +%s) - started)) s wall"
[ $failures = 0 ] || { KEEP=1; exit 1; }
exit 0
