//! `pthread_rwlock_*`. Every call returns exactly what glibc returns.
//!
//! What their acquisitions, waits and releases mean for the tracker is in `track::rwlock`;
//! these wrappers hand it the real functions of the side asked for.

use libc::{c_int, clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec};
use waitshim_format::ObjectKind;

use crate::track::engage::{self, Side};
use crate::track::rwlock;

use crate::real::rwlock as real;

/// The timed locks check their deadline (and clock) before anything else, even on a free lock;
/// the wrappers leave such calls to glibc whole.
fn valid(ts: *const timespec) -> bool {
    // SAFETY: a non-null pointer from the caller of a timed lock points to a timespec.
    !ts.is_null() && unsafe { (*ts).tv_nsec >= 0 && (*ts).tv_nsec < 1_000_000_000 }
}

fn clock_supported(clk: clockid_t) -> bool {
    clk == libc::CLOCK_REALTIME || clk == libc::CLOCK_MONOTONIC
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_init(
    l: *mut pthread_rwlock_t,
    a: *const pthread_rwlockattr_t,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_rwlock_init(l, a) };
    // SAFETY: the rwlock being initialised.
    unsafe { rwlock::initialised(r, l as usize) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_destroy(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_rwlock_destroy(l) };
    engage::destroyed(r, l as usize);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_rwlock_tryrdlock(l) };
    // SAFETY: the caller's rwlock.
    unsafe { rwlock::tried(l as usize, Side::Shared, r) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_rwlock_trywrlock(l) };
    // SAFETY: the caller's rwlock.
    unsafe { rwlock::tried(l as usize, Side::Exclusive, r) };
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller's rwlock; no deadline.
    unsafe { lock(l, Side::Shared, None) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: the caller's rwlock; no deadline.
    unsafe { lock(l, Side::Exclusive, None) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_timedrdlock(
    l: *mut pthread_rwlock_t,
    ts: *const timespec,
) -> c_int {
    if !valid(ts) {
        // SAFETY: forwarding: glibc answers EINVAL (or faults on NULL, as it would natively).
        return unsafe { real::pthread_rwlock_timedrdlock(l, ts) };
    }
    // SAFETY: the caller's rwlock and a valid deadline.
    unsafe { lock(l, Side::Shared, Some((libc::CLOCK_REALTIME, *ts))) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_timedwrlock(
    l: *mut pthread_rwlock_t,
    ts: *const timespec,
) -> c_int {
    if !valid(ts) {
        // SAFETY: as in timedrdlock.
        return unsafe { real::pthread_rwlock_timedwrlock(l, ts) };
    }
    // SAFETY: the caller's rwlock and a valid deadline.
    unsafe { lock(l, Side::Exclusive, Some((libc::CLOCK_REALTIME, *ts))) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_clockrdlock(
    l: *mut pthread_rwlock_t,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if !clock_supported(clk) || !valid(ts) {
        // SAFETY: forwarding: glibc answers EINVAL.
        return unsafe { real::pthread_rwlock_clockrdlock(l, clk, ts) };
    }
    // SAFETY: the caller's rwlock and a valid deadline on a supported clock.
    unsafe { lock(l, Side::Shared, Some((clk, *ts))) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_clockwrlock(
    l: *mut pthread_rwlock_t,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if !clock_supported(clk) || !valid(ts) {
        // SAFETY: forwarding: glibc answers EINVAL.
        return unsafe { real::pthread_rwlock_clockwrlock(l, clk, ts) };
    }
    // SAFETY: the caller's rwlock and a valid deadline on a supported clock.
    unsafe { lock(l, Side::Exclusive, Some((clk, *ts))) }
}

/// The real blocking lock of `side`, until `until` (absolute, on its clock) or for ever.
///
/// # Safety
/// `l` is the caller's rwlock.
unsafe fn real_lock(
    l: *mut pthread_rwlock_t,
    side: Side,
    until: Option<(clockid_t, timespec)>,
) -> c_int {
    // SAFETY: forwarding the caller's rwlock with a valid absolute time.
    unsafe {
        match (side, until) {
            (Side::Shared, None) => real::pthread_rwlock_rdlock(l),
            (Side::Shared, Some((libc::CLOCK_REALTIME, ts))) => {
                real::pthread_rwlock_timedrdlock(l, &ts)
            }
            (Side::Shared, Some((clk, ts))) => real::pthread_rwlock_clockrdlock(l, clk, &ts),
            (Side::Exclusive, None) => real::pthread_rwlock_wrlock(l),
            (Side::Exclusive, Some((libc::CLOCK_REALTIME, ts))) => {
                real::pthread_rwlock_timedwrlock(l, &ts)
            }
            (Side::Exclusive, Some((clk, ts))) => real::pthread_rwlock_clockwrlock(l, clk, &ts),
        }
    }
}

/// rdlock / wrlock and their timed forms, with a valid deadline if any.
///
/// # Safety
/// `l` is the caller's rwlock.
unsafe fn lock(
    l: *mut pthread_rwlock_t,
    side: Side,
    deadline: Option<(clockid_t, timespec)>,
) -> c_int {
    // SAFETY: the caller's rwlock; forwarding it, with valid absolute times.
    unsafe {
        rwlock::lock(
            l as usize,
            side,
            deadline,
            move || match side {
                Side::Shared => real::pthread_rwlock_tryrdlock(l),
                Side::Exclusive => real::pthread_rwlock_trywrlock(l),
            },
            move |until| real_lock(l, side, until),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int {
    if crate::track::delayed::armed() {
        // SAFETY: the rwlock being unlocked.
        unsafe { crate::track::delayed::before_release(l as usize, ObjectKind::RwLock) };
    }
    // SAFETY: the rwlock being unlocked; forwarding.
    unsafe {
        rwlock::unlocking(l as usize);
        real::pthread_rwlock_unlock(l)
    }
}
