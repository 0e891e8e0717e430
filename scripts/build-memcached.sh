#!/usr/bin/env bash
# Builds memcached from the Debian source of this release, with debug information, into DIR
# (DIR/memcached). Debian's own binary is stripped, so a report on it cannot name memcached's
# global locks; a user who builds with -g gets them named (issue 13: "the hot lock named as a
# global"), and tests/tests/real_programs.rs checks that on this build.
#
#   scripts/build-memcached.sh DIR
#
# The source comes from deb.debian.org: the release's Sources index gives the version and the
# upstream tarball with its SHA-256, checked before unpacking. Nothing is done when
# DIR/memcached exists. Needs curl, xz and libevent-dev (installed when missing).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

[ $# -eq 1 ] || die "usage: $0 DIR"
out="$1"
if [ -x "$out/memcached" ]; then
    exit 0
fi
ensure_packages curl xz-utils libevent-dev make

# shellcheck disable=SC1091
codename="$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")"
[ -n "$codename" ] || die "no VERSION_CODENAME in /etc/os-release: not a Debian release"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say "memcached source: reading the $codename Sources index"
curl -fsS "$mirror/dists/$codename/main/source/Sources.xz" | xz -d |
    awk 'BEGIN { RS = "" } /^Package: memcached\n/' >"$work/paragraph"
[ -s "$work/paragraph" ] || die "memcached is not in $codename's Sources index"
dir="$(sed -n 's/^Directory: //p' "$work/paragraph")"
# The Checksums-Sha256 line of the upstream tarball: " SHA SIZE NAME".
read -r sha _ tarball < <(
    awk '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 } on && /orig\.tar/' "$work/paragraph"
)
[ -n "${tarball:-}" ] && [ -n "$dir" ] || die "no upstream tarball in the memcached paragraph"

say "memcached source: downloading $tarball"
curl -fsS -o "$work/$tarball" "$mirror/$dir/$tarball"
printf '%s  %s\n' "$sha" "$work/$tarball" | sha256sum -c --quiet - ||
    die "$tarball does not match the SHA-256 of the Sources index"
mkdir "$work/src"
tar -xf "$work/$tarball" -C "$work/src" --strip-components=1

say "memcached: configure and build with -O2 -g"
(
    cd "$work/src"
    ./configure CFLAGS="-O2 -g" >"$work/configure.log" 2>&1 || {
        cat "$work/configure.log" >&2
        exit 1
    }
    make -j"$(nproc)" memcached >"$work/make.log" 2>&1 || {
        tail -40 "$work/make.log" >&2
        exit 1
    }
)
mkdir -p "$out"
cp "$work/src/memcached" "$out/memcached.tmp"
mv "$out/memcached.tmp" "$out/memcached"
say "built $out/memcached"
