//! `pthread_cond_*`. Every call returns exactly what glibc returns.
//!
//! glibc keeps two implementations under two symbol versions: `GLIBC_2.2.5` (the old one, which
//! allocates a new-style condition variable behind the caller's) and `GLIBC_2.3.2`. Our
//! unversioned definitions bind for programs linked against either, and every call goes to the
//! `GLIBC_2.3.2` one, so a condition variable is never handled by both (a producer/consumer
//! program whose wait and signal went to different implementations hangs).
//!
//! A wait is a tracked wait on the condition variable (it takes part in the highwater mark like
//! a mutex wait); the signal or broadcast that ends it is the release its waiters waited for.
//! Inside the wait glibc releases and re-acquires the mutex, which our mutex wrappers never see:
//! the wait does the mutex's release and acquisition bookkeeping itself, and times the
//! re-acquisition after a wake-up apart from the wait for the wake-up (a thundering herd after a
//! broadcast shows there).
//!
//! A woken wait is counted signalled or broadcast when it returns, and moved to spurious if the
//! thread's next wait is on the same condition variable, with the mutex held all along and
//! almost no CPU time run in between (see
//! [`rewaiting`]). A per-wait event a policy rule wrote at the return is written again with the
//! new reason (`WaitEventReason`).
//!
//! The wait is one call to the real function, never sliced like a mutex wait: a condition
//! variable has no owner, so a thread waiting on it closes no wait-for cycle, and a sliced wait
//! could miss a signal sent between two slices.

use std::sync::atomic::Ordering;

use libc::{
    c_int, clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec, EOWNERDEAD,
    ETIMEDOUT,
};
use waitshim_format::{counter, ObjectKind, WaitEventReason};

use super::mutex;
use crate::clock::{now_ns, thread_cpu_ns};
use crate::track::engage::{self, Outcome, Side, Wait};
use crate::track::objects::{Busy, ObjEntry, AUX_BROADCASTS, AUX_SIGNALS, DEAD, EPISODE};
use crate::track::threads::{current, current_fast, Inside, Slot, ThreadRec};
use crate::track::waits::{self, Woken};
use crate::track::{tracker, CallSite, Tracker};

const KIND: ObjectKind = ObjectKind::Cond;
/// Condition variables have no subtype in the log.
const SUBTYPE: u32 = 0;

/// The C library's functions, bound to the `GLIBC_2.3.2` versions. Called through `C-unwind`
/// pointers: a wait is a cancellation point, and glibc cancels a thread by unwinding it through
/// our frames (our bookkeeping runs on the way out, see [`Pending`]).
mod real {
    use libc::{c_int, clockid_t, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

    use crate::real::RealFn;

    const V: &[u8] = b"GLIBC_2.3.2\0";
    static INIT: RealFn = RealFn::versioned(b"pthread_cond_init\0", V);
    static DESTROY: RealFn = RealFn::versioned(b"pthread_cond_destroy\0", V);
    static WAIT: RealFn = RealFn::versioned(b"pthread_cond_wait\0", V);
    static TIMEDWAIT: RealFn = RealFn::versioned(b"pthread_cond_timedwait\0", V);
    pub static SIGNAL: RealFn = RealFn::versioned(b"pthread_cond_signal\0", V);
    pub static BROADCAST: RealFn = RealFn::versioned(b"pthread_cond_broadcast\0", V);
    /// Added in glibc 2.30 (versions `GLIBC_2.30` and `GLIBC_2.34`, both the new implementation):
    /// the default version is the right one.
    static CLOCKWAIT: RealFn = RealFn::new(b"pthread_cond_clockwait\0");

    pub fn resolve() {
        for f in [
            &INIT, &DESTROY, &WAIT, &TIMEDWAIT, &SIGNAL, &BROADCAST, &CLOCKWAIT,
        ] {
            f.available();
        }
    }

    macro_rules! forward {
        ($($name:ident = $slot:ident: fn($($arg:ident: $t:ty),*);)*) => {$(
            pub unsafe fn $name($($arg: $t),*) -> c_int {
                // SAFETY: the slot holds the address of glibc's function of this name, whose C
                // signature is the one declared here (from <pthread.h>).
                let f: unsafe extern "C-unwind" fn($($t),*) -> c_int =
                    unsafe { std::mem::transmute::<usize, _>($slot.get()) };
                // SAFETY: forwarding the caller's arguments.
                unsafe { f($($arg),*) }
            }
        )*};
    }

    forward! {
        init = INIT: fn(c: *mut pthread_cond_t, a: *const pthread_condattr_t);
        destroy = DESTROY: fn(c: *mut pthread_cond_t);
        wait = WAIT: fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t);
        timedwait = TIMEDWAIT: fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, ts: *const timespec);
        clockwait = CLOCKWAIT: fn(c: *mut pthread_cond_t, m: *mut pthread_mutex_t, clk: clockid_t, ts: *const timespec);
        signal = SIGNAL: fn(c: *mut pthread_cond_t);
        broadcast = BROADCAST: fn(c: *mut pthread_cond_t);
    }
}

