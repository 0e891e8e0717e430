//! `pthread_cond_*`. Every call returns exactly what glibc returns.
//!
//! glibc keeps two implementations under two symbol versions: `GLIBC_2.2.5` (the old one, which
//! allocates a new-style condition variable behind the caller's) and `GLIBC_2.3.2`. Our
//! unversioned definitions bind for programs linked against either, and every call goes to the
//! `GLIBC_2.3.2` one, so a condition variable is never handled by both (a producer/consumer
//! program whose wait and signal went to different implementations hangs).
//!
//! What a wait, a signal and a broadcast mean for the tracker is in `track::cond`.
//!
//! The wait is one call to the real function, never sliced like a mutex wait: a condition
//! variable has no owner, so a thread waiting on it closes no wait-for cycle, and a sliced wait
//! could miss a signal sent between two slices.

use libc::{c_int, clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};
use waitshim_format::ObjectKind;

use crate::track::cond::{self, SUBTYPE};
use crate::track::engage;
use crate::track::CallSite;

const KIND: ObjectKind = ObjectKind::Cond;

/// The C library's functions, bound to the `GLIBC_2.3.2` versions. Called through `C-unwind`
/// pointers: a wait is a cancellation point, and glibc cancels a thread by unwinding it through
/// our frames (our bookkeeping runs on the way out, see [`Pending`]).
use crate::real::cond as real;

/// Whether glibc would wait with this deadline at all: it answers EINVAL at once, before touching
/// the mutex, for a deadline out of range (and crashes on a null one, which it must do itself).
fn valid(ts: *const timespec) -> bool {
    // SAFETY: a non-null pointer from the caller of a timed wait points to a timespec.
    !ts.is_null() && unsafe { (*ts).tv_nsec >= 0 && (*ts).tv_nsec < 1_000_000_000 }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_init(
    c: *mut pthread_cond_t,
    a: *const pthread_condattr_t,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::init(c, a) };
    engage::initialised(r, c as usize, KIND, SUBTYPE, CallSite::default());
    r
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_destroy(c: *mut pthread_cond_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::destroy(c) };
    engage::destroyed(r, c as usize);
    r
}

type WakeFn = unsafe extern "C-unwind" fn(*mut pthread_cond_t) -> c_int;

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_signal(c: *mut pthread_cond_t) -> c_int {
    let f = real::SIGNAL.resolved();
    if f > 1 && cond::woken_quietly(c as usize, false) {
        // SAFETY: glibc's function, whose signature is `WakeFn`; forwarding.
        return unsafe { std::mem::transmute::<usize, WakeFn>(f)(c) };
    }
    // SAFETY: forwarding the caller's condition variable.
    unsafe { signal_tracked(c) }
}

#[inline(never)]
unsafe extern "C-unwind" fn signal_tracked(c: *mut pthread_cond_t) -> c_int {
    cond::waking(c as usize, false);
    // SAFETY: forwarding.
    unsafe { real::signal(c) }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    let f = real::BROADCAST.resolved();
    if f > 1 && cond::woken_quietly(c as usize, true) {
        // SAFETY: glibc's function, whose signature is `WakeFn`; forwarding.
        return unsafe { std::mem::transmute::<usize, WakeFn>(f)(c) };
    }
    // SAFETY: forwarding the caller's condition variable.
    unsafe { broadcast_tracked(c) }
}

#[inline(never)]
unsafe extern "C-unwind" fn broadcast_tracked(c: *mut pthread_cond_t) -> c_int {
    cond::waking(c as usize, true);
    // SAFETY: forwarding.
    unsafe { real::broadcast(c) }
}

/// Entry trampoline: hands `wait_from` the caller's return address and stack pointer (the call
/// site, for the chain cache) in the third and fourth argument registers, then jumps to it.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
) -> c_int {
    std::arch::naked_asm!("mov rdx, qword ptr [rsp]", "lea rcx, [rsp + 8]", "jmp {}", sym wait_from)
}

unsafe extern "C-unwind" fn wait_from(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    ret: usize,
    sp: usize,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        cond::wait(c as usize, m as usize, CallSite { ret, sp }, true, || {
            real::wait(c, m)
        })
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_timedwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    ts: *const timespec,
) -> c_int {
    if !valid(ts) {
        // SAFETY: forwarding; glibc rejects (or faults on) the deadline without waiting.
        return unsafe { real::timedwait(c, m, ts) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        cond::wait(c as usize, m as usize, CallSite::default(), false, || {
            real::timedwait(c, m, ts)
        })
    }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_clockwait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if (clk != libc::CLOCK_REALTIME && clk != libc::CLOCK_MONOTONIC) || !valid(ts) {
        // SAFETY: forwarding; glibc rejects the clock or deadline without waiting.
        return unsafe { real::clockwait(c, m, clk, ts) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe {
        cond::wait(c as usize, m as usize, CallSite::default(), false, || {
            real::clockwait(c, m, clk, ts)
        })
    }
}
