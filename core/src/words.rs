//! The shim's per-thread words, in initial-exec TLS: what its fast paths, its spare stacks and
//! its signal handlers read of the calling thread. A leaf: the thread records
//! (`track::threads`) and the platform pieces below them (`stack`, `chain`) both build on it.
//!
//! Initial-exec TLS: one `mov` from `%fs` instead of a call to `__tls_get_addr` (what Rust's
//! `thread_local!` costs in a shared library), read twice per lock/unlock pair. Initial-exec TLS
//! is fine for a preloaded library: it is loaded at start-up, into the static TLS block.
//!
//! Seven words: `FAST` is the thread's record while the shim may track its calls and null
//! otherwise, so the fast path tests one word; `REC` is the record itself; `MODE` says why
//! `FAST` is null (inside the shim, or thread exited); `CANCEL` is the program's cancellability
//! state plus one while the shim runs its own work with cancellation disabled (see
//! `track::threads::InShim`), 0 otherwise; `SWITCHED` points at the registers the thread's work
//! left its own stack with, while it runs on the shim's spare stack (see `crate::stack`);
//! `STACK_LOW` is the lowest address of the stack it runs on; `TLS_DTORS` heads its list of Rust
//! thread-local destructors (see `track::tls_dtors`).

use std::arch::{asm, global_asm};

global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    // Global but hidden: visible to every codegen unit, never exported from the library.
    ".globl waitshim_thread_words",
    ".hidden waitshim_thread_words",
    ".type waitshim_thread_words, @object",
    ".size waitshim_thread_words, 56",
    "waitshim_thread_words:",
    ".zero 56",
    ".popsection",
);

pub(crate) const FAST: usize = 0;
pub(crate) const REC: usize = 8;
pub(crate) const MODE: usize = 16;
pub(crate) const CANCEL: usize = 24;
pub(crate) const SWITCHED: usize = 32;
pub(crate) const STACK_LOW: usize = 40;
pub(crate) const TLS_DTORS: usize = 48;

#[inline(always)]
fn offset() -> usize {
    let off: usize;
    // SAFETY: loads the link-time constant thread-pointer offset of our TLS block from the GOT.
    unsafe {
        asm!("mov {}, qword ptr [rip + waitshim_thread_words@GOTTPOFF]", out(reg) off,
             options(pure, readonly, nostack, preserves_flags));
    }
    off
}

#[inline(always)]
pub(crate) fn get(word: usize) -> usize {
    let v: usize;
    // SAFETY: reads a word of this thread's own TLS block.
    unsafe {
        asm!("mov {v}, qword ptr fs:[{o}]", v = out(reg) v, o = in(reg) offset() + word,
             options(readonly, nostack, preserves_flags));
    }
    v
}

#[inline(always)]
pub(crate) fn set(word: usize, v: usize) {
    // SAFETY: writes a word of this thread's own TLS block.
    unsafe {
        asm!("mov qword ptr fs:[{o}], {v}", v = in(reg) v, o = in(reg) offset() + word,
             options(nostack, preserves_flags));
    }
}

/// The registers the calling thread left its own stack with, while the shim's work runs on a
/// spare stack (null otherwise): chains are unwound from there.
pub fn switched_from() -> *const waitshim_unwind::Regs {
    get(SWITCHED) as *const waitshim_unwind::Regs
}

pub fn set_switched_from(regs: *const waitshim_unwind::Regs) {
    set(SWITCHED, regs as usize);
}

/// The lowest address the calling thread's current stack may use (see `crate::stack`); 0 until
/// found.
#[inline(always)]
pub fn stack_low() -> usize {
    get(STACK_LOW)
}

pub fn set_stack_low(low: usize) {
    set(STACK_LOW, low);
}

/// The head of the calling thread's list of Rust thread-local destructors (0: none).
pub fn tls_dtors() -> usize {
    get(TLS_DTORS)
}

pub fn set_tls_dtors(head: usize) {
    set(TLS_DTORS, head);
}
