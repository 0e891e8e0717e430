//! The tracking core of `libwaitshim.so` (`docs/ARCHITECTURE.md`): sync objects and threads, the
//! wait protocol the wrappers call, the thread-local words, the clock, and the crash-safe log
//! writer, with the platform pieces they stand on (the private heap, raw system calls, glibc
//! layout peeks, the table of the C library's functions, unwinding).
//!
//! The `waitshim-shim` cdylib builds on this crate: its wrappers translate calls into the
//! entries here, and its runtime registers what the core needs from the layers above (the
//! policy, live stacks, the shim's own thread) in [`track::hooks`]. Nothing here names those
//! layers; the compiler keeps it so.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
// The core's state is built once, by the tracker (`new` where it must be `const`): a `Default`
// would suggest records and tables are made anywhere.
#![allow(clippy::new_without_default)]

pub mod alloc;
pub mod chain;
pub mod clock;
pub mod config;
pub mod diag;
pub mod fdtable;
pub mod layout;
pub mod log;
pub mod modules;
pub mod policy_api;
pub mod procmaps;
pub mod real;
pub mod stack;
pub mod symbols;
pub mod sys;
pub mod track;
mod words;

/// The platform modules (every file beside `track/`) form a layer below the tracker: they name
/// nothing of it, so the tracker's cycle of modules does not reach them. Within one crate the
/// compiler cannot say so; this does.
#[cfg(test)]
mod layering {
    #[test]
    fn the_platform_modules_name_nothing_of_the_tracker() {
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        let mut seen = 0;
        for e in std::fs::read_dir(src).expect("source directory") {
            let path = e.expect("entry").path();
            if path.extension().is_none_or(|x| x != "rs") || path.ends_with("lib.rs") {
                continue;
            }
            seen += 1;
            let text = std::fs::read_to_string(&path).expect("source file");
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                assert!(
                    !line.contains("crate::track") && !line.contains("super::track"),
                    "{} names the tracker: {line}",
                    path.display()
                );
            }
        }
        assert!(seen >= 15, "platform files read: {seen}");
    }
}
