#!/bin/sh
# Runs inside the guest (as /payload/run.sh, started by scripts/bench-mtd.sh): `fsoc bench mtd`
# on the kernel's nandsim, then the JSON it wrote on the console, each line prefixed with
# "JSON " so that the host can take it apart from anything else the console shows.
# `BENCH DONE STATUS` ends the run. Settings (from ./settings): BENCH_ARGUMENTS (passed on),
# BENCH_CODE (the code measured) and BENCH_HOST (the machine outside), for the JSON.
set -a
. ./settings
set +a
cd /
# Kernel messages would interleave with the JSON on the console: only emergencies from now on.
dmesg -n 1
load-module fuse > /dev/null 2>&1
[ -c /dev/fuse ] || mknod /dev/fuse c 10 229
mkdir -p /tmp/bench
echo "guest: fsoc bench mtd $BENCH_ARGUMENTS"
# shellcheck disable=SC2086 # the arguments are words on purpose
fsoc bench mtd --json /tmp/bench/mtd.json --module-loader load-module --scratch /tmp --code "$BENCH_CODE" \
  --host "$BENCH_HOST" $BENCH_ARGUMENTS
status=$?
[ -f /tmp/bench/mtd.json ] && sed 's/^/JSON /' /tmp/bench/mtd.json
echo "BENCH DONE $status"
