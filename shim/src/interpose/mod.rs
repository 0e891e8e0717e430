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

/// What the wrappers learn from the C library's functions once they are resolved (the table,
/// `crate::real`, is the core's): whether another interposer follows the shim's mutex functions,
/// and the futex trampoline's hook. From the library constructor.
pub fn settle() {
    mutex::resolve();
    futex::resolve();
}
