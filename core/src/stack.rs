//! Room on the stack for the shim's slow paths.
//!
//! The shim's work beyond its fast paths (a tracked wait's bookkeeping, registering a thread or
//! an object, unwinding a chain, writing records) needs some kilobytes of stack, and it runs on
//! the program's threads: a thread made with a 16 KiB stack (`PTHREAD_STACK_MIN`), or one that
//! calls a lock with little stack left (deep recursion, a stack the program handed over with
//! `pthread_attr_setstack`, right above its own data), would overflow it. [`with_room`] runs such
//! work on a spare stack when the thread's own has less than `RED_ZONE` left; threads with
//! ordinary stacks only pay a comparison. Before it switches, it notes the registers the thread
//! left its stack with, so that call chains taken on the spare stack are unwound from there (the
//! unwinder does not follow a switch of stacks).
//!
//! A thread's stack bounds are the unwinder's (`waitshim_unwind::thread_stack`), found once
//! without allocating.
//!
//! What stays on the thread's own stack is the fast paths and the few frames down to a
//! `with_room` (measured by `fixtures/stack_headroom.c`: see tests/tests/harm.rs).

use waitshim_unwind::Regs;

use crate::words as threads;

/// A slow path runs on the thread's stack if it has at least this much left.
const RED_ZONE: usize = 32 << 10;
/// The spare stack's size.
const SPARE: usize = 256 << 10;
/// The lowest address a thread may use: not found yet.
const UNKNOWN: usize = 0;
/// Its bounds could not be found: the thread is taken to have room.
const UNBOUNDED: usize = 1;

/// Runs `f`, a slow path of the shim, where there is room for it (see the module comment).
#[inline]
pub fn with_room<R>(f: impl FnOnce() -> R) -> R {
    let mut low = threads::stack_low();
    if low == UNKNOWN {
        low = find_stack_low();
        threads::set_stack_low(low);
    }
    if low != UNBOUNDED && (psm::stack_pointer() as usize).saturating_sub(low) < RED_ZONE {
        switched(f)
    } else {
        direct(f)
    }
}

/// `f` on the thread's own stack, in a frame of its own: were `f` inlined into `with_room`'s
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
    let outer_low = threads::stack_low();
    let r = on_spare_stack(f, outer_low);
    threads::set_switched_from(before);
    r
}

/// Runs `f` on a fresh stack of [`SPARE`] bytes above a guard page, mapped for the call (the
/// pages come from the kernel, never from the program's heap). Without the memory, `f` runs
/// where it is.
fn on_spare_stack<R>(f: impl FnOnce() -> R, outer_low: usize) -> R {
    let len = SPARE + 4096;
    let Some(base) = crate::sys::map_anonymous(len, libc::MAP_NORESERVE) else {
        return f();
    };
    // SAFETY: the lowest page of our own mapping becomes its guard.
    unsafe {
        crate::sys::call6(
            libc::SYS_mprotect,
            [base, 4096, libc::PROT_NONE as usize, 0, 0, 0],
        )
    };
    let low = base + 4096;
    threads::set_stack_low(low);
    let mut f = Some(f);
    // SAFETY: the stack is ours, mapped above, and outlives the call; `f` does not unwind across
    // it (a panic is caught and resumed after the switch back).
    let r = unsafe {
        psm::on_stack(low as *mut u8, SPARE, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (f.take().unwrap())()))
        })
    };
    threads::set_stack_low(outer_low);
    // SAFETY: our own mapping, no longer in use.
    unsafe { crate::sys::unmap(base, len) };
    r.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// The lowest address the calling thread's stack may reach, [`UNBOUNDED`] if not known.
#[cold]
fn find_stack_low() -> usize {
    let sp = psm::stack_pointer() as u64;
    waitshim_unwind::thread_stack(sp).map_or(UNBOUNDED, |(lo, _)| lo as usize)
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
