#!/usr/bin/env bash
# The whole test suite: set-up, the workspace tests, and the no_std build of the core.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== one minimum Rust version"
bash scripts/check-rust-version.sh
# ... and no std API newer than it (clippy knows when each was stabilized).
cargo clippy --quiet --release --workspace --all-targets -- -A clippy::all -A warnings -D clippy::incompatible_msrv
echo "== formatting (rustfmt.toml)"
cargo fmt --check
echo "== layer rule (no crate depends on a crate of its own or a higher layer)"
python3 scripts/check-layers.py
echo "== the fsoc command without the lab (no littlefs peer, so no libclang)"
if cargo tree -p fsoc-cli --no-default-features -e normal | grep -q littlefs; then
    echo "fsoc-cli reaches littlefs without the lab feature" >&2
    exit 1
fi
cargo check --quiet --release -p fsoc-cli --no-default-features
# ... and no product build opens the core's test-only window (FileSystem::craft).
if cargo tree -p fsoc-cli -p fsoc-fuse -e normal -f '{p} [{f}]' | grep -q 'fsoc-core.*craft'; then
    echo "a product build enables fsoc-core's test-only craft feature" >&2
    exit 1
fi
echo "== clippy, warnings denied"
cargo clippy --quiet --release --workspace --all-targets -- -D warnings
echo "== fsoc for firmware: the no_std core behind a C ABI (crates/fsoc-c, its own workspace: panic = abort)"
# no_std with its own panic handler, so a dependency that pulled in std would fail to link.
cargo fmt --check --manifest-path crates/fsoc-c/Cargo.toml
cargo clippy --quiet --release --manifest-path crates/fsoc-c/Cargo.toml --target-dir target/fsoc-c -- -D warnings
# ... its header is what cbindgen generates (include/fsoc.h) ...
cargo test --quiet --release --manifest-path crates/fsoc-c/Cargo.toml --target-dir target/fsoc-c
# ... and C drives it (gcc -Os -Wall -Wextra -Werror): the example on a 1 GiB 4-chip RAM NAND,
# a power cut at every program and erase of a seeded workload, and code size and RAM beside
# littlefs's (same compiler, flags and workload).
bash examples/c/run.sh --measure
echo "== fsoc-flash without std (the table CRC-32C the no_std core uses)"
cargo test --quiet --release -p fsoc-flash --no-default-features
echo "== workspace tests"
cargo test --workspace --release 2>&1
echo "== the Python package (python/): pip install ./python (maturin, abi3 wheel), mypy --strict, pytest"
# After the workspace tests, which build target/release/fsoc: the tests check images both ways.
# (maturin's build backend runs the maturin on PATH: the environment's.)
PATH="$PWD/target/python-venv/bin:$PATH" target/python-venv/bin/pip install --quiet --disable-pip-version-check \
    --no-build-isolation ./python
target/python-venv/bin/mypy --strict python/fsoc
FSOC_BIN="$PWD/target/release/fsoc" target/python-venv/bin/python -m pytest -q python/tests
echo "== fsoc on raw NAND under a real Linux kernel (QEMU, nandsim /dev/mtd0): the short set"
# The VM packages are large and opt-in for the main job; the test installs them here. If they
# cannot be installed, scripts/test-mtd.sh says SKIP (exit 77) and names what is missing.
bash scripts/setup.sh --vm || echo "test: the VM packages could not be installed; the raw-NAND set will skip"
status=0
bash scripts/test-mtd.sh --short || status=$?
if [ "$status" = 77 ]; then
    echo "SKIP: the raw-NAND set could not boot a kernel here (see above); every other test ran"
elif [ "$status" != 0 ]; then
    echo "the raw-NAND set failed (exit $status)" >&2
    exit 1
fi
