# Sourced (bash) by scripts/test-mtd.sh and scripts/bench-mtd.sh: what both need to run fsoc
# on nandsim in the guest. Run from the repository's root.
#
#   mtd_guest_missing           prints a MISSING line per absent prerequisite (QEMU, kernel with
#                               nandsim, static busybox, cpio, modprobe, fusermount3); status 1
#                               if any is missing
#   mtd_guest_fsoc              sets $fsoc: $FSOC_BIN, or a release build of fsoc-cli
#   mtd_guest_initramfs OUT BIN_DIR [PROGRAM...]
#                               packs BIN_DIR/fsoc, fusermount3, the UBI tools and flash_erase
#                               the host has (mtd-utils), its NFS server's programs
#                               (nfs-kernel-server) and PROGRAM... with the modules nandsim,
#                               fuse, ubi, ubifs, zstd, nfsd and nfsv4 into OUT
#                               (scripts/vm/build-initramfs.sh)

mtd_guest_missing() {
  local missing=() kernel_version
  command -v qemu-system-x86_64 >/dev/null || missing+=("qemu-system-x86_64 (package qemu-system-x86)")
  kernel_version=$(scripts/vm/kernel-version.sh 2>/dev/null) ||
    missing+=("a kernel image and modules in /boot and /lib/modules (package linux-image-amd64)")
  if [ -n "${kernel_version:-}" ] &&
    ! modprobe -S "$kernel_version" --show-depends nandsim >/dev/null 2>&1; then
    missing+=("the nandsim module for kernel $kernel_version")
  fi
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } ||
    missing+=("a static /bin/busybox (package busybox-static)")
  command -v cpio >/dev/null || missing+=("cpio")
  command -v modprobe >/dev/null || missing+=("modprobe (package kmod)")
  command -v fusermount3 >/dev/null || missing+=("fusermount3 (package fuse3)")
  [ ${#missing[@]} -eq 0 ] && return 0
  local what
  for what in "${missing[@]}"; do echo "MISSING $what"; done
  return 1
}

mtd_guest_fsoc() {
  if [ -n "${FSOC_BIN:-}" ]; then
    fsoc=$FSOC_BIN
  else
    cargo build --release -q -p fsoc-cli || return 1
    # Where cargo put it: CARGO_TARGET_DIR when set (a stale ./target must not be booted).
    fsoc=${CARGO_TARGET_DIR:-$PWD/target}/release/fsoc
  fi
}

mtd_guest_initramfs() {
  local out=$1 bin_directory=$2
  shift 2
  # The guest finds the programs by name: fsoc under its own name.
  local programs=("$bin_directory/fsoc" fusermount3) program
  # The NFS server's programs (nfs-kernel-server) for the nfs_export case.
  for program in ubiformat ubiattach ubidetach ubimkvol flash_erase rpc.nfsd rpc.mountd exportfs mount.nfs; do
    command -v "$program" >/dev/null && programs+=("$program")
  done
  local modules="nandsim fuse ubi ubifs zstd" kernel_version module
  kernel_version=$(scripts/vm/kernel-version.sh)
  for module in nfsd nfsv4; do
    modprobe -S "$kernel_version" --show-depends "$module" >/dev/null 2>&1 && modules="$modules $module"
  done
  EXTRA_MODULES="$modules" scripts/vm/build-initramfs.sh "$out" "${programs[@]}" "$@"
}
