#!/usr/bin/env bash
# Usage: scripts/build-fixtures.sh OUTDIR [NAME...]
#
# Compiles the fixture programs of fixtures/ into OUTDIR (all of them, or only
# the NAMEs given, e.g. `convoy semantics dlopen`). This is the one place where
# the fixtures' build flags live:
#   C:        cc  -O1 -g -pthread                 fixtures/X.c   -> OUTDIR/X
#   C++:      c++ -O1 -g -pthread -std=c++20      fixtures/X.cpp -> OUTDIR/X
#   Rust:     rustc -O -g --edition 2021          fixtures/X.rs  -> OUTDIR/X
#   library:  cc  -O1 -g -pthread -shared -fPIC   fixtures/dlopen_lib.c -> OUTDIR/libdlock.so
#             cc  -O1 -g -pthread -shared -fPIC   fixtures/counting_interposer.c -> OUTDIR/libcounting.so
#             cc  -O1 -g -pthread -shared -fPIC   fixtures/reentry_malloc.c -> OUTDIR/libreentry.so
#   static:   cc  -O1 -g -pthread -static         fixtures/static_binary.c -> OUTDIR/static_binary
#   Go-like:  cc  -O1 -g -pthread -DAS_GO         fixtures/raw_exit.c -> OUTDIR/raw_exit_go
# (`dlopen` builds both dlopen_main and libdlock.so; `counting` builds libcounting.so;
# `reentry` builds libreentry.so.) CC and CXX override the
# compilers, RUSTC the Rust one. Outputs newer than both their source and this script are kept.
set -euo pipefail

CFLAGS_FIXTURE=(-O1 -g -pthread -I"$(cd "$(dirname "${BASH_SOURCE[0]}")/../include" && pwd)")
CXXFLAGS_FIXTURE=(-O1 -g -pthread -std=c++20)
CC="${CC:-cc}"
CXX="${CXX:-c++}"
RUSTC="${RUSTC:-rustc}"

[ $# -ge 1 ] || {
    echo "usage: $0 OUTDIR [NAME...]" >&2
    exit 2
}
out="$1"
shift
self="${BASH_SOURCE[0]}"
src_dir="$(cd "$(dirname "$self")/../fixtures" && pwd)"
mkdir -p "$out"

names=("$@")
if [ "${#names[@]}" -eq 0 ]; then
    for f in "$src_dir"/*.c "$src_dir"/*.cpp "$src_dir"/*.rs; do
        n="$(basename "${f%.*}")"
        [ "$n" = dlopen_lib ] && continue
        [ "$n" = counting_interposer ] && n=counting
        [ "$n" = reentry_malloc ] && n=reentry
        names+=("$n")
    done
    names+=(raw_exit_go)
fi

# build SRC OUTPUT COMPILER FLAGS...
build() {
    local src="$1" output="$2"
    shift 2
    if [ -e "$output" ] && [ "$output" -nt "$src" ] && [ "$output" -nt "$self" ] &&
        [ "$output" -nt "$src_dir/blocked.h" ] && [ "$output" -nt "$src_dir/cpu_work.h" ]; then
        return 0
    fi
    "$@" -o "$output" "$src" || {
        echo "build-fixtures: failed to compile $src" >&2
        return 1
    }
}

status=0
for n in "${names[@]}"; do
    n="${n%.c}"
    n="${n%.cpp}"
    n="${n%.rs}"
    case "$n" in
    dlopen | dlopen_main | dlopen_lib)
        build "$src_dir/dlopen_lib.c" "$out/libdlock.so" "$CC" "${CFLAGS_FIXTURE[@]}" -shared -fPIC || status=1
        build "$src_dir/dlopen_main.c" "$out/dlopen_main" "$CC" "${CFLAGS_FIXTURE[@]}" || status=1
        ;;
    raw_exit_go)
        build "$src_dir/raw_exit.c" "$out/raw_exit_go" "$CC" "${CFLAGS_FIXTURE[@]}" -DAS_GO || status=1
        ;;
    static_binary)
        build "$src_dir/static_binary.c" "$out/static_binary" "$CC" "${CFLAGS_FIXTURE[@]}" -static || status=1
        ;;
    reentry | reentry_malloc | libreentry.so)
        build "$src_dir/reentry_malloc.c" "$out/libreentry.so" "$CC" "${CFLAGS_FIXTURE[@]}" -shared -fPIC || status=1
        ;;
    counting | counting_interposer | libcounting.so)
        build "$src_dir/counting_interposer.c" "$out/libcounting.so" "$CC" "${CFLAGS_FIXTURE[@]}" -shared -fPIC -ldl || status=1
        ;;
    *)
        if [ -f "$src_dir/$n.c" ]; then
            build "$src_dir/$n.c" "$out/$n" "$CC" "${CFLAGS_FIXTURE[@]}" || status=1
        elif [ -f "$src_dir/$n.cpp" ]; then
            build "$src_dir/$n.cpp" "$out/$n" "$CXX" "${CXXFLAGS_FIXTURE[@]}" || status=1
        elif [ -f "$src_dir/$n.rs" ]; then
            build "$src_dir/$n.rs" "$out/$n" "$RUSTC" -O -g --edition 2021 || status=1
        else
            echo "build-fixtures: no fixture named '$n'" >&2
            status=1
        fi
        ;;
    esac
done
exit "$status"
