//! `pthread_rwlock_*`. Every call returns exactly what glibc returns.
//!
//! As for mutexes, a lock first tries the real trylock of its side: success means no wait (any
//! success of `tryrdlock` is a legal outcome of `rdlock`, which is never stricter). EBUSY means
//! the caller waits, tracked, sliced with the real timed lock so that wait-for cycles can be
//! checked. Write acquisitions and waits are the object's exclusive side (the mutex-style
//! counters, held locks and lock-order edges); read acquisitions and waits its shared side
//! (`READ_*` counters): readers blocking a writer show on the write side, a writer blocking
//! readers on the read side. A writer is the lock's holder in the wait-for graph (glibc's
//! `__cur_writer`); readers are not known one by one, so a cycle through readers is not seen.

use libc::{c_int, clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec, EBUSY, ETIMEDOUT};
use waitshim_format::ObjectKind;

use crate::layout::rwlock as glibc_rwlock;
use crate::real::real_fns;
use crate::track::engage::{self, Outcome, Side};
use crate::track::objects::{AUX_READS, EPISODE};
use crate::track::threads::{current, Inside, ThreadRec};
use crate::track::{tracker, CallSite};

pub fn resolve() {
    real::slot::resolve();
}

mod real {
    use libc::{c_int, clockid_t, pthread_rwlock_t, pthread_rwlockattr_t, timespec};
    super::real_fns! {
        pthread_rwlock_init: fn(l: *mut pthread_rwlock_t, a: *const pthread_rwlockattr_t) -> c_int;
        pthread_rwlock_destroy: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_rdlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_tryrdlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_timedrdlock: fn(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int;
        pthread_rwlock_clockrdlock: fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int;
        pthread_rwlock_wrlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_trywrlock: fn(l: *mut pthread_rwlock_t) -> c_int;
        pthread_rwlock_timedwrlock: fn(l: *mut pthread_rwlock_t, t: *const timespec) -> c_int;
        pthread_rwlock_clockwrlock: fn(l: *mut pthread_rwlock_t, c: clockid_t, t: *const timespec) -> c_int;
        pthread_rwlock_unlock: fn(l: *mut pthread_rwlock_t) -> c_int;
    }
}

const KIND: ObjectKind = ObjectKind::RwLock;

/// The subtype of an rwlock is its preference kind (`PTHREAD_RWLOCK_PREFER_*`).
fn subtype(addr: usize) -> u32 {
    // SAFETY: `addr` is the rwlock the caller is initialising or using: live.
    unsafe { glibc_rwlock::preference(addr) }
}

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
    engage::initialised(
        r,
        l as usize,
        KIND,
        subtype(l as usize),
        CallSite::default(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_destroy(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_rwlock_destroy(l) };
    engage::destroyed(r, l as usize);
    r
}

/// A read acquisition: counted on the object's shared side, in the thread's cache like write
/// acquisitions, and noted among the thread's read holds (wait-for walks: a writer waits for
/// the readers). Not a held lock for lock order or hold times (readers do not exclude each
/// other).
#[inline(always)]
fn read_engaged(t: &ThreadRec, addr: usize) {
    match t.cached(addr) {
        Some((s, obj)) => {
            t.count_aux(s, AUX_READS);
            t.read_taken(obj);
        }
        None => read_engaged_uncached(t, addr),
    }
}

#[cold]
#[inline(never)]
fn read_engaged_uncached(t: &ThreadRec, addr: usize) {
    let Some(tr) = tracker() else { return };
    let obj = {
        let _in = Inside::enter();
        tr.object(t, addr, KIND, subtype(addr))
    };
    t.count_aux(t.slot(addr), AUX_READS);
    t.read_taken(obj);
}

/// A try-acquisition's result, accounted for.
fn tried(t: &ThreadRec, addr: usize, side: Side, r: c_int) {
    match (r, side) {
        (0, Side::Shared) => read_engaged(t, addr),
        (0, Side::Exclusive) => engage::engaged_try(t, addr, KIND, subtype),
        (EBUSY, _) => engage::busy(t, addr, KIND, subtype),
        (e, _) => engage::failed(t, addr, KIND, subtype, e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_rwlock_tryrdlock(l) };
    if let Some(t) = current() {
        tried(t, l as usize, Side::Shared, r);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_rwlock_trywrlock(l) };
    if let Some(t) = current() {
        tried(t, l as usize, Side::Exclusive, r);
    }
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
    let Some(t) = current() else {
        // SAFETY: forwarding.
        return unsafe { real_lock(l, side, deadline) };
    };
    // SAFETY: forwarding.
    let r = unsafe {
        match side {
            Side::Shared => real::pthread_rwlock_tryrdlock(l),
            Side::Exclusive => real::pthread_rwlock_trywrlock(l),
        }
    };
    if r == 0 {
        match side {
            Side::Shared => read_engaged(t, l as usize),
            Side::Exclusive => engage::engaged(t, l as usize, KIND, subtype),
        }
        return 0;
    }
    // SAFETY: the caller's rwlock.
    unsafe { lock_busy(t, l, side, deadline, r) }
}

/// The try failed: wait, tracked, or pass on what the lock itself answers.
#[cold]
#[inline(never)]
unsafe fn lock_busy(
    t: &ThreadRec,
    l: *mut pthread_rwlock_t,
    side: Side,
    deadline: Option<(clockid_t, timespec)>,
    tried: c_int,
) -> c_int {
    let addr = l as usize;
    let tr = match tracker() {
        // EAGAIN (too many readers) and the like: the lock call gives its own answer. A thread
        // locking what it holds for writing gets EDEADLK at once: nobody waits.
        Some(tr) if tried == EBUSY && glibc_rwlock::writer(addr, false) != t.tid() => tr,
        _ => {
            // SAFETY: forwarding.
            let r = unsafe { real_lock(l, side, deadline) };
            if r == 0 {
                match side {
                    Side::Shared => read_engaged(t, addr),
                    Side::Exclusive => engage::engaged(t, addr, KIND, subtype),
                }
            } else if r != ETIMEDOUT {
                engage::failed(t, addr, KIND, subtype, r);
            }
            return r;
        }
    };
    let _in = Inside::enter();
    let obj = tr.object(t, addr, KIND, subtype(addr));
    if side == Side::Exclusive {
        engage::attempting(t, obj);
    }
    let mut w = engage::wait_begin(tr, t, obj, side);
    if deadline.is_none() {
        engage::untimed(t);
    }
    let r = engage::wait_sliced(tr, t, &mut w, deadline, false, |clk, until| {
        // SAFETY: the caller's rwlock, a valid absolute time.
        unsafe { real_lock(l, side, Some((clk, *until))) }
    });
    engage::wait_end(tr, t, w, Outcome::of(r));
    if r == 0 {
        match side {
            Side::Shared => read_engaged(t, addr),
            Side::Exclusive => engage::engaged(t, addr, KIND, subtype),
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int {
    if let Some(t) = current() {
        let addr = l as usize;
        if glibc_rwlock::writer(addr, false) == t.tid() {
            engage::disengaging(t, addr);
        } else {
            read_releasing(t, addr);
        }
    }
    // SAFETY: forwarding.
    unsafe { real::pthread_rwlock_unlock(l) }
}

/// A reader leaves. While an episode is open on the lock (a writer waits for the readers), the
/// last reader to leave is the one the writer waited for: it ends the episode.
#[inline(always)]
fn read_releasing(t: &ThreadRec, addr: usize) {
    t.read_left(addr);
    if let Some((_, obj)) = t.cached(addr) {
        // SAFETY: the rwlock this thread is unlocking: live.
        if obj.flags() & EPISODE != 0 && unsafe { glibc_rwlock::readers(addr) } == 1 {
            engage::released(t, obj);
        }
    }
}
