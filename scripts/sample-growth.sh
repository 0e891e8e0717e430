#!/usr/bin/env bash
# Usage: scripts/sample-growth.sh [THREADS...]
#
# The log's growth from sampling (docs/report.md, Thread states), per thread per second: for each thread
# count (default: 100 and 4) and each mode of fixtures/sample_growth.c (`sleep`: every thread
# blocked in read all along; `run`: every thread computing), runs it for 2 s and for 6 s under
# the shim with WAITSHIM_SAMPLE=10ms and with off, and prints
#   (log(6 s, on) - log(6 s, off)) - (log(2 s, on) - log(2 s, off))  /  4 s  /  threads
# that is what sampling adds per thread per second once the threads are seen (the first look's
# naming of each thread and each thread's totals at its end cancel out), with the interval the
# samples were taken at, the longest (the budget stretches it when looks are dear). Uses the release build.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 4)
target="${CARGO_TARGET_DIR:-$WAITSHIM_ROOT/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cargo build --release --quiet -p waitshim-shim -p waitshim-analyze
scripts/build-fixtures.sh "$work" sample_growth >/dev/null
shim="$target/release/libwaitshim.so"
analyze="$target/release/waitshim-analyze"

# size MODE SECONDS THREADS SAMPLE: the log's size in bytes (the log kept as $work/last.log).
size() {
    rm -f "$work"/waitshim.*.log
    (cd "$work" && LD_PRELOAD="$shim" WAITSHIM_QUIET=1 WAITSHIM_SAMPLE="$4" \
        WAITSHIM_LOG="$work/waitshim.%p.log" ./sample_growth "$1" "$2" "$3" >/dev/null)
    mv "$work"/waitshim.*.log "$work/last.log"
    stat -c %s "$work/last.log"
}

printf '%8s %6s %12s %12s %12s %12s %14s  %s\n' threads mode "2 s on" "2 s off" "6 s on" \
    "6 s off" "B/thread/s" "longest interval"
for n in "${counts[@]}"; do
    for mode in sleep run; do
        a="$(size "$mode" 2 "$n" 10ms)"
        b="$(size "$mode" 2 "$n" off)"
        c="$(size "$mode" 6 "$n" 10ms)"
        every="$("$analyze" "$work/last.log" 2>/dev/null |
            sed -n 's/.*sampled every \([0-9.]* [a-zµ]*\).*/\1/p' | head -1)"
        d="$(size "$mode" 6 "$n" off)"
        printf '%8s %6s %12s %12s %12s %12s %14s  %s\n' "$n" "$mode" "$a" "$b" "$c" "$d" \
            "$(awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v n="$n" \
                'BEGIN { printf "%.0f", ((c - d) - (a - b)) / 4 / n }')" "${every:-?}"
    done
done
