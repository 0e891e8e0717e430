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

// The interposed functions and the C API are left out of unit-test builds: exported from the
// test program, they would interpose its own calls and start tracking it.
#[cfg(not(test))]
mod capi;
mod chain;
mod clock;
mod config;
mod diag;
#[cfg(not(test))]
mod interpose;
mod layout;
mod livestack;
mod log;
mod modules;
mod policy;
mod procmaps;
mod real;
mod runtime;
mod sampler;
mod service;
mod signals;
mod stack;
mod symbols;
mod track;
mod wants;

#[cfg(not(test))]
#[ctor::ctor]
fn start() {
    runtime::start();
}

#[cfg(not(test))]
#[ctor::dtor]
fn stop() {
    track::finish(waitshim_format::end_reason::EXIT);
}
