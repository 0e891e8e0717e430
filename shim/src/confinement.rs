//! What the process may do that the shim would like to: whether a seccomp filter confines it
//! (the shim's own system calls might be refused, or kill the process) and whether a tracer
//! (a debugger) follows it (a signal the shim sends would stop the debugger). Read from the
//! process's `status` in `/proc`: at start, and again for the tracer by the shim's thread.
//!
//! A filter in force from the start: the shim keeps to the system calls any program makes (no
//! descriptor table of its own, no holder stacks by signal). A filter the program installs
//! while it runs (through `prctl` or `syscall`, the ways a program does) is judged first
//! (`crate::seccomp`): if it would kill or trap one of the shim's calls, tracing ends there
//! (`crate::track::confining`); if it only fails some with an errno, tracing goes on. A tracer:
//! no holder stacks by signal while it is attached.

use std::sync::atomic::{AtomicBool, Ordering};

static SECCOMP_AT_START: AtomicBool = AtomicBool::new(false);
static TRACED: AtomicBool = AtomicBool::new(false);

/// What `/proc/thread-self/status` says: (a seccomp mode other than 0, the tracer's pid).
fn status() -> Option<(bool, u32)> {
    let text = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    Some((
        field("Seccomp:").unwrap_or(0) != 0,
        field("TracerPid:").unwrap_or(0),
    ))
}

/// Looks at the process as the shim starts. Returns the line to tell the user, if any.
pub fn look_at_start() -> Option<String> {
    let (seccomp, tracer) = status()?;
    SECCOMP_AT_START.store(seccomp, Ordering::Relaxed);
    TRACED.store(tracer != 0, Ordering::Relaxed);
    let mut said = Vec::new();
    if seccomp {
        said.push(
            "a seccomp filter confines this process: the shim keeps to the system calls any \
             program makes (no descriptor table of its own, no holder stacks by signal)",
        );
    }
    if tracer != 0 {
        said.push("a debugger traces this process: no holder stacks by signal while it does");
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// Looks again whether a tracer follows the process (from the shim's thread, periodically).
pub fn refresh_tracer() {
    if let Some((_, tracer)) = status() {
        TRACED.store(tracer != 0, Ordering::Relaxed);
    }
}

/// A seccomp filter was in force when the shim started.
pub fn seccomp_at_start() -> bool {
    SECCOMP_AT_START.load(Ordering::Relaxed)
}

/// Whether the shim may stop a thread of the process with a signal of its own: not under a
/// tracer (which would stop on it), nor under a seccomp filter.
pub fn may_signal() -> bool {
    !TRACED.load(Ordering::Relaxed) && !SECCOMP_AT_START.load(Ordering::Relaxed)
}
