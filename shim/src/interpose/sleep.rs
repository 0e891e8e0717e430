//! Sleeps resumed after a live-stack signal.
//!
//! `holder_live_stack` asks a holder for its stack through a signal, and a handler makes the
//! kernel end `nanosleep`, `clock_nanosleep`, `usleep` and `sleep` early with EINTR (they are
//! never restarted). A program that sleeps while holding a lock would then wake early because it
//! was profiled. While live stacks are in use, these wrappers sleep again for the time left when
//! the only signal the thread took during the sleep was the shim's (counted per thread by the
//! handler). Otherwise they call the C library's functions directly.
//!
//! If a signal of the program lands during the same sleep as the shim's, the sleep is resumed
//! too: the program's handler has run, but the sleep no longer returns early for it.

use libc::{c_int, c_uint, clockid_t, timespec, useconds_t, EINTR};

use crate::clock::now_ns;
use crate::livestack;

mod glibc {
    use libc::{c_int, c_uint, clockid_t, timespec, useconds_t};
    crate::real::real_fns! {
        nanosleep: fn(req: *const timespec, rem: *mut timespec) -> c_int;
        clock_nanosleep: fn(c: clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec) -> c_int;
        usleep: fn(us: useconds_t) -> c_int;
        sleep: fn(s: c_uint) -> c_uint;
    }
}

fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

fn ts(ns: u64) -> timespec {
    timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Sleeps `ns` more on CLOCK_MONOTONIC, resuming after the shim's signals; false when another
/// signal ended it (errno is EINTR then).
fn sleep_rest(ns: u64) -> bool {
    let end = now_ns().saturating_add(ns);
    loop {
        let seen = livestack::signals_taken();
        let left = end.saturating_sub(now_ns());
        if left == 0 {
            return true;
        }
        let req = ts(left);
        // SAFETY: valid timespec; no remainder wanted (the end time is kept here).
        if unsafe { glibc::nanosleep(&req, std::ptr::null_mut()) } == 0 {
            return true;
        }
        if errno() != EINTR || livestack::signals_taken() == seen {
            return false;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if !livestack::in_use() {
        // SAFETY: forwarding.
        return unsafe { glibc::nanosleep(req, rem) };
    }
    let mut left = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let rem_out = if rem.is_null() {
        &mut left as *mut timespec
    } else {
        rem
    };
    let mut next = req;
    loop {
        let seen = livestack::signals_taken();
        // SAFETY: forwarding, with our own remainder when the caller gave none.
        let r = unsafe { glibc::nanosleep(next, rem_out) };
        if r == 0 || errno() != EINTR || livestack::signals_taken() == seen {
            return r;
        }
        next = rem_out;
    }
}

#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    if !livestack::in_use() {
        // SAFETY: forwarding.
        return unsafe { glibc::clock_nanosleep(clock, flags, req, rem) };
    }
    let mut left = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let absolute = flags & libc::TIMER_ABSTIME != 0;
    let rem_out = if rem.is_null() {
        &mut left as *mut timespec
    } else {
        rem
    };
    let mut next = req;
    loop {
        let seen = livestack::signals_taken();
        // SAFETY: forwarding; an absolute deadline is simply asked for again.
        let r = unsafe { glibc::clock_nanosleep(clock, flags, next, rem_out) };
        if r != EINTR || livestack::signals_taken() == seen {
            return r;
        }
        if !absolute {
            next = rem_out;
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn usleep(us: useconds_t) -> c_int {
    if !livestack::in_use() {
        // SAFETY: forwarding.
        return unsafe { glibc::usleep(us) };
    }
    let start = now_ns();
    let seen = livestack::signals_taken();
    // SAFETY: forwarding.
    let r = unsafe { glibc::usleep(us) };
    if r == 0 || errno() != EINTR || livestack::signals_taken() == seen {
        return r;
    }
    let e = errno();
    let left = (u64::from(us) * 1000).saturating_sub(now_ns().saturating_sub(start));
    if sleep_rest(left) {
        set_errno(e);
        0
    } else {
        -1
    }
}

#[no_mangle]
pub unsafe extern "C" fn sleep(s: c_uint) -> c_uint {
    if !livestack::in_use() {
        // SAFETY: forwarding.
        return unsafe { glibc::sleep(s) };
    }
    let start = now_ns();
    let seen = livestack::signals_taken();
    // SAFETY: forwarding.
    let r = unsafe { glibc::sleep(s) };
    if r == 0 || livestack::signals_taken() == seen {
        return r;
    }
    let e = errno();
    let left = (u64::from(s) * 1_000_000_000).saturating_sub(now_ns().saturating_sub(start));
    if sleep_rest(left) {
        set_errno(e);
        0
    } else {
        // Interrupted by the program's own signal: what is left, rounded as glibc does.
        let left = (u64::from(s) * 1_000_000_000).saturating_sub(now_ns().saturating_sub(start));
        ((left / 1_000_000_000) + u64::from(left % 1_000_000_000 >= 500_000_000)) as c_uint
    }
}
