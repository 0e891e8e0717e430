#!/usr/bin/env bash
# Usage: scripts/analyzer-scale.sh [WORKDIR]
#
# The analyzer's scale figures (README, Performance of the analyzer): makes two real logs with
# fixtures under the shim, then times the text report, --json and every export format on each,
# with the peak memory and the output's size:
#   - big.log: fixtures/log_heavy.c 1000000 (1 M mutexes named with 200 characters: ~428 MB);
#   - t64.log: fixtures/timeline_threads.c 64 60 (64 threads for 60 s, sampled every 10 ms).
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
scripts/build-fixtures.sh "$work" log_heavy timeline_threads

# make NAME CMD...: runs CMD under the shim in WORKDIR, its log renamed to NAME.
make_log() {
    local name="$1"
    shift
    [ -f "$work/$name" ] && return 0
    say "making $name: $*"
    rm -f "$work"/waitshim.*.log
    (cd "$work" && LD_PRELOAD="$shim" WAITSHIM_QUIET=1 WAITSHIM_LOG="$work/waitshim.%p.log" "$@" >/dev/null)
    mv "$work"/waitshim.*.log "$work/$name"
}
make_log big.log ./log_heavy 1000000
make_log t64.log ./timeline_threads 64 60

# measure LABEL OUT CMD...: one line: label, seconds, peak memory, output size.
measure() {
    local label="$1" out="$2"
    shift 2
    local t
    t="$(/usr/bin/time -f '%e %M' "$@" 2>&1 >/dev/null | grep -v '^waitshim-analyze: reading' | tail -1)"
    printf '  %-12s %7s s %7d MB peak %12d bytes\n' "$label" "${t% *}" "$((${t#* } / 1024))" \
        "$(stat -c %s "$out" 2>/dev/null || echo 0)"
}

for log in big.log t64.log; do
    bytes="$(stat -c %s "$work/$log")"
    say "$log: $bytes bytes"
    measure text "$work/out.txt" sh -c "'$analyze' '$work/$log' > '$work/out.txt'"
    measure json "$work/out.json" sh -c "'$analyze' --json '$work/$log' > '$work/out.json'"
    for f in perfetto chrome pprof folded flamegraph html; do
        measure "$f" "$work/out.$f" "$analyze" export --format "$f" -o "$work/out.$f" "$work/$log"
    done
done
say "logs and outputs are in $work"