pub fn resolve() {
    real::resolve();
}

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
    if let Some(f) = woken_quietly(c as usize, &real::SIGNAL, AUX_SIGNALS) {
        // SAFETY: glibc's function, whose signature is `WakeFn`; forwarding.
        return unsafe { f(c) };
    }
    // SAFETY: forwarding the caller's condition variable.
    unsafe { signal_tracked(c) }
}

#[inline(never)]
unsafe extern "C-unwind" fn signal_tracked(c: *mut pthread_cond_t) -> c_int {
    if let Some(t) = current() {
        waking(t, c as usize, false);
    }
    // SAFETY: forwarding.
    unsafe { real::signal(c) }
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_broadcast(c: *mut pthread_cond_t) -> c_int {
    if let Some(f) = woken_quietly(c as usize, &real::BROADCAST, AUX_BROADCASTS) {
        // SAFETY: glibc's function, whose signature is `WakeFn`; forwarding.
        return unsafe { f(c) };
    }
    // SAFETY: forwarding the caller's condition variable.
    unsafe { broadcast_tracked(c) }
}

#[inline(never)]
unsafe extern "C-unwind" fn broadcast_tracked(c: *mut pthread_cond_t) -> c_int {
    if let Some(t) = current() {
        waking(t, c as usize, true);
    }
    // SAFETY: forwarding.
    unsafe { real::broadcast(c) }
}

/// The common signal or broadcast, inline and without a stack frame, so that its caller leaves
/// by a tail call into glibc: a cached condition variable with no episode open, whose wake-up
/// need not be stamped (nobody waits, or, for a signal, no wait began since the last stamp). The
/// wake-up is counted and glibc's function returned; `None`, with nothing done, otherwise.
#[inline(always)]
fn woken_quietly(addr: usize, f: &crate::real::RealFn, which: usize) -> Option<WakeFn> {
    let t = current_fast()?;
    let s = t.slot(addr);
    let a = f.resolved();
    if s.addr.load(Ordering::Relaxed) != addr || a <= 1 {
        return None;
    }
    let (obj, true) = s.held()? else {
        return None;
    };
    if obj.flags() & (DEAD | EPISODE) != 0
        || obj
            .busy_if()
            // With waiters, the signaller is named as the one who woke them (`released`).
            .is_some_and(|b| {
                needs_stamp(b, which == AUX_BROADCASTS) || b.waiters.load(Ordering::Relaxed) > 0
            })
        || !t.count_aux_quick(s, which)
    {
        return None;
    }
    // SAFETY: the address of glibc's function, whose signature is `WakeFn`.
    Some(unsafe { std::mem::transmute::<usize, WakeFn>(a) })
}

/// Bookkeeping of a signal or broadcast, done before the real call so that a waiter it wakes
/// finds the wake-up stamped when it returns. Counted in the thread's cache like acquisitions:
/// with nobody waiting, it writes no shared memory.
#[inline(always)]
fn waking(t: &ThreadRec, addr: usize, broadcast: bool) {
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
    let _in = Inside::enter();
    let obj = tr.object(t, addr, KIND, SUBTYPE);
    Some((t.slot(addr), obj))
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
    unsafe { tracked_wait(c, m, CallSite { ret, sp }, true, || real::wait(c, m)) }
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
        tracked_wait(c, m, CallSite::default(), false, || {
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
        tracked_wait(c, m, CallSite::default(), false, || {
            real::clockwait(c, m, clk, ts)
        })
    }
}

/// A wait on `c` with mutex `m`; `call` is the real wait.
unsafe fn tracked_wait(
    c: *mut pthread_cond_t,
    m: *mut pthread_mutex_t,
    site: CallSite,
    untimed: bool,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        return call();
    };
    let _in = Inside::enter();
    let cond = tr.object(t, c as usize, KIND, SUBTYPE);
    rewaiting(tr, t, cond, m as usize);
    // glibc releases the mutex inside the wait: what our unlock wrapper would have done.
    engage::disengaging(t, m as usize);
    let w = engage::wait_begin_at(tr, t, cond, Side::Exclusive, site);
    if untimed {
        engage::untimed(t);
    }
    cond.busy()
        .last_wait_start
        .fetch_max(w.start, Ordering::AcqRel);
    let mut pending = Pending {
        tr,
        t,
        mutex: m as usize,
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
        unsafe { engage::engaged(self.t, self.mutex, ObjectKind::Mutex, mutex::subtype) };
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
