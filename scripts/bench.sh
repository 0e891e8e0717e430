#!/usr/bin/env bash
# Benchmark: native vs shim, one table at the end (SPEC §5, issue 2 item 9).
#
#   uncontended  fixtures/bench_uncontended.c  one thread, 20 M lock/unlock pairs
#   contended    fixtures/bench_contended.c    4 threads x 5 M pairs on one mutex
#   condvar      fixtures/bench_condvar.c      2 producers + 2 consumers, 2 M items, bounded queue
#   sem          fixtures/bench_sem.c          4 threads x 1 M rounds on a 2-slot pool semaphore
#   pigz         pigz -p 2 on 100 MiB of generated semi-compressible text;
#                the shim run's output must be byte-identical to the native one
#   policy       the contended loop under two policies (issue 4): waiter_chain on every
#                contended wait, and waiter_chain only at min_waiters 4 (never, with 4
#                threads: counters only); each against native
#   policy-one   the uncontended loop with a policy that selects one other object
#
# Timing with hyperfine (--export-json kept under target/bench/), or with
# /usr/bin/time when hyperfine is absent. Shim runs use WAITSHIM_QUIET=1 and a
# temporary WAITSHIM_LOG directory, emptied before every run.
#
# Environment:
#   BENCH_RUNS=10       timed runs per command
#   BENCH_WARMUP=2      warmup runs per command
#   BENCH_SCENARIOS="uncontended contended condvar sem pigz policy policy-one"   which to run
#   BENCH_NO_BUILD=1    do not run cargo build first
#   BENCH_STRICT=1      exit 1 when a ratio exceeds its budget
#   BENCH_SHIM=PATH     preload this library instead of target/release/libwaitshim.so
# Exit status: 1 if a program failed, the pigz outputs differ, or the shim
# never wrote a log (it was not loaded); else 0 (budgets are reported only,
# unless BENCH_STRICT=1).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

runs="${BENCH_RUNS:-10}"
warmup="${BENCH_WARMUP:-2}"
scenarios="${BENCH_SCENARIOS:-uncontended contended condvar sem pigz policy policy-one}"
uncontended_pairs=20000000
shim="${BENCH_SHIM:-$WAITSHIM_ROOT/target/release/libwaitshim.so}"
results_dir="$WAITSHIM_ROOT/target/bench"

ensure_packages pigz
ensure_packages hyperfine || warn "hyperfine unavailable: falling back to /usr/bin/time"
have_hyperfine=0
command -v hyperfine >/dev/null 2>&1 && have_hyperfine=1

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
    ensure_packages libunwind-dev
    say "building waitshim (cargo build --release)"
    cargo build --release --workspace --quiet
fi
[ -f "$shim" ] || die "$shim not found (build it, or unset BENCH_NO_BUILD)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs" "$results_dir"
shim_env="$(printf 'LD_PRELOAD=%q WAITSHIM_QUIET=1 WAITSHIM_LOG=%q' "$shim" "$logs/waitshim.%p.log")"

say "compiling benchmark programs"
scripts/build-fixtures.sh "$work" bench_uncontended bench_contended bench_condvar bench_sem

failed=0
summary=()

# Contended and pigz timings swing with other load (a busy core turns the
# 4-thread loop into a single-core one); say so up front.
read -r load1 _ </proc/loadavg
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
    warn "load average is $load1 on $(nproc) CPUs: ratios will be noisy"
fi

# measure NAME NATIVE_CMD SHIM_CMD: time both commands (shell command lines,
# run from $work), leave "mean stddev" in seconds for each in
# $work/NAME.native and $work/NAME.shim.
measure() {
    local name="$1" native_cmd="$2" shim_cmd="$3"
    say "scenario $name: $runs runs + $warmup warmup each"
    if [ "$have_hyperfine" = 1 ]; then
        (cd "$work" && hyperfine --style basic --warmup "$warmup" --runs "$runs" \
            --prepare "rm -f $(printf %q "$logs")/waitshim.*" \
            --export-json "$results_dir/$name.json" --export-csv "$work/$name.csv" \
            -n native "$native_cmd" -n shim "$shim_cmd") || return 1
        awk -F, '$1 == "native" { print $2, $3, $4 }' "$work/$name.csv" >"$work/$name.native"
        awk -F, '$1 == "shim" { print $2, $3, $4 }' "$work/$name.csv" >"$work/$name.shim"
    else
        time_runs "$native_cmd" >"$work/$name.native" || return 1
        time_runs "$shim_cmd" >"$work/$name.shim" || return 1
    fi
}

