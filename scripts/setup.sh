#!/usr/bin/env bash
# Installs what fsoc needs beyond the Rust toolchain. Idempotent; safe to run every time.
# Debian packages: libclang-dev (bindgen for the littlefs2 benchmark peer), fuse3 (FUSE mount:
# fusermount3), and the real programs the FUSE tests run on a mount: sqlite3, fio, dbench,
# postmark, git, diffutils (diff -r), tar, findutils (find), and attr, acl and libcap2-bin
# (getfattr/setfattr, getfacl/setfacl, setcap/getcap) for the extended-attribute tests.
#
# `scripts/setup.sh --vm` also installs what scripts/test-v9fs.sh needs to boot a real Linux
# kernel with its 9P client under QEMU (qemu-system-x86, linux-image-amd64, busybox-static, cpio,
# kmod, gcc for the static probe program) and scripts/test-mtd.sh (the same, mtd-utils for
# its UBI + UBIFS comparison, and nfs-kernel-server, whose programs the guest runs to export the
# FUSE mount over NFS; on the host its services are not started). Opt-in: they are large and only those tests use them.
set -euo pipefail
install_vm_packages() {
  local vm_need=()
  for package in qemu-system-x86 linux-image-amd64 busybox-static cpio kmod gcc mtd-utils nfs-kernel-server; do
    dpkg -s "$package" >/dev/null 2>&1 || vm_need+=("$package")
  done
  [ ${#vm_need[@]} -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ]; then
    echo "setup: please install ${vm_need[*]} (needs root)" >&2
    return 0
  fi
  echo "setup: installing the VM packages ${vm_need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${vm_need[@]}" >/dev/null
}
for argument in "$@"; do
  case "$argument" in
    --vm) install_vm_packages ;;
    *) echo "setup: unknown option $argument (known: --vm)" >&2; exit 2 ;;
  esac
done
need=()
for package in libclang-dev fuse3 pkg-config sqlite3 fio dbench postmark git diffutils tar findutils attr acl libcap2-bin; do
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
# Python 9P client for the `fsoc serve` tests (crates/fsoc-cli/tests/serve.rs): p9fs, an fsspec
# file system in pure Python (it brings py9p and fsspec). Quiet, and only when missing.
if ! command -v python3 >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing python3"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip >/dev/null
fi
if ! python3 -c 'import p9fs' >/dev/null 2>&1; then
  echo "setup: installing the Python package p9fs"
  # Debian's own python3 refuses pip outside a virtual environment unless told otherwise.
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore p9fs 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages p9fs \
    || echo "setup: pip install p9fs failed (the serve tests need it)" >&2
fi
# The Python package's build and test tools (python/, see its section in README.md): maturin,
# pytest and mypy in a virtual environment under target/, so nothing is installed system-wide
# (Debian's python3 is externally managed). Debian's python3 needs python3-venv for this.
python_venv="$(cd "$(dirname "$0")/.." && pwd)/target/python-venv"
if ! "$python_venv/bin/python" -c 'import maturin, pytest, mypy' >/dev/null 2>&1; then
  echo "setup: making $python_venv (maturin, pytest, mypy for the Python package)"
  if ! python3 -m venv "$python_venv" >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$python_venv"
  fi
  "$python_venv/bin/pip" install --quiet --disable-pip-version-check 'maturin>=1.5,<2' 'pytest>=7' mypy \
    || echo "setup: pip install maturin pytest mypy failed (the Python package's tests need them)" >&2
fi
