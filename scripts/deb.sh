#!/usr/bin/env bash
# Builds the Debian package of waitshim with cargo-deb ([package.metadata.deb] in
# analyzer/Cargo.toml):
#
#   target/debian/waitshim_VERSION-1_ARCH.deb         /usr/bin/waitshim-analyze,
#                                                     /usr/lib/waitshim/libwaitshim.so,
#                                                     /usr/include/waitshim.h, man pages,
#                                                     bash/zsh/fish completions, README
#   target/debian/waitshim-dbgsym_VERSION-1_ARCH.ddeb their debug info (compressed), under
#                                                     /usr/lib/debug/.build-id/
#
# The binaries in the .deb are stripped (with a .gnu_debuglink); the release build in the
# target directory keeps its debug info. The build is the workspace's own (CARGO_TARGET_DIR
# honoured): after `cargo build --release` nothing is compiled again. The man pages and the
# completions are written by the analyzer itself (`waitshim-analyze --generate-files DIR`, from
# its command-line definition) into TARGET/release/waitshim-generated/.
#
# Installs what is missing: cargo-deb (`cargo install --locked cargo-deb`), dpkg-dev (for
# dpkg-shlibdeps, which computes Depends) and binutils (strip, objcopy).
# The last line on stdout is the path of the .deb, the one before it that of the .ddeb.
#
#   scripts/deb.sh            build
#   dpkg -i target/debian/waitshim_*.deb target/debian/waitshim-dbgsym_*.ddeb
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"
# Progress on stderr; stdout is for the paths of the packages alone.
exec 3>&1 1>&2

ensure_packages dpkg-dev binutils
if ! cargo deb --version >/dev/null 2>&1; then
    say "installing cargo-deb (cargo install --locked cargo-deb)"
    cargo install --locked cargo-deb
fi

build_waitshim

target="${CARGO_TARGET_DIR:-$WAITSHIM_ROOT/target}"
generated="$target/release/waitshim-generated"
rm -rf "$generated"
say "writing man pages and completions into $generated"
"$analyze" --generate-files "$generated" >/dev/null
# Compressed as Debian policy wants (cargo-deb compresses only the man pages it does not take for
# build products).
gzip -9n "$generated"/man/*.1

say "cargo deb -p waitshim-analyze --no-build"
rm -f "$target"/debian/waitshim_*.deb "$target"/debian/waitshim-dbgsym_*.ddeb
cargo deb -p waitshim-analyze --no-build

shopt -s nullglob
debs=("$target"/debian/waitshim_*.deb)
ddebs=("$target"/debian/waitshim-dbgsym_*.ddeb)
[ "${#debs[@]}" -eq 1 ] || die "expected one waitshim_*.deb in $target/debian, found ${#debs[@]}"
[ "${#ddebs[@]}" -eq 1 ] || die "expected one waitshim-dbgsym_*.ddeb in $target/debian, found ${#ddebs[@]}"
printf '%s\n%s\n' "${ddebs[0]}" "${debs[0]}" >&3