# time_runs CMD: warmup + timed runs without hyperfine; prints "mean stddev median".
time_runs() {
    local cmd="$1" i t times=()
    for ((i = 0; i < warmup; i++)); do
        (cd "$work" && sh -c "$cmd") >/dev/null || return 1
    done
    for ((i = 0; i < runs; i++)); do
        rm -f "$logs"/waitshim.*
        if [ -x /usr/bin/time ]; then
            (cd "$work" && /usr/bin/time -f %e -o "$work/time.out" sh -c "$cmd") >/dev/null || return 1
            t="$(tail -n 1 "$work/time.out")"
        else
            local start="$EPOCHREALTIME"
            (cd "$work" && sh -c "$cmd") >/dev/null || return 1
            t="$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.6f", b - a }')"
        fi
        times+=("$t")
    done
    printf '%s\n' "${times[@]}" | sort -g | awk '
        { x[NR] = $1; s += $1 }
        END { m = s / NR; for (i = 1; i <= NR; i++) v += (x[i] - m) ^ 2
              med = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
              printf "%.6f %.6f %.6f\n", m, (NR > 1 ? sqrt(v / (NR - 1)) : 0), med }'
}

# report NAME BUDGET: add a summary line comparing $work/NAME.{native,shim}.
report() {
    local name="$1" budget="$2" line
    line="$(awk -v name="$name" -v budget="$budget" '
        FNR == 1 && NR == 1 { nm = $1; ns = $2; nmed = $3; next }
        FNR == 1 { sm = $1; ss = $2; smed = $3 }
        END {
            r = sm / nm
            rerr = r * sqrt((ns / nm) ^ 2 + (ss / sm) ^ 2)
            verdict = (r <= budget) ? "within budget" : "OVER BUDGET"
            printf "%-12s native %8.4f s ± %.4f   shim %8.4f s ± %.4f   ratio %.3fx ± %.3f (median ratio %.3fx)   budget <= %.2fx  %s\n",
                name, nm, ns, sm, ss, r, rerr, smed / nmed, budget, verdict
        }' "$work/$name.native" "$work/$name.shim")"
    summary+=("$line")
    if [ "${BENCH_STRICT:-0}" = 1 ] && [[ "$line" == *"OVER BUDGET"* ]]; then
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

for scenario in $scenarios; do
    case "$scenario" in
    uncontended)
        if measure uncontended "./bench_uncontended $uncontended_pairs" \
            "$shim_env ./bench_uncontended $uncontended_pairs"; then
            check_logged uncontended
            report uncontended 1.4
            summary+=("$(awk -v n="$uncontended_pairs" 'FNR == 1 && NR == 1 { nm = $1; next }
                FNR == 1 { sm = $1 }
                END { printf "%-12s added per lock/unlock pair: %.2f ns  (budget <= +3 ns)\n",
                      "", (sm - nm) * 1e9 / n }' "$work/uncontended.native" "$work/uncontended.shim")")
        else
            printf 'FAIL: uncontended benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    contended)
        if measure contended "./bench_contended" "$shim_env ./bench_contended"; then
            check_logged contended
            report contended 1.3
        else
            printf 'FAIL: contended benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    condvar)
        if measure condvar "./bench_condvar" "$shim_env ./bench_condvar"; then
            check_logged condvar
            report condvar 1.1
        else
            printf 'FAIL: condvar benchmark did not run\n' >&2
            failed=1
        fi
        ;;
    sem)
        if measure sem "./bench_sem" "$shim_env ./bench_sem"; then
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
    *)
        die "unknown scenario '$scenario' (expected: uncontended contended condvar sem pigz policy policy-one)"
        ;;
    esac
done

echo
echo "waitshim benchmark: native vs shim ($runs runs, $warmup warmup; $(nproc) CPUs; mean ± stddev)"
printf '%s\n' "${summary[@]}"
[ "$have_hyperfine" = 1 ] && echo "hyperfine results: $results_dir/*.json"
if [ "$failed" -ne 0 ]; then
    echo "bench.sh: FAILED (see messages above)" >&2
    exit 1
fi
