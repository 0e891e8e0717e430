//! The interposed functions, one file per family. Each wrapper translates its call into tracking
//! operations and calls the real function; it returns exactly what the real function returned.

pub mod barrier;
pub mod cond;
pub mod futex;
pub mod mutex;
pub mod process;
pub mod rwlock;
pub mod sem;
pub mod signal;
pub mod spin;
pub mod thread;

/// Resolves the real functions of every family (see [`crate::real::resolve_all`]).
pub fn resolve_all() {
    mutex::resolve();
    cond::resolve();
    rwlock::resolve();
    spin::resolve();
    barrier::resolve();
    sem::resolve();
    signal::resolve();
    thread::resolve();
    process::resolve();
    futex::resolve();
}
