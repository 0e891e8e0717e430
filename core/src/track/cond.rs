//! Condition variables (`pthread_cond_*`): what a wait, a signal and a broadcast mean for the
//! tracker. The wrappers in `interpose/cond.rs` call these with the real functions.
//!
//! A wait is a tracked wait on the condition variable (it takes part in the highwater mark like
//! a mutex wait); the signal or broadcast that ends it is the release its waiters waited for.
//! Inside the wait glibc releases and re-acquires the mutex, which the mutex wrappers never see:
//! the wait does the mutex's release and acquisition bookkeeping itself, and times the
//! re-acquisition after a wake-up apart from the wait for the wake-up (a thundering herd after a
//! broadcast shows there).
//!
//! A woken wait is counted signalled or broadcast when it returns, and moved to spurious if the
//! thread's next wait is on the same condition variable, with the mutex held all along and
//! almost no CPU time run in between (see `rewaiting`). A per-wait event a policy rule wrote at
//! the return is written again with the new reason (`WaitEventReason`).

use std::sync::atomic::Ordering;

use libc::{c_int, EOWNERDEAD, ETIMEDOUT};
use waitshim_format::{counter, ObjectKind, WaitEventReason};

use super::engage::{self, Outcome, Side, Wait};
use super::objects::{Busy, ObjEntry, AUX_BROADCASTS, AUX_SIGNALS, DEAD, EPISODE};
use super::threads::{current, current_fast, InShim, Slot, ThreadRec};
use super::waits::{self, Woken};
use super::{tracker, CallSite, Tracker};
use crate::clock::{now_ns, thread_cpu_ns};
use crate::layout::mutex as glibc_mutex;

const KIND: ObjectKind = ObjectKind::Cond;
/// Condition variables have no subtype in the log.
pub const SUBTYPE: u32 = 0;

/// The common signal or broadcast, inline and without a stack frame, so that its caller leaves
/// by a tail call into glibc: a cached condition variable with no episode open, whose wake-up
/// need not be stamped (nobody waits, or, for a signal, no wait began since the last stamp).
/// True: the wake-up is counted, and the caller calls glibc's function by a tail call; false,
/// with nothing done, otherwise (the caller takes [`waking`]).
#[inline(always)]
pub fn woken_quietly(addr: usize, broadcast: bool) -> bool {
    let which = if broadcast {
        AUX_BROADCASTS
    } else {
        AUX_SIGNALS
    };
    let Some(t) = current_fast() else {
        return false;
    };
    let s = t.slot(addr);
    if s.addr.load(Ordering::Relaxed) != addr {
        return false;
    }
    let Some((obj, true)) = s.held() else {
        return false;
    };
    wake_is_quiet(obj, broadcast) && t.count_aux_quick(s, which)
}

/// Whether a signal (or `broadcast`) of `obj` needs nothing of the tracker but its count:
/// nothing flagged on it (destroyed, an episode to end), no waiter to name the signaller to
/// (`released`), and no wake-up to stamp.
#[inline(always)]
fn wake_is_quiet(obj: &ObjEntry, broadcast: bool) -> bool {
    obj.flags() & (DEAD | EPISODE) == 0
        && !obj
            .busy_if()
            .is_some_and(|b| needs_stamp(b, broadcast) || b.waiters.load(Ordering::Relaxed) > 0)
}

/// Bookkeeping of a signal or broadcast, done before the real call so that a waiter it wakes
/// finds the wake-up stamped when it returns. Counted in the thread's cache like acquisitions:
/// with nobody waiting, it writes no shared memory.
#[inline(always)]
pub fn waking(addr: usize, broadcast: bool) {
    let Some(t) = current() else { return };
    let Some((s, obj)) = t.cached(addr).or_else(|| first_waking(t, addr)) else {
        return;
    };
    let which = if broadcast {
        AUX_BROADCASTS
    } else {
        AUX_SIGNALS
    };
    t.count_aux(s, which);
    if let Some(b) = obj.busy_if().filter(|b| needs_stamp(b, broadcast)) {
        b.last_wake
            .store(waits::wake_stamp(now_ns(), broadcast), Ordering::Release);
    }
    // The signaller is the one the waiters waited for: it ends their high-contention episode.
    engage::released(t, obj);
}

