#!/usr/bin/env bash
# Installs what fsoc needs beyond the Rust toolchain. Idempotent; safe to run every time.
# Debian packages: libclang-dev (bindgen for the littlefs2 benchmark peer), fuse3 (FUSE mount:
# fusermount3), and the real programs the FUSE tests run on a mount: sqlite3, fio, dbench,
# postmark, git, diffutils (diff -r), tar, findutils (find).
set -euo pipefail
need=()
for package in libclang-dev fuse3 pkg-config sqlite3 fio dbench postmark git diffutils tar findutils; do
  dpkg -s "$package" >/dev/null 2>&1 || need+=("$package")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: please install ${need[*]} (needs root)" >&2
  fi
fi
