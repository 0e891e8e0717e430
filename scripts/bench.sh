#!/usr/bin/env bash
# Benchmark: native vs shim, one table at the end (SPEC §5, issue 2 item 9).
#
#   uncontended  fixtures/bench_uncontended.c  one thread, 20 M lock/unlock pairs
#   startup      the uncontended program with 1 pair: what the shim's start-up and exit add to
#                a run (log created, modules listed, counters written), in ms, and what that
#                is per pair of the uncontended row (budget: 10x, a ratio of ~1 ms runs)
#   contended    fixtures/bench_contended.c    4 threads x 5 M pairs on one mutex
#   condvar      fixtures/bench_condvar.c      2 producers + 2 consumers, 2 M items, bounded queue
#   sem          fixtures/bench_sem.c          4 threads x 1 M rounds on a 2-slot pool semaphore
#   pigz         pigz -p 2 on 100 MiB of generated semi-compressible text;
#                the shim run's output must be byte-identical to the native one
#   policy       the contended loop under two policies (issue 4): waiter_chain on every
#                contended wait, and waiter_chain only at min_waiters 4 (never, with 4
#                threads: counters only); each against native
#   policy-one   the uncontended loop with a policy that selects one other object
#   sampler      fixtures/bench_idle_threads.c 4 (100 threads blocked in read, 2 computing
#                about 2 s each):
#                the shim with its sampler (every 10 ms) against the shim with
#                WAITSHIM_SAMPLE=off, both columns under the shim (budget: 1 % of the run)
#   events       fixtures/bench_contended.c with 16 threads on one mutex (BENCH_EVENTS_PAIRS
#                pairs each, default 15 M: ~10 s on 2 cores): the shim with per-wait
#                events (WAITSHIM_EVENTS=all, then ring:2s) against the shim with
#                WAITSHIM_EVENTS=off, both columns under the shim (budget: 5 %); then runs
#                of each mode for their logs (events per second, log MB per minute, bytes
#                per event) and each export format of an `all` log (time, output size,
#                peak RSS from /usr/bin/time -v)
#
# Method: native and shim runs are paired and interleaved. Per scenario, first
# BENCH_WARMUP untimed runs of each command, then BENCH_RUNS pairs of one native
# and one shim run, back to back; the 1st pair runs native first, the 2nd shim
# first, and so on, so neither side always goes first. As a pair's two runs
# are adjacent, the slow drift of this machine's load (which moves the
# scheduling-bound scenarios by tens of percent over minutes) hits both alike.
# Each pair gives a ratio shim_i / native_i; the budget is judged on the MEDIAN
# of these paired ratios, which a few outlier pairs cannot move. The table also
# shows each side's mean ± sample stddev, the ratio of the means, the paired
# ratios' interquartile range and a ~95% interval for their median (two order
# statistics of the sorted ratios; it needs at least 6 pairs). The uncontended
# row adds the time the shim adds per lock/unlock pair, from the median of the
# paired differences shim_i - native_i (and, for comparison, from the means).
#
# Each run is timed in bash from $EPOCHREALTIME (wall clock, bash >= 5): one
# `sh -c CMD` from the work directory, stdout discarded, the same shell start
# on both sides. Shim runs use WAITSHIM_QUIET=1 and a temporary WAITSHIM_LOG
# directory, emptied before every shim run. The raw data of each scenario (both
# sides' seconds in run order, the order of each pair, the ratios and the
# summary figures) are written to target/bench/NAME.json.
#
# Environment:
#   BENCH_RUNS=15       timed pairs (one native + one shim run each)
#   BENCH_WARMUP=2      warmup runs per command
#   BENCH_SCENARIOS="uncontended contended condvar sem pigz policy policy-one"   which to run
#   BENCH_NO_BUILD=1    do not run cargo build first
#   BENCH_STRICT=1      exit 1 when a median paired ratio exceeds its budget
#   BENCH_SHIM=PATH     preload this library instead of target/release/libwaitshim.so
#   BENCH_BASE_SHIM=PATH in the uncontended, contended, condvar and sem scenarios, run the
#                       "native" column under this library instead (another build of the
#                       shim): the paired ratios then compare two builds, above 1 meaning
#                       BENCH_SHIM is slower (the budgets, which are against native, do not
#                       apply; the added ns per pair is then the difference between them)
#   BENCH_ANALYZER=PATH the analyzer for the events scenario (default: waitshim-analyze
#                       beside the library)
#   BENCH_EVENTS_PAIRS=N lock/unlock pairs per thread in the events scenario (15000000)
#   BENCH_EVENTS_FIGURE_RUNS=N runs per mode for the events scenario's log figures (3)
# Exit status: 1 if a program failed, the pigz outputs differ, or the shim
# never wrote a log (it was not loaded); else 0 (budgets are reported only,
# unless BENCH_STRICT=1).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

