# Shared helpers for the scripts in this directory; source it, do not run it.
# shellcheck shell=bash

# Repository root (the directory above scripts/).
WAITSHIM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export WAITSHIM_ROOT

say() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# Run a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run '$*' (not root and no sudo)"
    fi
}

package_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# ensure_packages PKG...: install the Debian packages that are missing.
# Runs `apt-get update` first, and only when something is missing. Quiet on
# success; on failure shows apt's output and returns 1.
ensure_packages() {
    local missing=() pkg out
    for pkg in "$@"; do
        package_installed "$pkg" || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 ||
        die "missing packages (${missing[*]}) and no apt-get to install them"
    say "installing missing system packages: ${missing[*]}"
    out="$(mktemp)"
    # One install at a time: tests run in parallel and several may install at once (apt's own
    # lock fails at once rather than waiting for another apt-get, unless told to wait: both).
    local wait=(-o DPkg::Lock::Timeout=600)
    if ! (
        command -v flock >/dev/null 2>&1 && flock -w 900 9
        as_root env DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" update -q &&
            as_root env DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" install -y -q \
                --no-install-recommends "${missing[@]}"
    ) 9>"${TMPDIR:-/tmp}/waitshim-apt.lock" >"$out" 2>&1; then
        cat "$out" >&2
        rm -f "$out"
        printf 'error: could not install: %s\n' "${missing[*]}" >&2
        return 1
    fi
    rm -f "$out"
}

# ensure_compilers: a C compiler is assumed; install a C++ one if missing.
ensure_compilers() {
    command -v cc >/dev/null 2>&1 || ensure_packages gcc libc6-dev
    command -v c++ >/dev/null 2>&1 || ensure_packages g++
}

# ensure_rust_components: clippy and rustfmt, through rustup when available.
ensure_rust_components() {
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs)"
    local comp
    for comp in clippy rustfmt; do
        local probe=(cargo clippy --version)
        [ "$comp" = rustfmt ] && probe=(cargo fmt --version)
        if ! "${probe[@]}" >/dev/null 2>&1; then
            command -v rustup >/dev/null 2>&1 ||
                die "cargo $comp is missing and rustup is not available to add it"
            say "adding Rust component $comp"
            rustup component add "$comp"
        fi
    done
}

# build_waitshim: builds the shim and the analyzer (release; CARGO_TARGET_DIR honoured) and
# sets $shim and $analyze to them; dies when either is missing.
build_waitshim() {
    say "building waitshim (cargo build --release)"
    cargo build --release --quiet -p waitshim-shim -p waitshim-analyze
    local target="${CARGO_TARGET_DIR:-$WAITSHIM_ROOT/target}"
    shim="$target/release/libwaitshim.so"
    analyze="$target/release/waitshim-analyze"
    [ -f "$shim" ] || die "$shim was not built"
    [ -x "$analyze" ] || die "$analyze was not built"
}
