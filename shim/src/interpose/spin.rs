//! `pthread_spin_*`. Every call returns exactly what glibc returns.
//!
//! Spinning is waiting: a lock first tries the real trylock; when the lock is busy the thread
//! spins on the real trylock, tracked as a wait. glibc's spinlock is a bare word with no owner;
//! the shim's own record of the last thread to acquire it is its holder while the word is set,
//! so a spinlock takes part in the wait-for graph like a mutex. The spin is cut in slices (the
//! clock is read every few hundred turns) after which the waiter looks for a wait-for cycle
//! again, as a sliced mutex wait does: two threads spinning on each other's spinlock are a
//! deadlock that is recorded, not only a pair of burning CPUs.

use libc::{c_int, pthread_spinlock_t, EBUSY};
use waitshim_format::ObjectKind;

use crate::clock::now_ns;
use crate::layout::spin as glibc_spin;
use crate::track::engage::{self, Outcome, Side};
use crate::track::threads::{current, ThreadRec};
use crate::track::CallSite;

use crate::real::spin as real;

const KIND: ObjectKind = ObjectKind::Spin;

/// A spinlock has no subtype (an [`engage::Subtype`] that reads nothing).
///
/// # Safety
/// None needed: nothing is read.
unsafe fn subtype(_: usize) -> u32 {
    0
}

#[no_mangle]
pub unsafe extern "C" fn pthread_spin_init(l: *mut pthread_spinlock_t, pshared: c_int) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_spin_init(l, pshared) };
    engage::initialised(r, l as usize, KIND, 0, CallSite::default());
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_spin_destroy(l: *mut pthread_spinlock_t) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_spin_destroy(l) };
    engage::destroyed(r, l as usize);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_spin_lock(l: *mut pthread_spinlock_t) -> c_int {
    let Some(t) = current() else {
        // SAFETY: forwarding.
        return unsafe { real::pthread_spin_lock(l) };
    };
    let hit = t.cached(l as usize);
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_spin_trylock(l) };
    if r == 0 {
        // SAFETY: `l` is the caller's spinlock, which this thread now holds; `subtype` reads
        // nothing.
        unsafe { engage::engaged_with(t, hit, l as usize, KIND, subtype) };
        return 0;
    }
    // SAFETY: the caller's spinlock.
    unsafe { spin(t, l) }
}

/// The lock is held: spin in glibc, tracked.
#[cold]
#[inline(never)]
unsafe fn spin(t: &ThreadRec, l: *mut pthread_spinlock_t) -> c_int {
    let addr = l as usize;
    let spun = engage::with_object(t, addr, KIND, 0, |tr, obj| {
        engage::attempting(t, obj);
        // SAFETY: the caller's spinlock, live for the call.
        let mut w = unsafe { engage::wait_begin(tr, t, obj, Side::Exclusive) };
        engage::untimed(t);
        let mut slice_end = w.start + w.slice_ns();
        loop {
            // Test, then test-and-set: the spinning reads the word from its own cache and only
            // writes it (taking the line from the holder) when it was seen free.
            for _ in 0..SPINS_PER_CLOCK {
                // SAFETY: the caller's spinlock; forwarding.
                if unsafe {
                    glibc_spin::is_free(glibc_spin::word(addr))
                        && real::pthread_spin_trylock(l) == 0
                } {
                    engage::wait_end(tr, t, w, Outcome::Acquired);
                    // SAFETY: the caller's spinlock, which `t` now holds.
                    unsafe { engage::engaged(t, addr, KIND, subtype) };
                    // glibc's pthread_spin_lock returns 0 once it has the lock, as here.
                    return 0;
                }
                std::hint::spin_loop();
            }
            engage::check_when_due(tr, t, &mut w, now_ns(), &mut slice_end);
        }
    });
    // SAFETY: forwarding (tracking is off).
    spun.unwrap_or_else(|| unsafe { real::pthread_spin_lock(l) })
}

/// Turns of the spin between two clock reads (about 10 µs of `pause`s).
const SPINS_PER_CLOCK: u32 = 256;

#[no_mangle]
pub unsafe extern "C" fn pthread_spin_trylock(l: *mut pthread_spinlock_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_spin_trylock(l) };
    if let Some(t) = current() {
        match r {
            // SAFETY: `l` is the caller's spinlock, which this thread now holds; `subtype` reads
            // nothing.
            0 => unsafe { engage::engaged_try(t, l as usize, KIND, subtype) },
            // SAFETY: `l` is the caller's spinlock, live for the call; `subtype` reads nothing.
            EBUSY => unsafe { engage::busy(t, l as usize, KIND, subtype) },
            // SAFETY: `l` is the caller's spinlock, live for the call; `subtype` reads nothing.
            e => unsafe { engage::failed(t, l as usize, KIND, subtype, e) },
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_spin_unlock(l: *mut pthread_spinlock_t) -> c_int {
    if crate::track::delayed::armed() {
        // SAFETY: the spinlock being unlocked.
        unsafe { crate::track::delayed::before_release(l as usize, KIND) };
    }
    if let Some(t) = current() {
        // SAFETY: the spinlock being unlocked.
        unsafe { engage::disengaging(t, l as usize) };
    }
    // SAFETY: forwarding.
    unsafe { real::pthread_spin_unlock(l) }
}
