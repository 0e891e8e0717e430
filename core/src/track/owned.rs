//! The protocol of a lock one thread holds at a time (mutex, spin lock): the few calls its
//! wrappers make around the real functions, each of which does the whole of its step.
//!
//! - After the lock was taken without waiting: [`engage::acquired`] (and its quick forms on the
//!   wrappers' fast paths); after a trylock: [`tried`]; before the unlock:
//!   [`engage::releasing`].
//! - The lock was busy: [`after_back_off`] stays off it for a moment and tries once more (the
//!   brief-wait rule: a wait that short is counted, not tracked); then the thread waits, in one
//!   of three shapes: [`wait`], a real timed call cut in slices; [`wait_in_one_call`], one real
//!   call that cannot be cut; [`spin`], a spin the core drives.
//!
//! Each wait owns the object's entry, the lock-order edges, the wait's begin (waiter counts,
//! highwater mark, the policy's chain), its slices and their look for wait-for cycles, its end
//! and the acquisition. The wrapper hands the real call as a closure and returns its answer as
//! it is; where tracking is off, the real call is made all the same.

use libc::{c_int, EBUSY, EOWNERDEAD};
use waitshim_format::ObjectKind;

use super::drive::{Clocks, Deadline, SystemClocks};
use super::engage::{self, Outcome, Side, Subtype, Wait};
use super::threads::ThreadRec;
use super::{tracker, CallSite, Tracker};

/// A lock one thread holds at a time, as its wrapper names it.
#[derive(Clone, Copy)]
pub struct Lock {
    pub addr: usize,
    pub kind: ObjectKind,
    /// Reads the lock's subtype from its memory when it is registered.
    pub subtype: Subtype,
}

impl Lock {
    /// # Safety
    /// The lock is live for the call the wrapper handles, and `subtype` can read it.
    unsafe fn subtype_now(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (self.subtype)(self.addr) }
    }

    /// # Safety
    /// As [`Lock::subtype_now`]; the calling thread now holds the lock.
    unsafe fn taken(&self, t: &ThreadRec) {
        // SAFETY: as above.
        unsafe { engage::acquired(t, self.addr, self.kind, self.subtype) }
    }
}

/// A trylock of `lock` returned `r`: taken (0), busy (EBUSY), or failed; EOWNERDEAD (a robust
/// mutex whose owner died) is taken and counted as an error.
///
/// # Safety
/// `lock` is the caller's, live for the call, and `subtype` can read it.
pub unsafe fn tried(t: &ThreadRec, lock: &Lock, r: c_int) {
    let (addr, kind, sub) = (lock.addr, lock.kind, lock.subtype);
    // SAFETY: as the caller promises.
    unsafe {
        match r {
            0 => engage::acquired_by_try(t, addr, kind, sub),
            EBUSY => engage::busy(t, addr, kind, sub),
            _ => failed(t, lock, r),
        }
    }
}

/// A call that could have waited for `lock` returned `r`, without a tracked wait: taken (0), or
/// failed; EOWNERDEAD is taken and counted as an error.
///
/// # Safety
/// As [`tried`].
pub unsafe fn answered(t: &ThreadRec, lock: &Lock, r: c_int) {
    // SAFETY: as the caller promises.
    unsafe {
        match r {
            0 => lock.taken(t),
            _ => failed(t, lock, r),
        }
    }
}

/// # Safety
/// As [`tried`].
#[cold]
unsafe fn failed(t: &ThreadRec, lock: &Lock, r: c_int) {
    // SAFETY: as the caller promises.
    unsafe {
        if r == EOWNERDEAD {
            // Acquired, with the previous owner dead: the program must make it consistent.
            lock.taken(t);
        }
        engage::failed(t, lock.addr, lock.kind, lock.subtype, r);
    }
}

/// `lock` was busy: stays off it for about the cost of a futex call (`engage::back_off`), then
/// takes it with `take` (true if taken) when it came free. True if the thread now holds it,
/// counted as a brief wait at `site` (`engage::waited_briefly`); false to go on to a wait
/// (also when tracking is off, without backing off).
///
/// # Safety
/// As [`tried`].
#[inline(never)]
pub unsafe fn after_back_off(
    t: &ThreadRec,
    lock: &Lock,
    site: CallSite,
    take: impl FnOnce() -> bool,
) -> bool {
    if tracker().is_none() {
        return false;
    }
    let waited = engage::back_off();
    if !take() {
        return false;
    }
    // SAFETY: as the caller promises.
    let sub = unsafe { lock.subtype_now() };
    engage::with_object(t, lock.addr, lock.kind, sub, |tr, obj| {
        engage::waited_briefly(tr, t, obj, site, waited)
    });
    // SAFETY: as the caller promises; the thread holds the lock.
    unsafe { lock.taken(t) };
    true
}

