//! The interposed functions, one file per family. Each wrapper translates its call into tracking
//! operations and calls the real function; it returns exactly what the real function returned.

pub mod barrier;
pub mod cond;
pub mod mutex;
pub mod process;
pub mod rwlock;
pub mod sem;
pub mod signal;
pub mod spin;
pub mod thread;
