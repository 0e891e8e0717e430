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
pub mod procmaps;
pub mod real;
pub mod stack;
pub mod symbols;
pub mod sys;
// Left out of unit-test builds: it defines `__cxa_thread_atexit_impl` for the whole test program.
#[cfg(not(test))]
pub mod tls_dtors;
pub mod track;
pub mod wants;
