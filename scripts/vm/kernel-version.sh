#!/usr/bin/env bash
# Prints the newest kernel version that has both an image in /boot and modules in
# /lib/modules (Debian's linux-image-amd64 installs both); exits 2, saying what is missing,
# when there is none.
set -euo pipefail
for version in $(ls /lib/modules 2>/dev/null | sort -rV); do
  if [ -r "/boot/vmlinuz-$version" ] && [ -d "/lib/modules/$version/kernel/fs/9p" ]; then
    echo "$version"
    exit 0
  fi
done
echo "no kernel with 9P modules: need /boot/vmlinuz-VERSION and /lib/modules/VERSION/kernel/fs/9p" \
  "(install linux-image-amd64: scripts/setup.sh --vm)" >&2
exit 2
