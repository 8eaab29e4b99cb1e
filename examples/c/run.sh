#!/usr/bin/env bash
# Builds fsoc's C library for firmware (crates/fsoc-c: no_std, panic = abort, opt-level "s")
# and the C programs over it with gcc -Os -Wall -Wextra -Werror, then runs them:
#   example            format, files, directories, fsck, remount and read back on a 1 GiB,
#                      4-chip RAM NAND array (ram_flash.c);
#   powercut 1 1200    a power cut at every program and erase of a seeded 1,200-step workload;
#   --measure          also the code size and RAM of the library beside littlefs's (size/),
#                      same compiler, same flags, same workload, same RAM NAND; and the heap
#                      fsoc needs on a full 1 GiB volume (size/fill.c, 1 GiB of RAM NAND).
# scripts/test.sh runs it (with --measure); it needs cargo, gcc and binutils' size.
set -euo pipefail
cd "$(dirname "$0")/../.."
measure=0
[ "${1:-}" = --measure ] && measure=1

# Beside the workspace's own build output, never under crates/ (the FUSE tests copy that tree).
target=target/fsoc-c
out=$target/c
mkdir -p "$out"
cargo build --quiet --release --manifest-path crates/fsoc-c/Cargo.toml --target-dir "$target"
library=$target/release/libfsoc.a
cflags=(-std=c11 -Os -Wall -Wextra -Werror -ffunction-sections -fdata-sections -Icrates/fsoc-c/include -Iexamples/c)
ldflags=(-Wl,--gc-sections)

gcc "${cflags[@]}" examples/c/example.c examples/c/ram_flash.c "$library" "${ldflags[@]}" -o "$out/example"
gcc "${cflags[@]}" examples/c/powercut.c examples/c/ram_flash.c "$library" "${ldflags[@]}" -o "$out/powercut"
"$out/example"
"$out/powercut" 1 1200

[ "$measure" = 1 ] || exit 0

# littlefs's C sources: the ones fsoc-bench's littlefs2-sys builds (fetched with the workspace).
littlefs=$(cargo metadata --quiet --format-version 1 | python3 -c '
import json, os, sys
packages = json.load(sys.stdin)["packages"]
print(next(os.path.join(os.path.dirname(p["manifest_path"]), "littlefs") for p in packages if p["name"] == "littlefs2-sys"))')
probe=(examples/c/size/probe_main.c examples/c/ram_flash.c)
# _XOPEN_SOURCE for ucontext in probe_main.c; -Wno-deprecated-declarations: glibc marks it so.
pflags=("${cflags[@]}" -Iexamples/c/size -Wno-deprecated-declarations)
gcc "${pflags[@]}" examples/c/size/probe_none.c "${probe[@]}" "${ldflags[@]}" -o "$out/probe-none"
gcc "${pflags[@]}" examples/c/size/probe_fsoc.c "${probe[@]}" "$library" "${ldflags[@]}" -o "$out/probe-fsoc"
# littlefs as littlefs2-sys builds it (no debug/warn/error prints, no malloc), asserts kept as
# fsoc keeps its invariant checks; its own sources without -Werror (not ours).
lfsflags=(-std=c11 -Os -ffunction-sections -fdata-sections -DLFS_NO_DEBUG -DLFS_NO_WARN -DLFS_NO_ERROR -DLFS_NO_MALLOC)
gcc "${lfsflags[@]}" -c "$littlefs/lfs.c" -o "$out/lfs.o"
gcc "${lfsflags[@]}" -c "$littlefs/lfs_util.c" -o "$out/lfs_util.o"
gcc "${pflags[@]}" -DLFS_NO_MALLOC -I"$littlefs" examples/c/size/probe_littlefs.c "${probe[@]}" "$out/lfs.o" \
    "$out/lfs_util.o" "${ldflags[@]}" -o "$out/probe-littlefs"

read -r _ _ _ none_text none_data none_bss _ < <(size "$out/probe-none" | tail -1 | sed 's/^ *//;s/\t/ /g' | awk '{print "x x x", $1, $2, $3}')
echo
echo "code size and RAM, 1 GiB on 4 RAM NAND chips (2 KiB pages), gcc $(gcc -dumpversion) -Os, x86-64,"
echo "the same workload (format, mount, mkdir, 16 files of 8 KiB synced, list, read back, rename, remove, unmount):"
printf '  %-9s %10s %8s %8s %12s %12s %12s\n' "" "code (B)" "data" "bss" "stack (B)" "heap peak" "state"
for name in fsoc littlefs; do
    read -r text data bss _ < <(size "$out/probe-$name" | tail -1 | awk '{print $1, $2, $3}')
    read -r stack heap state < <("$out/probe-$name")
    printf '  %-9s %10d %8d %8d %12d %12d %12d\n' "$name" $((text - none_text)) $((data - none_data)) \
        $((bss - none_bss)) "$stack" "$heap" "$state"
done
echo "  (code, data, bss: the probe's \`size\` minus the same program without a file system; stack: the"
echo "   deepest point of a painted stack; state: structs and caches littlefs takes from its caller)"
gcc "${cflags[@]}" examples/c/size/fill.c examples/c/ram_flash.c "$library" "${ldflags[@]}" -o "$out/fill"
"$out/fill"
