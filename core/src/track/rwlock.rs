//! Read-write locks (`pthread_rwlock_*`): what their acquisitions, waits and releases mean for
//! the tracker. The wrappers in `interpose/rwlock.rs` call these with the real functions.
//!
//! As for mutexes, a lock first tries the real trylock of its side: success means no wait (any
//! success of `tryrdlock` is a legal outcome of `rdlock`, which is never stricter). EBUSY means
//! the caller waits, tracked, sliced with the real timed lock so that wait-for cycles can be
//! checked. Write acquisitions and waits are the object's exclusive side (the mutex-style
//! counters, held locks and lock-order edges); read acquisitions and waits its shared side
//! (`READ_*` counters): readers blocking a writer show on the write side, a writer blocking
//! readers on the read side. A writer is the lock's holder in the wait-for graph (glibc's
//! `__cur_writer`); readers are not known one by one, so a cycle through readers is not seen.

use libc::{c_int, EBUSY, ETIMEDOUT};
use waitshim_format::ObjectKind;

use super::drive::Deadline;
use super::engage::{self, Outcome, Side};
use super::objects::{AUX_READS, EPISODE};
use super::threads::{current, InShim, ThreadRec};
use super::tracker;
use crate::layout::rwlock as glibc_rwlock;

const KIND: ObjectKind = ObjectKind::RwLock;

/// The subtype of an rwlock is its preference kind (`PTHREAD_RWLOCK_PREFER_*`).
///
/// # Safety
/// `addr` is a live rwlock (one the caller is initialising or using).
pub unsafe fn subtype(addr: usize) -> u32 {
    // SAFETY: as the caller promises.
    unsafe { glibc_rwlock::preference(addr) }
}

/// `pthread_rwlock_init` returned `r` for the rwlock at `addr`.
///
/// # Safety
/// `addr` is the rwlock being initialised: live.
pub unsafe fn initialised(r: c_int, addr: usize) {
    // SAFETY: as the caller promises.
    let subtype = unsafe { subtype(addr) };
    engage::initialised(r, addr, KIND, subtype, super::CallSite::default());
}

/// A read acquisition: counted on the object's shared side, in the thread's cache like write
/// acquisitions, and noted among the thread's read holds (wait-for walks: a writer waits for
/// the readers). Not a held lock for lock order or hold times (readers do not exclude each
/// other).
///
/// # Safety
/// `addr` is a live rwlock (read on the uncached path).
#[inline(always)]
unsafe fn read_engaged(t: &ThreadRec, addr: usize) {
    match t.cached(addr) {
        Some((s, obj)) => {
            t.count_aux(s, AUX_READS);
            t.read_taken(obj);
        }
        // SAFETY: as the caller promises.
        None => unsafe { read_engaged_uncached(t, addr) },
    }
}

/// # Safety
/// As [`read_engaged`].
#[cold]
#[inline(never)]
unsafe fn read_engaged_uncached(t: &ThreadRec, addr: usize) {
    let Some(tr) = tracker() else { return };
    let obj = {
        // A lookup and a cache fill; creating the object guards itself (see `Tracker::object`).
        let _in = InShim::enter_quiet();
        // SAFETY: as the caller promises.
        tr.object(t, addr, KIND, unsafe { subtype(addr) })
    };
    t.count_aux(t.slot(addr), AUX_READS);
    t.read_taken(obj);
}

/// `t` holds the rwlock at `addr` on `side`, taken by a call that could have waited.
///
/// # Safety
/// `addr` is a live rwlock.
#[inline(always)]
unsafe fn acquired(t: &ThreadRec, addr: usize, side: Side) {
    // SAFETY: as the caller promises.
    unsafe {
        match side {
            Side::Shared => read_engaged(t, addr),
            Side::Exclusive => engage::acquired(t, addr, KIND, subtype),
        }
    }
}

/// `pthread_rwlock_try{rd,wr}lock` of the rwlock at `addr` returned `r`.
///
/// # Safety
/// `addr` is a live rwlock.
pub unsafe fn tried(addr: usize, side: Side, r: c_int) {
    let Some(t) = current() else { return };
    // SAFETY: as the caller promises.
    unsafe {
        match (r, side) {
            (0, Side::Shared) => read_engaged(t, addr),
            (0, Side::Exclusive) => engage::acquired_by_try(t, addr, KIND, subtype),
            (EBUSY, _) => engage::busy(t, addr, KIND, subtype),
            (e, _) => engage::failed(t, addr, KIND, subtype, e),
        }
    }
}

/// A lock of `side` (rdlock / wrlock and their timed forms, with a valid `deadline` if any) of
/// the rwlock at `addr`: `try_` is the real trylock of that side, `real` the real blocking lock
/// of that side until the absolute time it is given (or for ever). Returns what the lock
/// returns.
///
/// # Safety
/// `addr` is the caller's rwlock: live for the call.
#[inline(always)]
pub unsafe fn lock(
    addr: usize,
    side: Side,
    deadline: Deadline,
    try_: impl Fn() -> c_int,
    real: impl Fn(Deadline) -> c_int,
) -> c_int {
    let Some(t) = current() else {
        return real(deadline);
    };
    let r = try_();
    if r == 0 {
        // SAFETY: as the caller promises.
        unsafe { acquired(t, addr, side) };
        return 0;
    }
    // SAFETY: as the caller promises.
    unsafe { lock_busy(t, addr, side, deadline, r, real) }
}

