#!/usr/bin/env bash
# One minimum Rust version for the whole workspace, and it is the true one: every crate
# inherits the workspace's rust-version, README states the same, the installed rustc meets it,
# and no locked dependency needs a newer Rust than it claims.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^rust-version = "\([0-9.]*\)"$/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "rust-version: none in the workspace Cargo.toml" >&2; exit 1; }
status=0
for manifest in crates/*/Cargo.toml; do
  if grep -q '^\[workspace\]$' "$manifest"; then
    # A crate with its own workspace (crates/fsoc-c: panic = abort) states the same version.
    if ! grep -q "^rust-version = \"$version\"$" "$manifest"; then
      echo "rust-version: $manifest (its own workspace) does not say rust-version = \"$version\"" >&2; status=1
    fi
    continue
  fi
  if ! grep -q '^rust-version.workspace = true$' "$manifest"; then
    echo "rust-version: $manifest does not inherit the workspace rust-version" >&2; status=1
  fi
done
if ! grep -q "Rust $version or newer" README.md; then
  echo "rust-version: README.md does not say \"Rust $version or newer\"" >&2; status=1
fi
others=$(grep -rhoE '(Rust|rust-version|MSRV)[^0-9]{0,12}1\.[0-9]+' README.md docs ARCHITECTURE.md crates/*/Cargo.toml 2>/dev/null | grep -oE '1\.[0-9]+' | sort -u | grep -vx "$version" || true)
if [ -n "$others" ]; then
  echo "rust-version: other minimum versions mentioned: $others (the workspace says $version)" >&2; status=1
fi
installed=$(rustc --version | sed -n 's/^rustc \([0-9]*\.[0-9]*\).*/\1/p')
newest() { printf '%s\n%s\n' "$1" "$2" | sort -t. -k1,1n -k2,2n | tail -1; }
if [ "$(newest "$installed" "$version")" != "$installed" ]; then
  echo "rust-version: rustc $installed is older than the workspace's $version" >&2; status=1
fi
needed=$(cargo metadata --format-version 1 --locked 2>/dev/null | python3 -c '
import json, sys
packages = json.load(sys.stdin)["packages"]
versions = [tuple(int(part) for part in (package.get("rust_version") or "0.0").split(".")[:2]) for package in packages]
print("%d.%d" % max(versions))')
if [ "$(newest "$needed" "$version")" != "$version" ]; then
  echo "rust-version: a locked dependency needs Rust $needed, newer than the workspace's $version" >&2; status=1
fi
[ $status = 0 ] && echo "rust-version: $version everywhere (rustc $installed, dependencies need $needed)"
exit $status
