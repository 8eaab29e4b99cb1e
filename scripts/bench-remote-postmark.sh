#!/usr/bin/env bash
# PostMark through `fsoc mount --remote` (fsoc serve over a Unix socket and over loopback TCP)
# and through the local `fsoc mount`, on equal fresh images, in the configuration `fsoc bench
# fuse` uses (crates/fsoc-bench/src/fuse/workloads.rs, Scale::full: 10 subdirectories,
# 1,000 files of 512 B-16 KiB, 10,000 transactions, 512 B reads and writes, unbuffered,
# seed 4; a 1 GiB mlc image; default mount options). Repetitions alternate local, unix, tcp and
# unix-wb (a Unix socket with -o writeback_cache).
# Prints one line per run and the medians; needs root, /dev/fuse and postmark.
# Usage: [MODES='local unix tcp unix-wb'] scripts/bench-remote-postmark.sh [FSOC_BINARY] [REPETITIONS]
set -euo pipefail
fsoc=${1:-target/release/fsoc}
repetitions=${2:-3}
modes=${MODES:-local unix tcp unix-wb}
fsoc=$(realpath "$fsoc")
scratch=$(mktemp -d /var/tmp/fsoc-remote-bench.XXXXXX)
trap 'fusermount3 -u -z "$scratch/mnt" 2>/dev/null || true; rm -rf "$scratch"' EXIT
mkdir "$scratch/mnt"
cat > "$scratch/postmark.cfg" <<CFG
set location $scratch/mnt/postmark
set subdirectories 10
set number 1000
set size 512 16384
set transactions 10000
set read 512
set write 512
set buffering false
set seed 4
run
quit
CFG

run_postmark() {
    mkdir "$scratch/mnt/postmark"
    local start end
    start=$(date +%s.%N)
    postmark "$scratch/postmark.cfg" > "$scratch/postmark.out"
    end=$(date +%s.%N)
    grep -q "Deleting subdirectories...Done" "$scratch/postmark.out"
    echo "$end - $start" | bc
}

one_run() { # mode: local, unix, tcp, or unix-wb (unix with -o writeback_cache)
    local mode=$1 seconds server_pid address extra=()
    rm -f "$scratch/img"
    "$fsoc" mkfs "$scratch/img" --size 1G --profile mlc > /dev/null
    if [ "$mode" = local ]; then
        "$fsoc" mount "$scratch/img" "$scratch/mnt" --daemon 2> /dev/null
    else
        if [ "$mode" = tcp ]; then address="tcp:127.0.0.1:0"; else address="unix:$scratch/sock"; fi
        if [ "$mode" = unix-wb ]; then extra=(-o writeback_cache); fi
        # stdout away from the caller's pipe: a server left behind must not hold it open.
        "$fsoc" serve "$scratch/img" --listen "$address" > /dev/null 2> "$scratch/serve.log" &
        server_pid=$!
        # The address the server bound, from its first line (waiting up to 10 s for it).
        address=""
        for _ in $(seq 200); do
            address=$(sed -n 's/.* on \([^ ]*\) (9P2000.L).*/\1/p' "$scratch/serve.log" 2> /dev/null)
            [ -n "$address" ] && break
            sleep 0.05
        done
        if [ -z "$address" ]; then
            echo "fsoc serve did not say where it listens:" >&2
            cat "$scratch/serve.log" >&2
            kill -TERM "$server_pid" 2> /dev/null || true
            return 1
        fi
        if ! "$fsoc" mount --remote "$address" "$scratch/mnt" --daemon "${extra[@]}" 2> "$scratch/mount.log"; then
            cat "$scratch/mount.log" >&2
            kill -TERM "$server_pid"
            return 1
        fi
    fi
    seconds=$(run_postmark)
    "$fsoc" umount "$scratch/mnt" 2> /dev/null
    if [ "$mode" != local ]; then
        kill -TERM "$server_pid"
        wait "$server_pid"
    fi
    "$fsoc" fsck "$scratch/img" > /dev/null
    echo "$mode $seconds"
}

for repetition in $(seq "$repetitions"); do
    for mode in $modes; do
        one_run "$mode" | tee -a "$scratch/results"
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $modes; do
    median=$(awk -v mode="$mode" '$1 == mode { print $2 }' "$scratch/results" | sort -n | awk '{ values[NR] = $1 } END { print values[int((NR + 1) / 2)] }')
    echo "median $mode $median"
done
