#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder (issue 12 point 6): runs each libFuzzer target of
# fuzz/ for SECONDS, one after another, one job each, and prints per target the executions,
# their rate and whether anything was found. Exits non-zero if any target crashed, timed out
# or ran out of memory.
#
#   scripts/fuzz.sh SECONDS [TARGET ...]     (default: every target, `cargo fuzz list`)
#
# Each target starts from its committed corpus fuzz/corpus/<target>/ (read only here) and
# keeps what it finds in fuzz/target/corpus/<target>/; crashes go to fuzz/artifacts/<target>/
# and the full libFuzzer log to fuzz/target/logs/<target>.log. To fold new finds into the
# committed corpus, see crates/fsoc-fuzz-targets/README.md ("Corpora").
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
    echo "usage: $0 SECONDS [TARGET ...]" >&2
    exit 2
fi
seconds=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
fuzz_dir=$root/fuzz

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
# libFuzzer instrumentation needs nightly; install it if missing.
if ! cargo +nightly --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi

# No sanitizer: the decoders are safe Rust (fsoc-9p and fsoc-serve forbid unsafe code; the
# only unsafe code the targets link, fsoc-media's preadv, is never reached), so AddressSanitizer
# would only slow each execution. Debug assertions (overflow checks) stay on, cargo-fuzz's
# default. fuzz/target is kept apart from the workspace's target directory.
fuzz=(cargo +nightly fuzz)
build_options=(--fuzz-dir "$fuzz_dir" --sanitizer none --target-dir "$fuzz_dir/target")

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <("${fuzz[@]}" list --fuzz-dir "$fuzz_dir")
fi

echo "== building ${#targets[@]} targets"
mkdir -p "$fuzz_dir/target/logs"
if ! "${fuzz[@]}" build "${build_options[@]}" >"$fuzz_dir/target/logs/build.log" 2>&1; then
    cat "$fuzz_dir/target/logs/build.log" >&2
    exit 1
fi

failed=()
printf '%-34s %14s %12s  %s\n' target executions exec/s result
for target in "${targets[@]}"; do
    work=$fuzz_dir/target/corpus/$target
    artifacts=$fuzz_dir/artifacts/$target
    job=$fuzz_dir/target/jobs/$target
    log=$fuzz_dir/target/logs/$target.log
    mkdir -p "$work" "$artifacts" "$job"
    rm -f "$job"/fuzz-*.log
    # -jobs=1 -workers=1: one fuzzing process at a time (the machine is shared); libFuzzer then
    # writes the job's output to fuzz-0.log in the working directory.
    status=0
    (cd "$job" && "${fuzz[@]}" run "${build_options[@]}" "$target" "$work" "$fuzz_dir/corpus/$target" -- \
        -max_total_time="$seconds" -jobs=1 -workers=1 -timeout=10 -rss_limit_mb=1024 \
        -print_final_stats=1 -artifact_prefix="$artifacts/") >"$log.driver" 2>&1 || status=$?
    cat "$log.driver" "$job"/fuzz-*.log >"$log" 2>/dev/null || true
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    found=$(grep -Eo 'Test unit written to [^ ]+' "$log" | sed 's/Test unit written to //' | sort -u | tr '\n' ' ' || true)
    if [[ $status -ne 0 || -n $found ]] || grep -Eq 'exited with exit code [1-9]|ERROR: libFuzzer|panicked at' "$log"; then
        result="FOUND: ${found:-see $log}"
        failed+=("$target")
    else
        result="nothing found"
    fi
    printf '%-34s %14s %12s  %s\n' "$target" "${executions:-?}" "${rate:-?}" "$result"
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "== crashes, timeouts or memory blow-ups in: ${failed[*]} (logs in fuzz/target/logs/)" >&2
    exit 1
fi
echo "== ${#targets[@]} targets, ${seconds} s each: nothing found"
