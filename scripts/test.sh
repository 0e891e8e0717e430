#!/usr/bin/env bash
# The project's test command (README; CI runs it through .ci/run).
#
# On a fresh Debian 12 machine with Rust and gcc: installs the missing system
# packages (g++ for the C++ fixture; pigz for the real-program tests; tmux to
# drive the live view in a terminal), runs the fast tier (every crate's unit
# tests, the fuzz crate compiled), then builds, runs every test, and checks
# clippy, formatting and the API docs' links. Stops at the first failing step
# and names it. Under CI=true (as CI runs it) a test whose dependency is
# missing fails instead of skipping.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$WAITSHIM_ROOT"

current_step="start"
step() {
    current_step="$*"
    say "$*"
}
fixtures_out=""
on_exit() {
    local rc=$?
    if [ -n "$fixtures_out" ]; then
        rm -rf "$fixtures_out"
    fi
    if [ "$rc" -ne 0 ]; then
        printf '\ntest.sh: FAILED at step: %s (exit %s)\n' "$current_step" "$rc" >&2
    fi
}
trap on_exit EXIT

step "system packages"
ensure_compilers
ensure_packages pigz tmux
# The allocators programs bring, preloaded beside the shim (tests/tests/harm.rs).
ensure_packages libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
# A debugger for the test that runs a program under one (tests/tests/hostile.rs).
ensure_packages gdb
# The readers the export tests check each format with: go tool pprof, protoc (with Perfetto's
# own schema), and a headless Chromium for the HTML timeline (tests/tests/html.rs).
ensure_packages golang-go protobuf-compiler chromium
# pip, to fetch Perfetto's published trace schema from PyPI (scripts/perfetto-schema.py); the
# validators of the CI formats (tests/tests/ci.rs: xmllint for JUnit, Python's jsonschema for
# SARIF 2.1.0; the published schemas are kept in tests/schemas/).
ensure_packages python3-pip libxml2-utils python3-jsonschema
# The history test on PostgreSQL starts a throw-away cluster of its own (outside CI skipped,
# saying so, when the server cannot be installed; under CI=true that fails the run, as every
# missing test dependency does: tests/src/lib.rs, skip_or_fail).
if ! ensure_packages postgresql; then
    case "${CI:-}" in
    "" | false | 0) say "PostgreSQL could not be installed: its history tests will be skipped" ;;
    *) die "PostgreSQL could not be installed, and CI=${CI} does not let its tests be skipped" ;;
    esac
fi
# objcopy, to split debug files (elfsym, analyzer/tests/debugfile.rs, tests/tests/policy.rs).
ensure_packages binutils

step "Rust components (clippy, rustfmt)"
ensure_rust_components

# The fast tier first: every crate's unit tests (a minute on a warm build), so that a broken
# unit fails before the long end-to-end tests; the release profile shares its artifacts with
# the steps below.
step "fast tier: unit tests of every crate (cargo test --release --workspace --lib --bins)"
cargo test --release --workspace --lib --bins

# The fuzz crate is outside the workspace (cargo-fuzz builds it with nightly and sanitizers):
# at least it must compile against the analyzer as it is.
step "fuzz crate compiles (cargo check --manifest-path fuzz/Cargo.toml)"
CARGO_TARGET_DIR="$WAITSHIM_ROOT/target/fuzz-check" cargo check --manifest-path fuzz/Cargo.toml --bins

step "fixtures compile"
fixtures_out="$(mktemp -d)"
scripts/build-fixtures.sh "$fixtures_out"
rm -rf "$fixtures_out"
fixtures_out=""

step "cargo build --release --workspace"
cargo build --release --workspace

step "cargo test --release --workspace"
cargo test --release --workspace

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo fmt --check"
cargo fmt --all --check

step "cargo doc --no-deps (warnings are errors: a doc link that names nothing)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

current_step="done"
say "all tests passed"