runs="${BENCH_RUNS:-15}"
warmup="${BENCH_WARMUP:-2}"
scenarios="${BENCH_SCENARIOS:-uncontended startup contended condvar sem pigz policy policy-one sampler events}"
uncontended_pairs=20000000
shim="${BENCH_SHIM:-$WAITSHIM_ROOT/target/release/libwaitshim.so}"
analyzer="${BENCH_ANALYZER:-$(dirname "$shim")/waitshim-analyze}"
events_pairs="${BENCH_EVENTS_PAIRS:-15000000}"
events_figure_runs="${BENCH_EVENTS_FIGURE_RUNS:-3}"
results_dir="$WAITSHIM_ROOT/target/bench"

if ! [[ "$runs" =~ ^[0-9]+$ ]] || [ "$runs" -lt 1 ]; then
    die "BENCH_RUNS must be a whole number >= 1 (got '$runs')"
fi
[[ "$warmup" =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be a whole number >= 0 (got '$warmup')"
runs=$((10#$runs)) warmup=$((10#$warmup))
[ -n "${EPOCHREALTIME:-}" ] || die "bash >= 5 is needed (\$EPOCHREALTIME times the runs)"

ensure_packages pigz

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
    say "building waitshim (cargo build --release)"
    cargo build --release --workspace --quiet
fi
[ -f "$shim" ] || die "$shim not found (build it, or unset BENCH_NO_BUILD)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs" "$results_dir"
shim_env="$(printf 'LD_PRELOAD=%q WAITSHIM_QUIET=1 WAITSHIM_LOG=%q' "$shim" "$logs/waitshim.%p.log")"
base_env=""
if [ -n "${BENCH_BASE_SHIM:-}" ]; then
    [ -f "$BENCH_BASE_SHIM" ] || die "BENCH_BASE_SHIM: $BENCH_BASE_SHIM not found"
    base_env="$(printf 'LD_PRELOAD=%q WAITSHIM_QUIET=1 WAITSHIM_LOG=%q ' "$BENCH_BASE_SHIM" "$logs/base.%p.log")"
    warn "BENCH_BASE_SHIM: the native column of uncontended, contended, condvar and sem runs under $BENCH_BASE_SHIM; their ratios compare two builds of the shim, and the budgets do not apply"
fi

say "compiling benchmark programs"
scripts/build-fixtures.sh "$work" bench_uncontended bench_contended bench_condvar bench_sem bench_idle_threads

failed=0
summary=()

# Contended and pigz timings swing with other load (a busy core turns the
# 4-thread loop into a single-core one); say so up front.
read -r load1 _ </proc/loadavg
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    warn "load average is $load1 on $(nproc) CPUs: ratios will be noisy"
fi

# The ~95% interval for the median of $runs paired ratios: the order
# statistics k and runs+1-k of the sorted ratios, with k the largest rank such
# that P(Binomial(runs, 1/2) <= k-1) <= 2.5%. Its coverage is
# 1 - 2 P(Binomial <= k-1) (>= 95%). k is 0 below 6 pairs: no interval.
read -r ci_rank ci_coverage < <(LC_ALL=C awk -v n="$runs" 'BEGIN {
    p = 0.5 ^ n; cum = 0; k = 0; tail = 0
    for (j = 0; j < n; j++) {
        cum += p
        if (cum > 0.025) break
        k = j + 1; tail = cum
        p = p * (n - j) / (j + 1)
    }
    printf "%d %.1f\n", k, 100 * (1 - 2 * tail)
}')

# seconds US: microseconds as seconds with six decimals.
seconds() { printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); }

# run_timed CMD: run the shell command line CMD from $work, stdout discarded;
# leave its wall-clock time in microseconds in $elapsed_us. Returns 1 if it
# failed. ($EPOCHREALTIME is seconds and exactly six decimals, with the
# locale's decimal separator: dropping every non-digit gives microseconds.)
elapsed_us=0
run_timed() {
    local t0 t1
    t0="${EPOCHREALTIME//[!0-9]/}"
    (cd "$work" && exec sh -c "$1") >/dev/null || return 1
    t1="${EPOCHREALTIME//[!0-9]/}"
    elapsed_us=$((10#$t1 - 10#$t0))
}

# run_side SIDE CMD: one timed run of the SIDE (native or shim) command CMD; a
# shim run starts with an empty log directory. Says which run failed.
run_side() {
    if [ "$1" = shim ]; then
        rm -f "$logs"/waitshim.*
    else
        rm -f "$logs"/base.*
    fi
    run_timed "$2" && return 0
    printf 'FAIL: %s run failed: %s\n' "$1" "$2" >&2
    return 1
}

# measure NAME NATIVE_CMD SHIM_CMD: warmup runs of both commands (shell
# command lines, run from $work), then $runs pairs in alternating order (see
# the header). Leaves one time in seconds per line, in pair order, in
# $work/NAME.native and $work/NAME.shim, and the commands in
# $work/NAME.native_cmd and $work/NAME.shim_cmd.
measure() {
    local name="$1" i side first
    local -A cmd=([native]="$2" [shim]="$3") took=()
    local -a order
    say "scenario $name: $warmup warmup run(s) of each command, then $runs pairs, alternating which runs first"
    for ((i = 0; i < warmup; i++)); do
        for side in native shim; do
            run_side "$side" "${cmd[$side]}" || return 1
        done
    done
    : >"$work/$name.native"
    : >"$work/$name.shim"
    for ((i = 0; i < runs; i++)); do
        if ((i % 2 == 0)); then order=(native shim); else order=(shim native); fi
        for side in "${order[@]}"; do
            run_side "$side" "${cmd[$side]}" || return 1
            took[$side]=$elapsed_us
        done
        first="${order[0]} first"
        seconds "${took[native]}" >>"$work/$name.native"
        echo >>"$work/$name.native"
        seconds "${took[shim]}" >>"$work/$name.shim"
        echo >>"$work/$name.shim"
        printf '    pair %2d/%d (%-15s native %s s   shim %s s   ratio %s\n' \
            $((i + 1)) "$runs" "$first):" "$(seconds "${took[native]}")" "$(seconds "${took[shim]}")" \
            "$(LC_ALL=C awk -v s="${took[shim]}" -v n="${took[native]}" 'BEGIN { printf "%.3f", s / n }')"
    done
    printf '%s\n' "${cmd[native]}" >"$work/$name.native_cmd"
    printf '%s\n' "${cmd[shim]}" >"$work/$name.shim_cmd"
}

# json_string S: S as a JSON string literal (backslashes and quotes escaped;
# the commands here hold no control characters).
json_string() {
    local s="$1"
    s="${s//\\/\\\\}"
    s="${s//\"/\\\"}"
    printf '"%s"' "$s"
}

# report NAME BUDGET [OPS OP_BUDGET_NS]: add a summary line for the pairs in
# $work/NAME.{native,shim} and write target/bench/NAME.json. With OPS (the
# operations one run does), also a line with the time the shim adds per
# operation, from the median of the paired differences shim_i - native_i.
report() {
    local name="$1" budget="$2" ops="${3:-0}" op_budget="${4:-}" out
    out="$(NATIVE_CMD="$(json_string "$(cat "$work/$name.native_cmd")")" \
        SHIM_CMD="$(json_string "$(cat "$work/$name.shim_cmd")")" \
        LC_ALL=C awk -v name="$name" -v budget="$budget" -v ops="$ops" -v op_budget="$op_budget" \
            -v fixed_of="${FIXED_OF:-0}" \
        -v warmup="$warmup" -v k="$ci_rank" -v json="$results_dir/$name.json" '
        function sort(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) {
                t = a[i]
                for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
                a[j + 1] = t
            }
        }
        # quantile of sorted a[1..n], linear between order statistics
        function quantile(a, n, p,   h, lo) {
            h = 1 + (n - 1) * p; lo = int(h)
            return lo >= n ? a[n] : a[lo] + (h - lo) * (a[lo + 1] - a[lo])
        }
        function mean(a, n,   i, s) { for (i = 1; i <= n; i++) s += a[i]; return s / n }
        function sd(a, n, m,   i, v) {
            if (n < 2) return 0
            for (i = 1; i <= n; i++) v += (a[i] - m) ^ 2
            return sqrt(v / (n - 1))
        }
        function jarray(a, n, fmt,   i, s) {
            s = "["
            for (i = 1; i <= n; i++) s = s (i > 1 ? ", " : "") sprintf(fmt, a[i])
            return s "]"
        }
        FILENAME == ARGV[1] { x[++n] = $1; next }
        { y[++m] = $1 }
        END {
            if (n == 0 || n != m) { print "report: unequal or missing run data" > "/dev/stderr"; exit 1 }
            for (i = 1; i <= n; i++) {
                r[i] = y[i] / x[i]; rs[i] = r[i]; ds[i] = y[i] - x[i]
                first[i] = (i % 2) ? "\"native\"" : "\"shim\""
            }
            sort(rs, n); sort(ds, n)
            nm = mean(x, n); nsd = sd(x, n, nm); sm = mean(y, n); ssd = sd(y, n, sm)
            med = quantile(rs, n, 0.5); q1 = quantile(rs, n, 0.25); q3 = quantile(rs, n, 0.75)
            if (k > 0) { lo = rs[k]; hi = rs[n + 1 - k]; ci = sprintf("%.3f-%.3f", lo, hi) }
            else ci = "n/a"
            verdict = med <= budget ? "within budget" : "OVER BUDGET"
            printf "%-12s %8.4f ± %-8.4f %8.4f ± %-8.4f %7.3fx  %7.3fx  %-11s  %-11s  <= %.2fx  %s\n",
                name, nm, nsd, sm, ssd, sm / nm, med, sprintf("%.3f-%.3f", q1, q3), ci, budget, verdict
            if (ops > 0) {
                printf "%-12s added per lock/unlock pair: %.2f ns (median of the paired differences; from the means: %.2f ns)  (budget <= +%s ns)\n",
                    "", quantile(ds, n, 0.5) * 1e9 / ops, (sm - nm) * 1e9 / ops, op_budget
                printf "%-12s native pair: %.2f ns. Method: wall clock of whole runs of %d pairs, start-up and exit included (the startup row measures them)\n",
                    "", nm * 1e9 / ops, ops
            }
            if (fixed_of > 0)
                printf "%-12s start-up and exit: +%.2f ms a run (median of the paired differences) = %.2f ns a pair of the %d-pair uncontended row\n",
                    "", quantile(ds, n, 0.5) * 1e3, quantile(ds, n, 0.5) * 1e9 / fixed_of, fixed_of

            printf "{\n  \"scenario\": \"%s\",\n  \"pairs\": %d,\n  \"warmup\": %d,\n", name, n, warmup > json
            printf "  \"native_cmd\": %s,\n  \"shim_cmd\": %s,\n", ENVIRON["NATIVE_CMD"], ENVIRON["SHIM_CMD"] > json
            printf "  \"first\": %s,\n", jarray(first, n, "%s") > json
            printf "  \"native_s\": %s,\n", jarray(x, n, "%.6f") > json
            printf "  \"shim_s\": %s,\n", jarray(y, n, "%.6f") > json
            printf "  \"ratios\": %s,\n", jarray(r, n, "%.6f") > json
            printf "  \"native_mean_s\": %.6f,\n  \"native_sd_s\": %.6f,\n", nm, nsd > json
            printf "  \"shim_mean_s\": %.6f,\n  \"shim_sd_s\": %.6f,\n", sm, ssd > json
            printf "  \"ratio_of_means\": %.6f,\n  \"median_ratio\": %.6f,\n", sm / nm, med > json
            printf "  \"ratio_q1\": %.6f,\n  \"ratio_q3\": %.6f,\n", q1, q3 > json
            if (k > 0) printf "  \"median_ratio_ci95\": [%.6f, %.6f],\n", lo, hi > json
            else printf "  \"median_ratio_ci95\": null,\n" > json
            if (ops > 0)
                printf "  \"ops_per_run\": %d,\n  \"added_ns_per_op_median_diff\": %.3f,\n  \"added_ns_per_op_means\": %.3f,\n",
                    ops, quantile(ds, n, 0.5) * 1e9 / ops, (sm - nm) * 1e9 / ops > json
            printf "  \"budget\": %s,\n  \"verdict\": \"%s\"\n}\n", budget, verdict > json
        }' "$work/$name.native" "$work/$name.shim")" || return 1
    while IFS= read -r line; do
        summary+=("$line")
    done <<<"$out"
    if [ "${BENCH_STRICT:-0}" = 1 ] && [[ "$out" == *"OVER BUDGET"* ]]; then
        failed=1
    fi
}


# check_logged NAME: the shim must have written a log, or it was not loaded.
check_logged() {
    local n
    n="$(find "$logs" -name 'waitshim.*' | wc -l)"
    if [ "$n" -eq 0 ]; then
        printf 'FAIL: %s: no log written under the shim — was libwaitshim.so loaded?\n' "$1" >&2
        failed=1
    fi
}

# generate_corpus FILE: 100 MiB of reproducible, semi-compressible text
# (seeded PRNG, skewed word frequencies: pigz compresses it about 3:1).
generate_corpus() {
    cat >"$work/gen.c" <<'GEN'
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define WORDS 2048
#define TOTAL (100L * 1024 * 1024)

static uint64_t state = 0x9e3779b97f4a7c15ULL;

static uint64_t next(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

int main(void)
{
    static const char *syl[] = {"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "wen", "zel",
                                "ar", "ben", "cor", "dus", "el", "fin", "gar", "hol", "is", "jun",
                                "mor", "nal", "or", "pel", "qua", "ros", "sil", "tor", "ul", "yr"};
    static char words[WORDS][16];
    static char buf[1 << 16];
    long written = 0;
    size_t used = 0;

    for (int w = 0; w < WORDS; w++) {
        int n = 1 + (int)(next() % 4);
        words[w][0] = 0;
        for (int i = 0; i < n; i++)
            strcat(words[w], syl[next() % (sizeof syl / sizeof syl[0])]);
    }
    while (written < TOTAL) {
        int per_line = 6 + (int)(next() % 10);
        for (int i = 0; i < per_line; i++) {
            uint64_t r = next();
            /* Product of two uniforms: frequent words are frequent. */
            int w = (int)(((r & 0xffff) % WORDS) * ((r >> 16 & 0xffff) % WORDS) / WORDS);
            if ((r >> 40) % 23 == 0)
                used += (size_t)sprintf(buf + used, "%u ", (unsigned)(r >> 44) % 100000);
            else
                used += (size_t)sprintf(buf + used, "%s ", words[w]);
        }
        buf[used - 1] = '\n';
        if (used > sizeof buf - 512 || written + (long)used >= TOTAL) {
            size_t n = written + (long)used > TOTAL ? (size_t)(TOTAL - written) : used;
            if (fwrite(buf, 1, n, stdout) != n)
                return 1;
            written += (long)n;
            used = 0;
        }
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
GEN
    cc -O2 -o "$work/gen" "$work/gen.c"
    "$work/gen" >"$1"
}

# events_figures CMD: $events_figure_runs rounds of one run of CMD under the shim per events
# mode, each with its log kept: the run's time, the log's size, the events written and dropped
# and their bytes each (from the analyzer's JSON report); a line per run, as the number of
# waits that block swings from run to run with the scheduling. Then each export format of the
# last `all` log with /usr/bin/time -v. Lines are added to the summary.
events_figures() {
    local cmd="$1" mode log bytes secs kept dropped per fmt out tv wall rss
    summary+=("" "events: $events_figure_runs run(s) per mode, interleaved, of: $cmd (16 threads on one mutex)")
    summary+=("$(printf '%-9s %8s %10s %11s %12s %10s %12s %9s' mode 'run (s)' 'log (MB)' 'MB/minute' 'events kept' dropped 'events/s' 'B/event')")
    local i
    for ((i = 1; i <= events_figure_runs; i++)); do
    for mode in off all ring:2s; do
        rm -f "$logs"/waitshim.*
        run_timed "$shim_env WAITSHIM_EVENTS=$mode $cmd" || return 1
        log="$(find "$logs" -name 'waitshim.*' | head -n 1)"
        [ -n "$log" ] || return 1
        bytes="$(stat -c %s "$log")"
        secs="$(seconds "$elapsed_us")"
        read -r kept dropped per < <("$analyzer" --json "$log" | LC_ALL=C awk '
            /"per_wait_events": \{/ { on = 1; next }
            on && /"kept":/ { gsub(/[^0-9]/, ""); k = $0 }
            on && /"dropped":/ { gsub(/[^0-9]/, ""); d = $0 }
            on && /"bytes_per_wait":/ { sub(/.*: */, ""); sub(/,$/, ""); p = $0 }
            on && /"woken_by"/ { on = 0 }
            END { printf "%s %s %s\n", k + 0, d + 0, (p == "" || p == "null") ? "-" : p }')
        summary+=("$(LC_ALL=C awk -v m="$mode" -v s="$secs" -v b="$bytes" -v k="$kept" -v d="$dropped" -v p="$per" 'BEGIN {
            printf "%-9s %8.2f %10.2f %11.2f %12d %10d %12.0f %9s", m, s, b / 1e6, b / 1e6 * 60 / s, k, d, (k + d) / s, p == "-" ? "-" : sprintf("%.1f", p) }')")
        if [ "$mode" = all ]; then cp "$log" "$work/events-all.log"; fi
    done
    done
    summary+=("" "events: export of the last 'all' log ($(LC_ALL=C awk -v b="$(stat -c %s "$work/events-all.log")" 'BEGIN { printf "%.1f MB", b / 1e6 }')), with /usr/bin/time -v")
    summary+=("$(printf '%-10s %9s %12s %14s' format 'time (s)' 'output (MB)' 'peak RSS (MB)')")
    for fmt in perfetto chrome pprof folded html; do
        out="$work/events.$fmt"
        /usr/bin/time -v -o "$work/time.txt" "$analyzer" export --format "$fmt" -o "$out" \
            "$work/events-all.log" >/dev/null 2>&1 || return 1
        tv="$(cat "$work/time.txt")"
        wall="$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' <<<"$tv")"
        rss="$(awk -F': ' '/Maximum resident set size/ { print $2 }' <<<"$tv")"
        summary+=("$(LC_ALL=C awk -v f="$fmt" -v w="$wall" -v o="$(stat -c %s "$out")" -v r="$rss" 'BEGIN {
            printf "%-10s %9.2f %12.3f %14.1f", f, w, o / 1e6, r / 1024 }')")
        rm -f "$out"
    done
}

for scenario in $scenarios; do
    case "$scenario" in
    uncontended)
        if measure uncontended "$base_env./bench_uncontended $uncontended_pairs" \
            "$shim_env ./bench_uncontended $uncontended_pairs"; then
            check_logged uncontended
            report uncontended 1.4 "$uncontended_pairs" 3
        else
            printf 'FAIL: uncontended benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    startup)
        if measure startup "$base_env./bench_uncontended 1" "$shim_env ./bench_uncontended 1"; then
            FIXED_OF=$uncontended_pairs report startup 10
        else
            printf 'FAIL: startup benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    contended)
        if measure contended "$base_env./bench_contended" "$shim_env ./bench_contended"; then
            check_logged contended
            report contended 1.3
        else
            printf 'FAIL: contended benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    condvar)
        if measure condvar "$base_env./bench_condvar" "$shim_env ./bench_condvar"; then
            check_logged condvar
            report condvar 1.1
        else
            printf 'FAIL: condvar benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    sem)
        if measure sem "$base_env./bench_sem" "$shim_env ./bench_sem"; then
            check_logged sem
            report sem 1.1
        else
            printf 'FAIL: sem benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    pigz)
        say "generating 100 MiB of semi-compressible text (seeded)"
        generate_corpus "$work/corpus.txt"
        if measure pigz "pigz -p 2 -c corpus.txt > out.native" \
            "$shim_env pigz -p 2 -c corpus.txt > out.shim"; then
            rm -f "$logs"/waitshim.*
            (cd "$work" && pigz -p 2 -c corpus.txt >out.native)
            (cd "$work" && env LD_PRELOAD="$shim" WAITSHIM_QUIET=1 \
                WAITSHIM_LOG="$logs/waitshim.%p.log" pigz -p 2 -c corpus.txt >out.shim)
            check_logged pigz
            if cmp -s "$work/out.native" "$work/out.shim"; then
                say "pigz: shim output is byte-identical to native output"
            else
                printf '\n*** FAIL: pigz output under the shim DIFFERS from the native output ***\n\n' >&2
                failed=1
            fi
            report pigz 1.02
        else
            printf 'FAIL: pigz benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    policy)
        printf '%s\n' '{"rules":[{"actions":["waiter_chain"]}]}' >"$work/all.json"
        printf '%s\n' '{"rules":[{"when":{"min_waiters":4},"actions":["waiter_chain"]}]}' >"$work/min4.json"
        for p in all min4; do
            if measure "policy-$p" "./bench_contended" \
                "$shim_env WAITSHIM_POLICY=$(printf %q "$work/$p.json") ./bench_contended"; then
                check_logged "policy-$p"
                report "policy-$p" 1.3
            else
                printf 'FAIL: policy-%s benchmark did not run\n' "$p" >&2
                failed=1
            fi
        done
        ;;
    policy-one)
        printf '%s\n' '{"rules":[{"match":{"object_addr":"0x10"},"actions":["record","waiter_chain"]}]}' >"$work/one.json"
        if measure policy-one "./bench_uncontended $uncontended_pairs" \
            "$shim_env WAITSHIM_POLICY=$(printf %q "$work/one.json") ./bench_uncontended $uncontended_pairs"; then
            check_logged policy-one
            report policy-one 1.4
        else
            printf 'FAIL: policy-one benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    sampler)
        # Both sides under the shim: the "native" column is the shim with the sampler off.
        if measure sampler "$shim_env WAITSHIM_SAMPLE=off ./bench_idle_threads 4" \
            "$shim_env ./bench_idle_threads 4"; then
            check_logged sampler
            report sampler 1.01
        else
            printf 'FAIL: sampler benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    events)
        # Both sides under the shim: the "native" column is the shim with events off.
        [ -x "$analyzer" ] || die "$analyzer not found (set BENCH_ANALYZER)"
        ev_cmd="./bench_contended $events_pairs 16"
        for mode in all ring:2s; do
            name="events-${mode%%:*}"
            if measure "$name" "$shim_env WAITSHIM_EVENTS=off $ev_cmd" \
                "$shim_env WAITSHIM_EVENTS=$mode $ev_cmd"; then
                check_logged "$name"
                report "$name" 1.05
            else
                printf 'FAIL: %s benchmark did not run\n' "$name" >&2
                failed=1
            fi
        done
        if ! events_figures "$ev_cmd"; then
            printf 'FAIL: events figures could not be taken\n' >&2
            failed=1
        fi
        ;;
    *)
        die "unknown scenario '$scenario' (expected: uncontended contended condvar sem pigz policy policy-one sampler events)"
        ;;
    esac
done

echo
echo "waitshim benchmark: native vs shim, $runs pairs in alternating order after $warmup warmup run(s) of each; $(nproc) CPUs"
echo "times in seconds, mean ± sample stddev; ratio = shim / native; the verdict compares the MEDIAN of the paired ratios with the budget"
if [ "$ci_rank" -gt 0 ]; then
    echo "IQR and ~95% CI are those of the paired ratios; the CI is order statistics $ci_rank and $((runs + 1 - ci_rank)) of the $runs sorted ratios (${ci_coverage}% coverage)"
else
    echo "IQR is that of the paired ratios; no ~95% CI below 6 pairs"
fi
# (bash pads by bytes: the two-byte ± stays out of the padded fields)
printf '%-12s %-20s%-20s%8s  %8s  %-11s  %-11s  %-8s  %s\n' \
    scenario "  native (s)" "  shim (s)" "ratio of" median "IQR of" "~95% CI of" budget verdict
printf '%-12s %8s ± %-8s %8s ± %-8s %8s  %8s  %-11s  %s\n' \
    "" mean sd mean sd means ratio ratios median
[ "${#summary[@]}" -eq 0 ] || printf '%s\n' "${summary[@]}"
echo "raw data (run order) and figures: $results_dir/NAME.json"
if [ "$failed" -ne 0 ]; then
    echo "bench.sh: FAILED (see messages above)" >&2
    exit 1
fi
