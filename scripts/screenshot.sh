#!/usr/bin/env bash
# Usage: scripts/screenshot.sh [OUT.png]
#
# docs/exports.md's picture of the HTML timeline, made from a real run so that it stays true:
# builds waitshim (release), runs fixtures/timeline_threads.c (8 workers on 2 cores, 2 s:
# running, runnable, lock waits and sleeps) under the shim, exports the log with
# `waitshim-analyze export --format html`, and takes a screenshot of the page with headless
# Chromium (Debian's `chromium`, installed when missing) into OUT (default docs/timeline.png).
# CARGO_TARGET_DIR is honoured; THREADS and SECONDS_RUN change the run.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

out="${1:-docs/timeline.png}"
threads="${THREADS:-8}"
seconds="${SECONDS_RUN:-2}"

command -v chromium >/dev/null 2>&1 || ensure_packages chromium

build_waitshim

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
scripts/build-fixtures.sh "$work" timeline_threads

say "running timeline_threads $threads $seconds under the shim"
(cd "$work" && LD_PRELOAD="$shim" WAITSHIM_QUIET=1 WAITSHIM_LOG="$work/waitshim.%p.log" \
    ./timeline_threads "$threads" "$seconds")
shopt -s nullglob
logs=("$work"/waitshim.*.log)
[ "${#logs[@]}" -eq 1 ] || die "expected one log in $work, found ${#logs[@]}"

say "exporting the timeline (export --format html)"
"$analyze" export --format html -o "$work/timeline.html" "${logs[0]}"

say "screenshot with headless Chromium"
mkdir -p "$(dirname "$out")"
HOME="$work" chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=1300,${HEIGHT:-560} --user-data-dir="$work/chromium-profile" \
    --screenshot="$work/timeline.png" "file://$work/timeline.html" >/dev/null 2>&1 ||
    die "chromium could not take the screenshot"
[ -s "$work/timeline.png" ] || die "chromium wrote no screenshot"
cp "$work/timeline.png" "$out"
say "wrote $out ($(stat -c %s "$out") bytes)"
