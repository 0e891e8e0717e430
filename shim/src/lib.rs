//! libwaitshim.so: preloaded into an unmodified program, it interposes the pthread functions a
//! thread waits in, tracks sync objects and threads, and writes a binary log (format defined by
//! the `waitshim-format` crate) for `waitshim-analyze`.
//!
//! The shim must never change what the program computes: every wrapper returns what the real
//! function returns, the shim writes nothing to stdout, and any failure to set up tracking leaves
//! the program running untraced with one line on stderr.

// Unit tests exercise the core's rules alone; what only the interposed functions use is unused
// there.
#![cfg_attr(test, allow(dead_code, unused_imports))]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

// The interposed functions and the C API are left out of unit-test builds: exported from the
// test program, they would interpose its own calls and start tracking it.
#[cfg(not(test))]
mod capi;
mod confinement;
mod delay;
#[cfg(not(test))]
mod interpose;
mod livestack;
mod policy;
mod runtime;
mod sampler;
mod seccomp;
mod service;
mod signals;

// The core's modules, under the names the layers here use for them.
use waitshim_core::{
    chain, clock, config, diag, fdtable, layout, log, policy_api, procmaps, real, sys, track,
};

#[cfg(not(test))]
#[ctor::ctor]
fn start() {
    runtime::start();
}

#[cfg(not(test))]
#[ctor::dtor]
fn stop() {
    // The thread the process ends on: no key destructor runs its thread-exit hook (they run
    // when a thread ends, not when the process does), so its end, totals and name are written
    // here, as for any other thread.
    track::thread_exited();
    track::finish(waitshim_format::end_reason::EXIT);
}

/// What the crate boundary cannot say (that the core names nothing above it, the compiler keeps):
/// the wrappers use the core's entry points, not the state behind them, and the policy and the
/// live-stack code do not reach into the core's entries (the core hands them `policy_api`).
#[cfg(test)]
mod layering {
    use std::path::Path;

    fn sources(dir: &Path) -> Vec<(String, String)> {
        let mut files = Vec::new();
        for e in std::fs::read_dir(dir).expect("source directory") {
            let path = e.expect("entry").path();
            if path.is_dir() {
                files.extend(sources(&path));
            } else if path.extension().is_some_and(|x| x == "rs") {
                files.push((path.display().to_string(), code(&path)));
            }
        }
        files
    }

    /// A source file without its comments (which may name anything).
    fn code(path: &Path) -> String {
        let text = std::fs::read_to_string(path).expect("source file");
        text.lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn src() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
    }

    #[test]
    fn the_wrappers_reach_the_core_through_its_entry_points_only() {
        let files = sources(&src().join("interpose"));
        assert!(files.len() >= 10, "the wrappers' files: {}", files.len());
        // The core's state that its types still show: thread records' caches and methods, the
        // tracker's tables, object entries, and the guard that marks the thread inside the shim.
        // (Its private modules, `objects`, `highwater`, `waits`, `lockorder` and the others, the
        // compiler keeps out of reach.)
        let internals = [
            "deadlock",
            "collect::",
            "ObjEntry",
            "Slot",
            ".slot(",
            ".count(",
            ".count_aux",
            ".local()",
            ".held_locks()",
            ".busy()",
            ".count_errno",
            ".acquisitions",
            "by_pthread",
            "create_chains",
            "own_record",
            ".object(",
            "objects.get",
            "InShim",
            ".install(",
        ];
        for (path, text) in files {
            for internal in internals {
                assert!(
                    !text.contains(internal),
                    "{path} names {internal}: the core's entry points (track::engage and the \
                     family modules) do what needs it"
                );
            }
        }
    }

    #[test]
    fn the_policy_and_the_live_stack_code_do_not_reach_into_the_core() {
        for name in ["policy.rs", "livestack.rs"] {
            let text = code(&src().join(name));
            for spelling in ["crate::track", "super::track", "crate::{"] {
                assert!(
                    !text.contains(spelling),
                    "{name} names {spelling}: it is handed what it needs (crate::policy_api)"
                );
            }
        }
    }
}
