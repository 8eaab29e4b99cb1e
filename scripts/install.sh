#!/usr/bin/env bash
# Installs the fsoc command and mount(8)'s helper for type fuse.fsoc, so that
# `mount -t fuse.fsoc IMAGE DIR`, fstab lines, `mount -a` and `mount -o remount,ro|rw DIR`
# work (docs/MOUNT.md). Run it yourself, as root: scripts/setup.sh never installs anything
# outside the build.
#
#   scripts/install.sh [--prefix DIR] [--binary PATH]   install (default prefix /usr/local)
#   scripts/install.sh --uninstall [--prefix DIR]       remove what install put there
#
# The helper is a symbolic link /sbin/mount.fuse.fsoc -> PREFIX/bin/fsoc: started under that
# name, fsoc acts as the helper (one program, one option parser). libmount looks for helpers
# only in /sbin, /sbin/fs.d and /sbin/fs, and /sbin/mount.fuse would otherwise take every
# fuse.* type, so the link must be in /sbin itself.
set -euo pipefail
prefix=/usr/local
binary=
uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install: unknown argument $1 (see --help)" >&2; exit 1 ;;
  esac
done
helper=/sbin/mount.fuse.fsoc
installed="$prefix/bin/fsoc"
if [ "$(id -u)" != 0 ]; then
  echo "install: run as root (it writes $installed and $helper)" >&2
  exit 1
fi

if [ "$uninstall" = 1 ]; then
  # Only what this script made: a helper link to our binary, and the binary.
  if [ -L "$helper" ] && [ "$(readlink "$helper")" = "$installed" ]; then
    rm -f "$helper" && echo "install: removed $helper"
  elif [ -e "$helper" ] || [ -L "$helper" ]; then
    echo "install: leaving $helper: it does not link to $installed" >&2
  fi
  if [ -f "$installed" ]; then
    rm -f "$installed" && echo "install: removed $installed"
  fi
  exit 0
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$binary" ]; then
  binary="$root/target/release/fsoc"
  if [ ! -x "$binary" ]; then
    echo "install: building $binary"
    (cd "$root" && cargo build --release -p fsoc-cli --bin fsoc)
  fi
fi
[ -x "$binary" ] || { echo "install: $binary is not an executable" >&2; exit 1; }
if [ -e "$helper" ] && ! { [ -L "$helper" ] && [ "$(readlink "$helper")" = "$installed" ]; }; then
  echo "install: $helper exists and is not a link to $installed; remove it first" >&2
  exit 1
fi
install -D -m 0755 "$binary" "$installed"
ln -sfn "$installed" "$helper"
# The helper must answer under its name: a quick check that the link works.
"$helper" --help >/dev/null
echo "install: $installed, and $helper -> $installed"
echo "install: try: mount -t fuse.fsoc IMAGE DIR -o nosuid  (options: docs/MOUNT.md)"
