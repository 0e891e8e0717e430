#!/usr/bin/env bash
# Usage: scripts/analyzer-scale.sh [WORKDIR]
#
# The analyzer's scale figures (docs/perf-method.md, Analyzer performance): makes three real logs with
# fixtures under the shim, then times the text report, --json and every export format on each,
# with the peak memory and the output's size:
#   - big.log: fixtures/log_heavy.c 1000000 (1 M mutexes named with 200 characters: ~428 MB);
#   - t64.log: fixtures/timeline_threads.c 64 60 (64 threads for 60 s, sampled every 10 ms);
#   - l16.log: fixtures/bench_contended.c SCALE_PAIRS 16 with WAITSHIM_EVENTS=all: 16 threads on
#     one mutex, every blocked wait written (SCALE_PAIRS per thread, default 115 M: about 60 s
#     on 2 cores), the issue's "16-thread, 60-second lock-heavy run".
# Each run is timed (NAME.secs). Per log, a line with its MB per minute of run, the waits it
# holds and the slices the chrome trace draws, per second; per output (perfetto -z: with
# --compress), its MB per minute of run. The chrome and perfetto traces are deleted once measured.
# Logs and outputs stay in WORKDIR (default: a new temporary directory, printed) for a second
# look. Uses /usr/bin/time; CARGO_TARGET_DIR is honoured. Run it on a quiet machine: figures
# taken while other work runs are slower.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

work="${1:-$(mktemp -d)}"
mkdir -p "$work"
target="${CARGO_TARGET_DIR:-$WAITSHIM_ROOT/target}"
[ -x /usr/bin/time ] || ensure_packages time

say "building waitshim (cargo build --release)"
cargo build --release --quiet -p waitshim-shim -p waitshim-analyze
shim="$target/release/libwaitshim.so"
analyze="$target/release/waitshim-analyze"
scripts/build-fixtures.sh "$work" log_heavy timeline_threads bench_contended

# make NAME CMD...: runs CMD under the shim in WORKDIR, its log renamed to NAME.
make_log() {
    local name="$1"
    shift
    [ -f "$work/$name" ] && return 0
    say "making $name: $*"
    rm -f "$work"/waitshim.*.log
    local t0=$EPOCHREALTIME
    (cd "$work" && LD_PRELOAD="$shim" WAITSHIM_QUIET=1 WAITSHIM_LOG="$work/waitshim.%p.log" "$@" >/dev/null)
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", b - a }' >"$work/$name.secs"
    mv "$work"/waitshim.*.log "$work/$name"
}
make_log big.log ./log_heavy 1000000
make_log t64.log ./timeline_threads 64 60
make_log l16.log env WAITSHIM_EVENTS=all ./bench_contended "${SCALE_PAIRS:-115000000}" 16

# measure LABEL OUT CMD...: one line: label, seconds, peak memory, output size and MB per
# minute of the run ($secs).
measure() {
    local label="$1" out="$2"
    shift 2
    local t size
    t="$(/usr/bin/time -f '%e %M' "$@" 2>&1 >/dev/null | grep -v '^waitshim-analyze: reading' | tail -1)"
    size="$(stat -c %s "$out" 2>/dev/null || echo 0)"
    printf '  %-12s %7s s %7d MB peak %12d bytes %10s MB per minute of run\n' "$label" \
        "${t% *}" "$((${t#* } / 1024))" "$size" \
        "$(awk -v b="$size" -v s="$secs" 'BEGIN { printf "%.2f", b / 1e6 / s * 60 }')"
}

for log in big.log t64.log l16.log; do
    bytes="$(stat -c %s "$work/$log")"
    secs="$(cat "$work/$log.secs")"
    say "$log: $bytes bytes, a run of $secs s"
    measure text "$work/out.txt" sh -c "'$analyze' '$work/$log' > '$work/out.txt'"
    measure json "$work/out.json" sh -c "'$analyze' --json '$work/$log' > '$work/out.json'"
    for f in perfetto chrome pprof folded flamegraph html; do
        measure "$f" "$work/out.$f" "$analyze" export --format "$f" -o "$work/out.$f" "$work/$log"
    done
    measure "perfetto -z" "$work/out.pz" "$analyze" export --format perfetto --compress \
        -o "$work/out.pz" "$work/$log"
    # Events per second: the waits the log holds (the text report's WHO WOKE WHOM line) and the
    # slices the chrome trace draws (its complete events: thread states and waits).
    waits="$(sed -n 's/^WHO WOKE WHOM (\([0-9]*\) wait events.*/\1/p' "$work/out.txt")"
    slices="$(grep -o '"ph":"X"' "$work/out.chrome" | wc -l)"
    # The traces of l16.log take tens of GB: not kept.
    rm -f "$work/out.chrome" "$work/out.perfetto"
    awk -v b="$bytes" -v s="$secs" -v w="${waits:-0}" -v x="$slices" 'BEGIN {
        printf "  log: %.2f MB per minute of run; %d waits written (%.0f a second); %d slices in the chrome trace (%.0f a second)\n",
            b / 1e6 / s * 60, w, w / s, x, x / s }'
done
say "logs and outputs are in $work"