/// Whether a wake-up must be stamped on the condition variable ([`waits::needs_stamp`]).
#[inline(always)]
fn needs_stamp(obj: &Busy, broadcast: bool) -> bool {
    waits::needs_stamp(
        obj.waiters.load(Ordering::Acquire),
        broadcast,
        obj.last_wake.load(Ordering::Relaxed),
        obj.last_wait_start.load(Ordering::Relaxed),
    )
}

/// A condition variable not in the thread's cache: registered (if new) and cached.
#[cold]
#[inline(never)]
fn first_waking(t: &ThreadRec, addr: usize) -> Option<(&Slot, &'static ObjEntry)> {
    let tr = tracker()?;
    // A lookup and a cache fill; creating the object guards itself (see `Tracker::object`).
    let _in = InShim::enter_quiet();
    let obj = tr.object(t, addr, KIND, SUBTYPE);
    Some((t.slot(addr), obj))
}

/// A wait on the condition variable at `c` with the mutex at `m`, called from `site`; `call` is
/// the real wait (a cancellation point: a thread cancelled in it leaves through here by
/// unwinding, see `Pending`); `untimed`: no deadline.
///
/// # Safety
/// `m` is the caller's mutex, live for the call (its subtype is read when it is re-acquired).
pub unsafe fn wait(
    c: usize,
    m: usize,
    site: CallSite,
    untimed: bool,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        return call();
    };
    let _in = InShim::enter();
    let cond = tr.object(t, c, KIND, SUBTYPE);
    rewaiting(tr, t, cond, m);
    // glibc releases the mutex inside the wait: what the unlock wrapper would have done.
    // SAFETY: the caller's mutex (this function's contract).
    unsafe { engage::releasing(t, m) };
    // SAFETY: a condition variable has no holder: nothing is read at its address.
    let w = unsafe { engage::wait_begin_at(tr, t, cond, Side::Exclusive, site) };
    if untimed {
        engage::untimed(t);
    }
    cond.busy()
        .last_wait_start
        .fetch_max(w.start, Ordering::AcqRel);
    let mut pending = Pending {
        tr,
        t,
        mutex: m,
        wait: Some(w),
    };
    let r = _in.cancellable(call);
    pending.ended(r);
    r
}

/// The thread's previous wait on a condition variable returned woken: if it was on `cond`
/// with the same mutex, the thread has held that mutex ever since and ran almost nothing
/// ([`waits::rewait_is_spurious`]), the program is waiting again at once, without having done
/// anything the wake-up was for: that wake-up was spurious (a `while (!predicate)` loop found
/// its predicate still false). Its wait moves to that reason. A consumer that keeps the mutex
/// while it works on each item it was woken for runs longer, and its wake-ups stay useful.
fn rewaiting(tr: &Tracker, t: &ThreadRec, cond: &ObjEntry, mutex: usize) {
    // SAFETY: owning thread, inside the shim: nothing else uses `local` now.
    let Some(w) = unsafe { t.local() }.woken.take() else {
        return;
    };
    let same_wait = std::ptr::eq(w.cond, cond)
        && w.generation == cond.generation.load(Ordering::Relaxed)
        && w.mutex == mutex;
    if waits::rewait_is_spurious(same_wait, w.acquisitions, acquisitions(t, mutex), || {
        thread_cpu_ns().saturating_sub(w.returned_cpu_ns)
    }) {
        t.waits.reclassify(cond, w.ended, counter::ENDED_SPURIOUS);
        if let Some((version, rule)) = w.event {
            tr.log.write(
                &WaitEventReason {
                    object_id: tr.id_of(cond),
                    tid: t.tid(),
                    ns: w.start,
                    version,
                    rule,
                    from: w.ended.outcome,
                    to: counter::ENDED_SPURIOUS,
                }
                .into(),
            );
        }
    }
}

