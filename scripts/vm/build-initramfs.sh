#!/usr/bin/env bash
# Packs a small initramfs for Debian's own kernel (linux-image-amd64): static busybox, the
# modules the kernel's 9P2000.L client needs over a virtio-serial port or a virtio network
# card (virtio_pci, virtio_console, virtio_net, 9pnet_fd, 9p and what they depend on), extra
# host programs given as arguments (static ones, or with their shared libraries), and an
# /init that loads the
# modules, runs /payload/run.sh if boot.sh appended one, and powers the machine off.
#
# Usage: [EXTRA_MODULES="nandsim fuse ..."] scripts/vm/build-initramfs.sh OUT.cpio.gz [HOST_PROGRAM...]
# EXTRA_MODULES are carried with their dependencies but not loaded at boot: the payload loads
# one, with parameters, by `load-module NAME [PARAMETER...]` (e.g. nandsim with a geometry).
# Needs (Debian): linux-image-amd64 busybox-static cpio kmod (see scripts/setup.sh --vm).
set -euo pipefail
out=${1:?usage: build-initramfs.sh OUT.cpio.gz [HOST_PROGRAM...]}
shift
kernel_version=$("$(dirname "$0")/kernel-version.sh")
# The guest has no C library: busybox must be the static build (ldd refuses it).
busybox=/bin/busybox
if [ ! -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "build-initramfs: $busybox is missing or not static (install busybox-static)" >&2
  exit 2
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,mnt,run,etc,lib/modules}
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
# Each module once, dependencies first: modprobe prints the insmod lines in load order.
: > "$root/etc/modules.order"
for module in virtio_pci virtio_console virtio_net 9pnet_fd 9p; do
  modprobe -S "$kernel_version" --show-depends "$module" | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r object; do
  cp "$object" "$root/lib/modules/"
  echo "/lib/modules/$(basename "$object")" >> "$root/etc/modules.order"
done
# Extra modules: /etc/modules.extra/NAME lists NAME's objects in load order (itself last).
mkdir -p "$root/etc/modules.extra"
for module in ${EXTRA_MODULES:-}; do
  modprobe -S "$kernel_version" --show-depends "$module" | awk '$1 == "insmod" { print $2 }' |
    while read -r object; do
      cp -n "$object" "$root/lib/modules/"
      echo "/lib/modules/$(basename "$object")" >> "$root/etc/modules.extra/$module"
    done
  [ -s "$root/etc/modules.extra/$module" ] || { echo "build-initramfs: no module $module" >&2; exit 2; }
done
cat > "$root/sbin/load-module" <<'LOAD'
#!/bin/sh
# load-module NAME [PARAMETER...]: loads NAME's dependencies (those already loaded are left)
# and NAME itself with the parameters.
list=/etc/modules.extra/${1:?usage: load-module NAME [PARAMETER...]}
shift
[ -r "$list" ] || { echo "load-module: $list: not carried (EXTRA_MODULES)" >&2; exit 2; }
last=$(tail -n 1 "$list")
grep -vxF "$last" "$list" | while read -r object; do insmod "$object" 2>/dev/null; done
insmod "$last" "$@"
LOAD
chmod +x "$root/sbin/load-module"
for program in "$@"; do
  path=$(command -v "$program") || { echo "build-initramfs: no program $program" >&2; exit 2; }
  cp "$path" "$root/sbin/$(basename "$path")"
  # Shared libraries (none for a static program: ldd then prints no paths).
  ldd "$path" 2>/dev/null | awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | while read -r library; do
    if [ -f "$library" ]; then mkdir -p "$root$(dirname "$library")"; cp -n "$library" "$root$library"; fi
  done
done
cat > "$root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
while read -r module; do insmod "$module" 2>/dev/null; done < /etc/modules.order
echo "guest: kernel $(uname -r) up after $(cut -d' ' -f1 /proc/uptime) s"
if [ -x /payload/run.sh ]; then
  (cd /payload && ./run.sh); echo "guest: run.sh exit status $?"
else
  echo "guest: no /payload/run.sh"
fi
sync; poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 > "$out"
echo "build-initramfs: $out for kernel $kernel_version ($(du -h "$out" | cut -f1))"
