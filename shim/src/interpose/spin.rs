//! `pthread_spin_*`. Every call returns exactly what glibc returns.
//!
//! Spinning is waiting: a lock first tries the real trylock; when the lock is busy the thread
//! spins on the real trylock, tracked as a wait. glibc's spinlock is a bare word with no owner;
//! the shim's own record of the last thread to acquire it is its holder while the word is set,
//! so a spinlock takes part in the wait-for graph like a mutex. The spin is cut in slices (the
//! clock is read every few hundred turns) after which the waiter looks for a wait-for cycle
//! again, as a sliced mutex wait does: two threads spinning on each other's spinlock are a
//! deadlock that is recorded, not only a pair of burning CPUs.

use libc::{c_int, pthread_spinlock_t};
use waitshim_format::ObjectKind;

use crate::layout::spin as glibc_spin;
use crate::track::engage;
use crate::track::owned::{self, Lock};
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

/// The caller's spinlock, as the core's lock protocol names it.
fn lock(l: *mut pthread_spinlock_t) -> Lock {
    Lock {
        addr: l as usize,
        kind: KIND,
        subtype,
    }
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
        unsafe { engage::acquired_with(t, hit, l as usize, KIND, subtype) };
        return 0;
    }
    // SAFETY: the caller's spinlock.
    unsafe { spin(t, l) }
}

/// The lock is held: spin, tracked.
#[cold]
#[inline(never)]
unsafe fn spin(t: &ThreadRec, l: *mut pthread_spinlock_t) -> c_int {
    let addr = l as usize;
    // Test, then test-and-set: the spinning reads the word from its own cache and only writes it
    // (taking the line from the holder) when it was seen free. glibc's pthread_spin_lock returns
    // 0 once it has the lock, as this does.
    // SAFETY: the caller's spinlock, live for the call; forwarding.
    let spun = unsafe {
        owned::spin(t, &lock(l), || {
            glibc_spin::is_free(glibc_spin::word(addr)) && real::pthread_spin_trylock(l) == 0
        })
    };
    // SAFETY: forwarding (tracking is off).
    spun.unwrap_or_else(|| unsafe { real::pthread_spin_lock(l) })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_spin_trylock(l: *mut pthread_spinlock_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_spin_trylock(l) };
    if let Some(t) = current() {
        // SAFETY: `l` is the caller's spinlock, live for the call; `subtype` reads nothing.
        unsafe { owned::tried(t, &lock(l), r) };
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
        unsafe { engage::releasing(t, l as usize) };
    }
    // SAFETY: forwarding.
    unsafe { real::pthread_spin_unlock(l) }
}