/// Where the thread's count of acquisitions of the mutex at `addr` stands ([`Slot::mark`]; 0:
/// not cached). Every acquisition through the shim counts there, and every emptying of the count
/// moves its epoch: an unchanged mark means no acquisition since.
fn acquisitions(t: &ThreadRec, addr: usize) -> u64 {
    let s = t.slot(addr);
    if s.addr.load(Ordering::Relaxed) != addr || s.entry().is_none() {
        return 0;
    }
    s.mark()
}

/// A wait in the real function. Normally ended by [`Pending::ended`]; dropped while still
/// pending when the thread is cancelled in the wait, in which case glibc has re-acquired the
/// mutex before unwinding the thread through here.
struct Pending<'a> {
    tr: &'a Tracker,
    t: &'a ThreadRec,
    mutex: usize,
    wait: Option<Wait>,
}

impl Pending<'_> {
    fn ended(&mut self, r: c_int) {
        let Some(w) = self.wait.take() else { return };
        let now = now_ns();
        let cond: &'static ObjEntry = w.obj;
        let wake = cond.busy().last_wake.load(Ordering::Acquire);
        let (outcome, reacquire_from) = waits::cond_wait_ended(r, wake, w.start);
        // From the wake-up to the return: the time spent re-acquiring the mutex.
        let reacquire = reacquire_from.map(|at| now.saturating_sub(at));
        let start = w.start;
        let (ended, event) = engage::wait_end_reacquired(self.tr, self.t, w, outcome, reacquire);
        // The mutex is held again after a wake-up or a timeout (and, robust, an owner's death);
        // other errors returned before glibc released it.
        if matches!(r, 0 | ETIMEDOUT | EOWNERDEAD) {
            self.reacquired();
        }
        if r == 0 {
            let acquisitions = acquisitions(self.t, self.mutex);
            // SAFETY: owning thread, inside the shim: nothing else uses `local` now.
            unsafe { self.t.local() }.woken = Some(Woken {
                cond,
                generation: cond.generation.load(Ordering::Relaxed),
                mutex: self.mutex,
                acquisitions,
                ended,
                start,
                event,
                // Last: the program's own work starts here. Not read when the mutex's count is
                // unknown: no re-wait can then be judged spurious.
                returned_cpu_ns: if acquisitions != 0 {
                    thread_cpu_ns()
                } else {
                    0
                },
            });
        }
    }

    fn reacquired(&self) {
        // SAFETY: the mutex of the caller's wait, which it holds again: live.
        unsafe { engage::acquired(self.t, self.mutex, ObjectKind::Mutex, glibc_mutex::subtype) };
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.wait.take() {
            engage::wait_end(self.tr, self.t, w, Outcome::Interrupted);
            self.reacquired();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond() -> &'static ObjEntry {
        Box::leak(Box::new(ObjEntry::new(0x8000, KIND)))
    }

    #[test]
    fn signalling_a_condition_variable_nobody_waits_on_is_only_counted() {
        let c = cond();
        assert!(wake_is_quiet(c, false));
        assert!(wake_is_quiet(c, true));
    }

    #[test]
    fn a_signal_with_a_waiter_or_an_open_episode_is_tracked() {
        let c = cond();
        c.busy().waiters.store(1, Ordering::Relaxed);
        assert!(!wake_is_quiet(c, false), "the waiter learns who woke it");
        c.busy().waiters.store(0, Ordering::Relaxed);
        c.set_flag(EPISODE);
        assert!(!wake_is_quiet(c, true), "the signaller ends the episode");
    }
}