/// `lock` is busy: waits for it in `real` (the real lock, given an absolute time on a clock:
/// the caller's `deadline`, or a slice's end), cut in slices between which the thread looks for
/// wait-for cycles (see `super::drive::sliced`; `monotonic`: the real call takes
/// CLOCK_MONOTONIC). Returns the last real call's answer; 0 or EOWNERDEAD leave the lock
/// counted as the thread's.
///
/// # Safety
/// As [`tried`]; the thread does not hold the lock.
pub unsafe fn wait(
    t: &ThreadRec,
    lock: &Lock,
    deadline: Deadline,
    site: CallSite,
    monotonic: bool,
    real: impl FnMut(Deadline) -> c_int,
) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { wait_on(&SystemClocks, t, lock, deadline, site, monotonic, real) }
}

/// [`wait`] on the given clocks.
///
/// # Safety
/// As [`wait`].
#[inline(never)]
pub unsafe fn wait_on(
    clocks: &impl Clocks,
    t: &ThreadRec,
    lock: &Lock,
    deadline: Deadline,
    site: CallSite,
    monotonic: bool,
    mut real: impl FnMut(Deadline) -> c_int,
) -> c_int {
    // SAFETY: as the caller promises.
    let sub = unsafe { lock.subtype_now() };
    let waited = engage::with_object(t, lock.addr, lock.kind, sub, |tr, obj| {
        engage::attempting(t, obj);
        // SAFETY: the caller's lock, live for the call.
        let mut w = unsafe { engage::wait_begin_at(tr, t, obj, Side::Exclusive, site) };
        if deadline.is_none() {
            engage::untimed(t);
        }
        let (start, first) = (w.start, w.slice_ns());
        let r = super::drive::sliced(
            clocks,
            deadline,
            monotonic,
            start,
            first,
            |clk, until| real(Some((clk, *until))),
            || {
                engage::wait_check(tr, t, &mut w);
                w.slice_ns()
            },
        );
        // SAFETY: as the caller promises.
        unsafe { ended(tr, t, w, lock, r) };
        if r == EOWNERDEAD {
            engage::acquired_owner_dead(obj);
        }
        r
    });
    waited.unwrap_or_else(|| real(deadline))
}

/// `lock` may be busy (`busy`: it had an owner just before) and the wait is one real call,
/// `real`, which cannot be cut in slices (a robust or priority mutex, a mutex behind another
/// interposer): a wait-for cycle suspected as it begins is confirmed by a second look before the
/// call. `untimed`: the call has no deadline. Returns `real`'s answer.
///
/// # Safety
/// As [`wait`].
#[inline(never)]
pub unsafe fn wait_in_one_call(
    t: &ThreadRec,
    lock: &Lock,
    busy: bool,
    untimed: bool,
    mut real: impl FnMut() -> c_int,
) -> c_int {
    if busy {
        // SAFETY: as the caller promises.
        let sub = unsafe { lock.subtype_now() };
        let waited = engage::with_object(t, lock.addr, lock.kind, sub, |tr, obj| {
            engage::attempting(t, obj);
            // SAFETY: the caller's lock, live for the call.
            let mut w = unsafe { engage::wait_begin(tr, t, obj, Side::Exclusive) };
            if untimed {
                engage::untimed(t);
            }
            engage::confirm_before_call(tr, t, &mut w);
            let r = real();
            // SAFETY: as the caller promises.
            unsafe { ended(tr, t, w, lock, r) };
            r
        });
        if let Some(r) = waited {
            return r;
        }
    }
    let r = real();
    // SAFETY: as the caller promises.
    unsafe { answered(t, lock, r) };
    r
}

/// `lock` is busy: spins on `take` (true once the thread holds the lock), a few hundred tries
/// between two clock reads, and looks for wait-for cycles between slices. None, without
/// spinning, when tracking is off: the wrapper then spins in the real call.
///
/// # Safety
/// As [`wait`].
#[inline(never)]
pub unsafe fn spin(t: &ThreadRec, lock: &Lock, mut take: impl FnMut() -> bool) -> Option<c_int> {
    // SAFETY: as the caller promises.
    let sub = unsafe { lock.subtype_now() };
    engage::with_object(t, lock.addr, lock.kind, sub, |tr, obj| {
        engage::attempting(t, obj);
        // SAFETY: the caller's lock, live for the call.
        let mut w = unsafe { engage::wait_begin(tr, t, obj, Side::Exclusive) };
        engage::untimed(t);
        let mut slice_end = w.start + w.slice_ns();
        loop {
            for _ in 0..SPINS_PER_CLOCK {
                if take() {
                    // SAFETY: as the caller promises.
                    unsafe { ended(tr, t, w, lock, 0) };
                    return 0;
                }
                std::hint::spin_loop();
            }
            engage::check_when_due(tr, t, &mut w, crate::clock::now_ns(), &mut slice_end);
        }
    })
}

/// Turns of a spin between two clock reads (about 10 µs of `pause`s).
const SPINS_PER_CLOCK: u32 = 256;

/// The wait `w` for `lock` ended with the real call's answer `r`; a lock taken is counted as the
/// thread's.
///
/// # Safety
/// As [`wait`].
unsafe fn ended(tr: &Tracker, t: &ThreadRec, w: Wait, lock: &Lock, r: c_int) {
    let outcome = Outcome::of(r);
    engage::wait_end(tr, t, w, outcome);
    if outcome.acquired() {
        // SAFETY: as the caller promises; the thread holds the lock.
        unsafe { lock.taken(t) };
    }
}