/// The try failed with `tried`: wait, tracked, or pass on what the lock itself answers.
///
/// # Safety
/// As [`lock`].
#[cold]
#[inline(never)]
unsafe fn lock_busy(
    t: &ThreadRec,
    addr: usize,
    side: Side,
    deadline: Deadline,
    tried: c_int,
    real: impl Fn(Deadline) -> c_int,
) -> c_int {
    let tr = match tracker() {
        // EAGAIN (too many readers) and the like: the lock call gives its own answer. A thread
        // locking what it holds for writing gets EDEADLK at once: nobody waits.
        // SAFETY: as the caller promises.
        Some(tr) if tried == EBUSY && unsafe { glibc_rwlock::writer(addr, false) } != t.tid() => tr,
        _ => {
            let r = real(deadline);
            if r == 0 {
                // SAFETY: as the caller promises.
                unsafe { acquired(t, addr, side) };
            } else if r != ETIMEDOUT {
                // SAFETY: as the caller promises.
                unsafe { engage::failed(t, addr, KIND, subtype, r) };
            }
            return r;
        }
    };
    let _in = InShim::enter();
    // SAFETY: as the caller promises.
    let obj = tr.object(t, addr, KIND, unsafe { subtype(addr) });
    if side == Side::Exclusive {
        engage::attempting(t, obj);
    }
    // SAFETY: the caller's rwlock, live for the call (this function's contract).
    let mut w = unsafe { engage::wait_begin(tr, t, obj, side) };
    if deadline.is_none() {
        engage::untimed(t);
    }
    let r = engage::wait_sliced(tr, t, &mut w, deadline, false, |clk, until| {
        real(Some((clk, *until)))
    });
    engage::wait_end(tr, t, w, Outcome::of(r));
    if r == 0 {
        // SAFETY: as the caller promises.
        unsafe { acquired(t, addr, side) };
    }
    r
}

/// The calling thread is about to unlock the rwlock at `addr`: a write hold (it is the lock's
/// writer) ends as a mutex's does; a read hold leaves the readers.
///
/// # Safety
/// `addr` is the rwlock being unlocked: live.
#[inline(always)]
pub unsafe fn unlocking(addr: usize) {
    let Some(t) = current() else { return };
    // SAFETY: as the caller promises.
    if unsafe { glibc_rwlock::writer(addr, false) } == t.tid() {
        // SAFETY: as the caller promises.
        unsafe { engage::releasing(t, addr) };
    } else {
        t.read_left(addr);
        if let Some((_, obj)) = t.cached(addr) {
            // SAFETY: as the caller promises.
            if ends_episode(obj.flags(), || unsafe { glibc_rwlock::readers(addr) }) {
                engage::released(t, obj);
            }
        }
    }
}

/// Whether a reader leaving a lock with `flags` ends its open episode: while a writer waits for
/// the readers, the last of them to leave (the only reader still counted, `readers` read
/// before its unlock) is the one the writer waited for. Counted only with an episode open.
#[inline(always)]
fn ends_episode(flags: u8, readers: impl FnOnce() -> u32) -> bool {
    flags & EPISODE != 0 && readers() == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::track::objects::ObjEntry;
    use std::sync::atomic::Ordering;

    #[test]
    fn of_readers_a_writer_waits_for_the_last_to_leave_ends_the_episode() {
        // Three readers hold the lock; a writer waits and an episode is open.
        let leaving = [3, 2, 1];
        let ends: Vec<bool> = leaving
            .iter()
            .map(|&n| ends_episode(EPISODE, || n))
            .collect();
        assert_eq!(ends, [false, false, true]);
    }

    #[test]
    fn readers_leaving_a_lock_without_an_episode_end_nothing() {
        assert!(!ends_episode(0, || 1));
        assert!(!ends_episode(0, || unreachable!(
            "no episode: the lock word is not read"
        )));
    }

    #[test]
    fn a_thread_reading_twice_counts_two_read_acquisitions_and_reads_until_its_last_unlock() {
        let t = ThreadRec::new();
        let obj: &'static ObjEntry = Box::leak(Box::new(ObjEntry::new(0x7000, KIND)));
        t.install(obj);
        // SAFETY: the object is cached, so the lock's memory is not read.
        unsafe {
            read_engaged(&t, 0x7000);
            read_engaged(&t, 0x7000);
        }
        assert_eq!(
            t.slot(0x7000).aux[AUX_READS].load(Ordering::Relaxed),
            2,
            "counted on the shared side"
        );
        assert_eq!(
            obj.acquisitions.load(Ordering::Relaxed),
            0,
            "not write holds"
        );
        t.read_left(0x7000);
        assert!(t.reads(obj), "one read hold left");
        t.read_left(0x7000);
        assert!(!t.reads(obj));
    }
}
