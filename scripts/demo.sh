#!/usr/bin/env bash
# Demo on a fresh machine: build waitshim (release), compile the convoy
# fixture (8 threads queueing on one mutex), run it under the shim, and print
# the report of waitshim-analyze.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

build_waitshim

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say "compiling fixtures/convoy.c"
scripts/build-fixtures.sh "$work" convoy

say "running: LD_PRELOAD=$shim WAITSHIM_LOG=$work/waitshim.%p.log ./convoy"
(cd "$work" && LD_PRELOAD="$shim" WAITSHIM_LOG="$work/waitshim.%p.log" ./convoy)

shopt -s nullglob
logs=("$work"/waitshim.*.log)
[ "${#logs[@]}" -ge 1 ] || die "the shim wrote no log into $work"

say "waitshim-analyze ${logs[0]##*/}"
echo
"$analyze" "${logs[0]}"
