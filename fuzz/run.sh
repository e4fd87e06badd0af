#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), JOBS at a time (default 1), with
# the committed seeds in corpus/<target> and new inputs in scratch/<target> (ignored by git).
# libFuzzer options: -malloc_limit_mb=16 reports any single allocation over 16 MiB (no decoder
# needs more than 4 MiB), -timeout=2 any input that takes over 2 s, -rss_limit_mb=2048.
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain (or RUSTC_BOOTSTRAP=1
# with stable and `-s none`, see README.md). Prints one line per target; logs in scratch/.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
jobs=${2:-1}
toolchain=${FUZZ_TOOLCHAIN:-+nightly}
sanitizer=${FUZZ_SANITIZER:-address}
mapfile -t targets < <(cargo $toolchain fuzz list)
cargo $toolchain fuzz build -s "$sanitizer" >/dev/null
mkdir -p scratch
run_one() {
    local t=$1
    mkdir -p "scratch/$t"
    if cargo $toolchain fuzz run -s "$sanitizer" "$t" "scratch/$t" "corpus/$t" -- \
        -max_total_time="$secs" -malloc_limit_mb=16 -rss_limit_mb=2048 -timeout=2 \
        >"scratch/$t.log" 2>&1; then
        echo "$t: ok $(grep -E '^Done [0-9]+ runs' "scratch/$t.log" | tail -1) $(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "scratch/$t.log" | tail -1)"
    else
        echo "$t: FAILED (see fuzz/scratch/$t.log and fuzz/artifacts/$t/)"
    fi
}
export -f run_one
export secs toolchain sanitizer
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
