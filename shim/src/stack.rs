//! Room on the stack for the shim's slow paths.
//!
//! The shim's work beyond its fast paths (a tracked wait's bookkeeping, registering a thread or
//! an object, unwinding a chain, writing records) needs some kilobytes of stack, and it runs on
//! the program's threads: a thread made with a 16 KiB stack (`PTHREAD_STACK_MIN`), or one that
//! calls a lock with little stack left (deep recursion, a stack the program handed over with
//! `pthread_attr_setstack`, right above its own data), would overflow it. [`roomy`] runs such
//! work on a spare stack when the thread's own has less than [`RED_ZONE`] left; threads with
//! ordinary stacks only pay a comparison. Before it switches, it notes the registers the thread
//! left its stack with, so that call chains taken on the spare stack are unwound from there (the
//! unwinder does not follow a switch of stacks).
//!
//! What stays on the thread's own stack is the fast paths and the few frames down to a
//! `roomy` (measured by `fixtures/stack_headroom.c`: see tests/tests/harm.rs).

use waitshim_unwind::Regs;

use crate::track::threads;

/// A slow path runs on the thread's stack if it has at least this much left.
const RED_ZONE: usize = 32 << 10;
/// The spare stack's size.
const SPARE: usize = 256 << 10;

/// Runs `f`, a slow path of the shim, where there is room for it (see the module comment).
#[inline]
pub fn roomy<R>(f: impl FnOnce() -> R) -> R {
    match stacker::remaining_stack() {
        Some(left) if left < RED_ZONE => switched(f),
        _ => direct(f),
    }
}

/// `f` on the thread's own stack, in a frame of its own: were `f` inlined into `roomy`'s
/// caller, that caller's frame, on the thread's stack before the switch, would be sized for
/// `f`'s locals too (a new thread's record is built on the stack: 4 KiB).
#[inline(never)]
fn direct<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cold]
#[inline(never)]
fn switched<R>(f: impl FnOnce() -> R) -> R {
    let regs = here();
    let before = threads::switched_from();
    // Nested calls keep the outermost registers: those describe the thread's own stack.
    if before.is_null() {
        threads::set_switched_from(&regs);
    }
    let r = stacker::grow(SPARE, f);
    threads::set_switched_from(before);
    r
}

/// The registers of this instant of [`switched`], which its CFI row describes (as the
/// unwinder's own capture does): an unwind from them walks `switched`'s callers.
#[inline(always)]
fn here() -> Regs {
    let (rip, rsp, rbp, rbx, r12, r13, r14, r15): (u64, u64, u64, u64, u64, u64, u64, u64);
    // SAFETY: only copies registers.
    unsafe {
        std::arch::asm!(
            "lea {0}, [rip]",
            "mov {1}, rsp",
            "mov {2}, rbp",
            "mov {3}, rbx",
            "mov {4}, r12",
            "mov {5}, r13",
            "mov {6}, r14",
            "mov {7}, r15",
            out(reg) rip, out(reg) rsp, out(reg) rbp, out(reg) rbx,
            out(reg) r12, out(reg) r13, out(reg) r14, out(reg) r15,
            options(nomem, nostack, preserves_flags),
        );
    }
    Regs {
        rip,
        rsp,
        rbp,
        rbx,
        r12,
        r13,
        r14,
        r15,
    }
}
