//! Engaging and disengaging objects: the tracking operations the interposed functions translate
//! their calls into.
//!
//! The uncontended path (`acquired`, `releasing`) touches the thread's own record and reads the
//! object's first cache line; it writes shared memory only when the owner changes (the lock's
//! own line moves between cores then anyway) or on objects that have been contended.

use std::sync::atomic::Ordering;

use waitshim_format::{counter, ObjectKind};

use super::objects::{ObjEntry, CONTENDED, EPISODE, HOLDER_CHAINS, TIME_ALL};
use super::threads::{Held, InShim, Slot, ThreadRec};
use super::{deadlock, highwater, tracker, CallSite, Tracker};
use crate::clock::now_ns;
use crate::layout::{mutex as glibc_mutex, rwlock as glibc_rwlock};

pub(crate) use super::no_wait::{acquired_owner_dead, busy, failed};
pub use super::no_wait::{destroyed, initialised};

/// Reads the subtype of the object at an address (a mutex's kind bits, an rwlock's
/// preference) from the object's own memory; read only when the object is registered.
///
/// # Safety
/// The address is a live object of the kind the reader knows.
pub type Subtype = unsafe fn(usize) -> u32;

/// `t` acquired the object at `addr` (exclusively) by a call that could have waited: it joins the
/// thread's held locks, with a lock-order edge from each lock already held.
///
/// # Safety
/// `addr` is a live object that `subtype` can read (the one the caller acquired).
#[inline(always)]
pub unsafe fn acquired(t: &ThreadRec, addr: usize, kind: ObjectKind, subtype: Subtype) {
    // SAFETY: as the caller promises.
    unsafe { acquired_with(t, t.cached(addr), addr, kind, subtype) }
}

/// As [`acquired`], for a try-acquisition: it holds the object, but adds no lock-order edge
/// (a trylock cannot deadlock).
///
/// # Safety
/// As [`acquired`].
#[inline(always)]
pub(crate) unsafe fn acquired_by_try(
    t: &ThreadRec,
    addr: usize,
    kind: ObjectKind,
    subtype: Subtype,
) {
    match t.cached(addr) {
        Some((s, obj)) => took(t, s, obj, addr, false),
        // SAFETY: as the caller promises.
        None => unsafe { acquired_uncached(t, addr, kind, subtype, false) },
    }
}

/// As [`acquired`], with the thread's cache looked up beforehand.
///
/// # Safety
/// As [`acquired`].
#[inline(always)]
pub unsafe fn acquired_with(
    t: &ThreadRec,
    hit: Option<(&Slot, &'static ObjEntry)>,
    addr: usize,
    kind: ObjectKind,
    subtype: Subtype,
) {
    match hit {
        Some((s, obj)) => {
            if !took_quick(t, s, obj, addr, true) {
                took(t, s, obj, addr, true);
            }
        }
        // SAFETY: as the caller promises.
        None => unsafe { acquired_uncached(t, addr, kind, subtype, true) },
    }
}

/// # Safety
/// As [`acquired`].
unsafe fn acquired_uncached(
    t: &ThreadRec,
    addr: usize,
    kind: ObjectKind,
    subtype: Subtype,
    edges: bool,
) {
    // SAFETY: as the caller promises.
    crate::stack::with_room(|| unsafe { acquired_uncached_here(t, addr, kind, subtype, edges) })
}

/// # Safety
/// As [`acquired`].
#[inline(always)]
unsafe fn acquired_uncached_here(
    t: &ThreadRec,
    addr: usize,
    kind: ObjectKind,
    subtype: Subtype,
    edges: bool,
) {
    let Some(tr) = tracker() else { return };
    let obj = {
        // A lookup and a cache fill; creating the object guards itself (see `Tracker::object`).
        let _in = InShim::enter_quiet();
        // SAFETY: as the caller promises.
        tr.object(t, addr, kind, unsafe { subtype(addr) })
    };
    took(t, t.slot(addr), obj, addr, edges);
}

/// Runs `f` inside the shim with the tracker and the entry of the object at `addr` (registered
/// on first use, with `subtype`): the contended paths of the families whose waits the wrapper
/// drives itself (mutexes, spinlocks) reach the registry through this, and `f` does the wait
/// with the entry points below. A full guard: what `f` does (a chain unwound, the log written)
/// may reach cancellation points. None, without calling `f`, when tracking is off.
#[inline(always)]
pub(crate) fn with_object<R>(
    t: &ThreadRec,
    addr: usize,
    kind: ObjectKind,
    subtype: u32,
    f: impl FnOnce(&'static Tracker, &'static ObjEntry) -> R,
) -> Option<R> {
    let tr = tracker()?;
    let _in = InShim::enter();
    let obj = tr.object(t, addr, kind, subtype);
    Some(f(tr, obj))
}

/// Lock-order edges from the locks `t` holds to `obj`, which it is about to wait for: a wait that
/// never ends (a deadlock) still leaves its edges.
pub(crate) fn attempting(t: &ThreadRec, obj: &'static ObjEntry) {
    // SAFETY: owning thread, not re-entered.
    let held = unsafe { t.held_locks() };
    if held.quick != 0 {
        held.settle(t);
    }
    if held.len > 0 {
        held.note_edges(t, obj);
    }
}

/// Holds of a contended object are timed for one acquisition in this many (per thread and
/// object, the first included): two clock reads inside every critical section would lengthen it
/// enough to change the contention being measured. Every hold is timed while the timed ones
/// are long on average (`objects::TIME_ALL`).
const HOLD_SAMPLE_EVERY: u64 = 64;

/// Bookkeeping of an acquisition: count it in the thread's slot, note the owner, hold it.
#[inline(always)]
fn took(t: &ThreadRec, s: &Slot, obj: &'static ObjEntry, addr: usize, edges: bool) {
    let n = t.count(s);
    if obj.owner.last.load(Ordering::Relaxed) != t.tid() {
        owner_changed(t, obj);
    }
    // SAFETY: owning thread; recording an edge uses only `local`, never `held_locks`.
    unsafe { t.held_locks() }.push(t, addr, obj, edges);
    let flags = obj.flags();
    if flags & (CONTENDED | EPISODE | HOLDER_CHAINS) != 0 {
        took_contended(t, obj, flags, n);
    }
}

/// The whole bookkeeping of an exclusive acquisition by the only thread of a process that never
/// had another (glibc's `__libc_single_threaded`, which it never sets again once a thread was
/// created; a forked child starts with empty caches), inline and without a call: the object is
/// cached, the thread holds no other lock (no lock-order edge to look at) and the slot's count
/// does not reach its fold. Returns false, having done nothing, in any other case; the caller
/// then does [`acquired`].
///
/// What `took_quick` checks besides is settled by the one thread: it is the owner since it
/// cached the object; it destroys objects itself, which empties its slot for them
/// ([`ThreadRec::forget`]), so a cached object is live and of the cached generation; and no
/// other thread can have waited for the object. (A thread can only wait for a mutex it holds
/// itself, with a timed lock: the episode that opens is ended by its unlock, which looks, and
/// that mutex's later holds are not timed.)
#[inline(always)]
pub fn acquired_quick(t: &ThreadRec, addr: usize) -> bool {
    let s = t.slot(addr);
    // SAFETY: owning thread, not re-entered.
    let held = unsafe { t.held_locks() };
    if s.addr.load(Ordering::Relaxed) != addr || held.len | held.quick != 0 {
        return false;
    }
    let n = s.pending.load(Ordering::Relaxed) + 1;
    if !t.count_quick(s, n, true) {
        return false;
    }
    held.quick = addr;
    true
}

/// As [`acquired_quick`], for an object that may have been contended.
#[inline(always)]
pub fn acquired_quick_contended(t: &ThreadRec, addr: usize) -> bool {
    let s = t.slot(addr);
    if s.addr.load(Ordering::Relaxed) != addr {
        return false;
    }
    // SAFETY: as in `acquired_quick`.
    let obj: &ObjEntry = unsafe { &*s.obj.load(Ordering::Relaxed) };
    s.same_generation(obj) && took_quick(t, s, obj, addr, true)
}

/// [`took`] in the common case described at [`acquired_quick`]; false, having done nothing, in
/// any other. Without `contended`, also false for a contended object (a single-threaded
/// process has none, and spares the checks).
#[inline(always)]
fn took_quick(t: &ThreadRec, s: &Slot, obj: &ObjEntry, addr: usize, contended: bool) -> bool {
    // SAFETY: owning thread, not re-entered.
    let held = unsafe { t.held_locks() };
    let flags = obj.flags();
    let other = if contended { !CONTENDED } else { !0 };
    if flags & other != 0
        || held.len | held.quick != 0
        || obj.owner.last.load(Ordering::Relaxed) != t.tid()
    {
        return false;
    }
    // Holds of a contended object are timed one in HOLD_SAMPLE_EVERY (see `took`).
    let n = s.pending.load(Ordering::Relaxed) + 1;
    if !t.count_quick(s, n, flags == 0 || n % HOLD_SAMPLE_EVERY != 1) {
        return false;
    }
    held.quick = addr;
    true
}

fn took_contended(t: &ThreadRec, obj: &ObjEntry, flags: u8, n: u64) {
    crate::stack::with_room(|| took_contended_here(t, obj, flags, n))
}

#[inline(always)]
fn took_contended_here(t: &ThreadRec, obj: &ObjEntry, flags: u8, n: u64) {
    if flags & HOLDER_CHAINS != 0 {
        if let Some(tr) = tracker() {
            let _in = InShim::enter();
            super::collect::holder_took(tr, t, obj);
        }
    }
    // Taken while an episode is open: this hold makes its waiters wait, and its release must be
    // looked at. (A hold taken while threads wait outside an episode is looked at only if it
    // is timed: finding out at every acquisition would cost the contended path.)
    if flags & EPISODE != 0 {
        t.attention
            .store(obj as *const ObjEntry as *mut ObjEntry, Ordering::Release);
    }
    if n % HOLD_SAMPLE_EVERY == 1 || flags & TIME_ALL != 0 {
        hold_started(t, obj);
    }
}

#[inline(never)]
fn owner_changed(t: &ThreadRec, obj: &ObjEntry) {
    // The first acquisition (from nobody) is counted without the busy part: a million mutexes
    // each used by one thread need nothing more than their entries.
    if obj.owner.last.swap(t.tid(), Ordering::Relaxed) != 0 {
        obj.busy().owner_changes.fetch_add(1, Ordering::Relaxed);
    }
}

#[inline(never)]
fn hold_started(t: &ThreadRec, obj: &ObjEntry) {
    // SAFETY: owning thread; nothing between here and the push re-enters the shim.
    let held = unsafe { &mut t.local().held };
    // Already timed since the wait that got it ended (`wait_end`), or an outer recursive hold.
    if held.contains(obj) {
        return;
    }
    held.push(Held {
        obj,
        since: now_ns(),
    });
}

/// `t` is about to release the object at `addr`.
///
/// # Safety
/// `addr` is the object being released: live (a recursive mutex's count is read there).
#[inline(always)]
pub unsafe fn releasing(t: &ThreadRec, addr: usize) {
    if !releasing_quick(t, addr) {
        // SAFETY: as the caller promises.
        unsafe { releasing_full(t, addr) };
    }
}

/// The release of the only lock held, when nothing else is to be done: no hold being timed, no
/// episode to look at (the counterpart of [`acquired_quick`]). Returns false, having done
/// nothing, in any other case.
#[inline(always)]
pub fn releasing_quick(t: &ThreadRec, addr: usize) -> bool {
    // SAFETY: owning thread, not re-entered.
    let held = unsafe { t.held_locks() };
    if held.quick != addr
        || !t.attention.load(Ordering::Acquire).is_null()
        // SAFETY: owning thread; reading the length re-enters nothing.
        || !unsafe { t.local() }.held.is_empty()
    {
        return false;
    }
    held.quick = 0;
    true
}

/// # Safety
/// As [`releasing`].
#[inline(never)]
unsafe fn releasing_full(t: &ThreadRec, addr: usize) {
    // SAFETY: owning thread, not re-entered.
    unsafe { t.held_locks() }.pop(addr);
    // SAFETY: owning thread; reading the length re-enters nothing.
    let timing = !unsafe { t.local() }.held.is_empty();
    if timing || !t.attention.load(Ordering::Acquire).is_null() {
        // SAFETY: as the caller promises.
        unsafe { releasing_slow(t, addr) };
    }
}

/// # Safety
/// As [`releasing`].
#[cold]
#[inline(never)]
unsafe fn releasing_slow(t: &ThreadRec, addr: usize) {
    let obj = match t.cached(addr) {
        Some((_, obj)) => Some(obj),
        None => lookup(addr),
    };
    if let Some(obj) = obj {
        let flags = obj.flags();
        // A recursive mutex's hold ends at its last unlock only.
        // SAFETY: the mutex this thread is unlocking: live (the caller's promise).
        let last = obj.kind != ObjectKind::Mutex || unsafe { glibc_mutex::count(addr) } <= 1;
        if last && flags & CONTENDED != 0 {
            hold_ended(t, obj);
        }
        if flags & EPISODE != 0 {
            release_with_episode(t, obj);
        }
    }
    // Look at releases while a lock still held needs it: one with an open episode or waiters
    // (the attention object may be one this thread no longer holds, set by a waiter late).
    let a = t.attention.load(Ordering::Acquire);
    if !a.is_null() {
        // SAFETY: owning thread; reading the held locks re-enters nothing.
        let held = unsafe { t.held_locks() };
        let next = held.locks[..held.len]
            .iter()
            .map(|&(_, o)| o)
            .find(|&o| {
                !o.is_null() && {
                    // SAFETY: tracking entries are leaked and never freed.
                    let o = unsafe { &*o };
                    o.flags() & EPISODE != 0 || o.waited_for()
                }
            })
            .unwrap_or(std::ptr::null());
        let _ = t.attention.compare_exchange(
            a,
            next as *mut ObjEntry,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

#[cold]
#[inline(never)]
fn lookup(addr: usize) -> Option<&'static ObjEntry> {
    let tr = tracker()?;
    // A lookup only: nothing is created, no cancellation point is reached.
    let _in = InShim::enter_quiet();
    tr.objects.get(addr)
}

/// The release of a hold of a once-contended object: measured if a thread waited during it,
/// else counted as a sample if it was timed.
#[cold]
#[inline(never)]
fn hold_ended(t: &ThreadRec, obj: &ObjEntry) {
    // SAFETY: owning thread, not re-entered (no call below enters the shim).
    let since = unsafe { &mut t.local().held }.take(obj).map(|h| h.since);
    if since.is_none() && !obj.waited_for() {
        return;
    }
    let now = now_ns();
    let _in = InShim::enter();
    if obj.waited_hold_released(now, since).is_none() {
        if let Some(since) = since {
            obj.held(now.saturating_sub(since));
        }
    }
}

/// `t` releases `obj` while an episode is open on it.
fn release_with_episode(t: &ThreadRec, obj: &ObjEntry) {
    crate::stack::with_room(|| release_with_episode_here(t, obj))
}

#[inline(always)]
fn release_with_episode_here(t: &ThreadRec, obj: &ObjEntry) {
    let Some(tr) = tracker() else { return };
    let _in = InShim::enter();
    let chain = tr.chain(t);
    highwater::on_release(tr, t.tid(), obj, now_ns(), chain);
}

/// `t` releases `obj` in a way that has no lock call: a semaphore post, a condition variable
/// signal or broadcast, the last arrival at a barrier, a thread's exit. Ends an open episode,
/// with this thread as the one the waiters waited for (called inside the shim).
pub(crate) fn released(t: &ThreadRec, obj: &ObjEntry) {
    woke(t, obj);
    if obj.flags() & EPISODE != 0 {
        release_with_episode(t, obj);
    }
}

/// `t` is about to wake the threads waiting on `obj` (a post, signal, broadcast, futex wake, or
/// the arrival that completes a barrier's round): the waits it ends name it as their waker
/// (`waker`). One relaxed store, only when threads wait.
#[inline]
pub(crate) fn woke(t: &ThreadRec, obj: &ObjEntry) {
    if let Some(b) = obj.busy_if() {
        if b.waiters.load(Ordering::Relaxed) > 0 {
            b.last_waker.store(t.tid(), Ordering::Relaxed);
        }
    }
}

/// The waiters of `obj` all left without a release this process saw (a semaphore posted from
/// another process, or by a handler that did not end the episode): its open episode ends, with
/// nobody (thread 0, no chain) as the one they waited for.
pub(crate) fn left_unreleased(tr: &Tracker, obj: &ObjEntry) {
    if obj.flags() & EPISODE != 0 && obj.waiters_now() == 0 {
        highwater::on_release(tr, 0, obj, now_ns(), 0);
    }
}

/// Which side of the object a wait is for: exclusive (mutex, write lock, ...) or shared (read
/// lock), whose statistics are kept apart.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Exclusive,
    Shared,
}

/// A contended wait in progress. Made by `wait_begin` alone, whose caller promises the object
/// live until the wait ends: the functions that take a `Wait` (its checks, its end) read the
/// object's holder on that promise, as does a wait-for walk from the waiting thread
/// ([`deadlock::find_cycle`]).
pub struct Wait {
    pub obj: &'static ObjEntry,
    pub start: u64,
    pub chain: u32,
    pub side: Side,
    /// A wait-for cycle seen at the last check, to be confirmed by the next one.
    suspect: Option<Vec<deadlock::Hop>>,
    /// The policy rule that applies to this wait, if any.
    act: Option<super::collect::Rule>,
}

/// How long a wait sleeps between wait-for checks; shorter when a cycle is suspected.
pub const SLICE_NS: u64 = 100_000_000;
pub const SUSPECT_SLICE_NS: u64 = 10_000_000;

impl Wait {
    pub fn suspected(&self) -> bool {
        self.suspect.is_some()
    }

    pub fn slice_ns(&self) -> u64 {
        let slice = if self.suspect.is_some() {
            SUSPECT_SLICE_NS
        } else {
            SLICE_NS
        };
        // A policy's min_wait still to come: wake when it is reached, so that what the rule
        // collects about the holder is collected while the holder still holds the object.
        match self.act.as_ref().and_then(|a| a.due(self.start)) {
            Some(due) => slice.min(due.saturating_sub(now_ns()).max(1_000_000)),
            None => slice,
        }
    }
}

/// A waiter that has just been handed the object still counts as waiting until it returns from
/// the real call; the thread that finds the object busy must not count it.
/// Likewise, when the object has no owner at this instant, one of the counted waiters is being
/// handed it or has just passed through it.
///
/// # Safety
/// As [`wait_begin`]: `obj` is live (its owner, or an rwlock's readers, are read there).
unsafe fn owner_still_counted(tr: &Tracker, obj: &ObjEntry) -> bool {
    // SAFETY: as the caller promises.
    let owner = unsafe { obj.holder() };
    if owner == 0
        && obj.kind == ObjectKind::RwLock
        // SAFETY: as the caller promises: `obj` is live, here an rwlock.
        && unsafe { glibc_rwlock::readers(obj.addr()) } > 0
    {
        // Held by readers: no waiter is being handed it.
        return false;
    }
    owner == 0
        || tr
            .thread(owner)
            .is_some_and(|h| std::ptr::eq(h.waiting_on.load(Ordering::Acquire), obj))
}

/// `t` starts waiting for `obj` (called inside the shim).
///
/// # Safety
/// `obj` is the object `t`, the calling thread, is about to wait on, live until the wait ends
/// ([`wait_end`], [`wait_cancel`]): the thread holding it (a mutex's owner, an rwlock's writer
/// or readers, a spinlock's word) is read at its address, with atomic loads, as the wait begins
/// and again by the [`Wait`]'s checks and its end. Kinds without a holder (condition variable,
/// semaphore, barrier, futex, thread) are not read.
pub(crate) unsafe fn wait_begin(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    side: Side,
) -> Wait {
    // SAFETY: as the caller promises.
    unsafe { wait_begin_at(tr, t, obj, side, CallSite::default()) }
}

/// As [`wait_begin`], for a wait called from `site` (its chain may be reused without unwinding).
///
/// # Safety
/// As [`wait_begin`].
pub(crate) unsafe fn wait_begin_at(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    side: Side,
    site: CallSite,
) -> Wait {
    // SAFETY: as the caller promises.
    crate::stack::with_room(|| unsafe { wait_begin_at_here(tr, t, obj, side, site) })
}

/// # Safety
/// As [`wait_begin`].
#[inline(always)]
unsafe fn wait_begin_at_here(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &'static ObjEntry,
    side: Side,
    site: CallSite,
) -> Wait {
    let start = now_ns();
    if obj.flags() & CONTENDED == 0 {
        obj.set_flag(CONTENDED);
    }
    let mut n = obj.busy().waiters.fetch_add(1, Ordering::AcqRel) + 1;
    obj.waiter_came(start);
    if obj.waited_for() {
        // The holder's release must be looked at: its hold now makes a thread wait.
        // SAFETY: the object `t`, the calling thread, begins to wait on: live (the caller's
        // promise).
        let holder = unsafe { obj.holder() };
        if let Some(h) = tr.thread(holder).filter(|h| h.tid() != t.tid()) {
            h.attention
                .store(obj as *const ObjEntry as *mut ObjEntry, Ordering::Release);
        }
    }
    if n > 1 && matches!(obj.kind, ObjectKind::Mutex | ObjectKind::RwLock) {
        // A waiter leaving decrements the count before it clears `waiting_on`, so the count read
        // after looking at the owner excludes an owner that has left in the meantime.
        // SAFETY: as the caller promises.
        let still = unsafe { owner_still_counted(tr, obj) };
        n = n
            .min(obj.busy().waiters.load(Ordering::Acquire))
            .saturating_sub(u32::from(still))
            .max(1);
    }
    if obj.kind == ObjectKind::Barrier {
        // A round's last arrival waits for nobody: a barrier of N has at most N - 1 waiters,
        // even while a mispredicted arrival is counted for a moment (see track::barrier).
        let parties = obj.subtype.load(Ordering::Relaxed);
        if parties > 1 {
            n = n.min(parties - 1);
        }
    }
    let peak = n >= obj.busy().stats.max_waiters.load(Ordering::Relaxed);
    super::objects::raise(&obj.busy().stats.max_waiters, n);
    if side == Side::Shared {
        obj.raise(counter::READ_MAX_WAITERS, u64::from(n));
    }
    tr.blocked.fetch_add(1, Ordering::Relaxed);
    // The waiter's chain, if the policy collects it for this wait (the built-in one always
    // does); contention records name the chains that were collected.
    // SAFETY: as the caller promises.
    let pick = unsafe { super::collect::on_wait(tr, t, obj, n, site) };
    let chain = pick.chain;
    t.wait_chain.store(chain, Ordering::Relaxed);
    t.wait_start.store(start, Ordering::Relaxed);
    // Only this thread writes it: no read-modify-write needed.
    t.wait_untimed.store(false, Ordering::Relaxed);
    t.wait_seq
        .store(t.wait_seq.load(Ordering::Relaxed) + 1, Ordering::Release);
    t.waiting_on
        .store(obj as *const ObjEntry as *mut ObjEntry, Ordering::Release);
    // SAFETY: as the caller promises.
    unsafe { highwater::on_wait(tr, t, obj, n, peak, start, chain) };
    // An object nobody holds (condition variable, semaphore, barrier, futex) leads nowhere in
    // the wait-for graph: a wait on it closes no cycle.
    let suspect = match obj.kind {
        ObjectKind::Cond | ObjectKind::Semaphore | ObjectKind::Barrier | ObjectKind::Futex => None,
        _ => deadlock::find_cycle(tr, t),
    };
    Wait {
        obj,
        start,
        chain,
        side,
        suspect,
        act: pick.rule,
    }
}

/// How long a thread that found an object busy stays away from it before one more try, ahead of
/// a tracked wait: about what glibc's own next step, a futex system call, costs.
pub const BACKOFF_NS: u64 = 1_000;

/// Spins for [`BACKOFF_NS`] without touching shared memory; returns how long it spun.
///
/// Most busy objects are held for a few instructions. Going straight into a tracked wait costs
/// more than such a wait lasts, and the waiter's bookkeeping and its touches of the object's
/// cache line lengthen the holder's critical section and hand the object back and forth: the
/// shim would then measure contention it made itself (4 threads hammering one mutex: 700 k
/// tracked waits without the back-off, 90 k with it, and twice the native run time without
/// it). Timed by the clock (vDSO, no shared line), not by a count of pause instructions, whose
/// length differs tenfold between CPUs.
#[cold]
#[inline(never)]
pub(crate) fn back_off() -> u64 {
    let start = now_ns();
    let mut now = start;
    while now.saturating_sub(start) < BACKOFF_NS {
        std::hint::spin_loop();
        now = now_ns();
    }
    now - start
}

/// `t` got `obj` after a brief back-off, without blocking (called inside the shim). Counted as a
/// contended acquisition with its wait time, at its chain, and how it ended; it takes no part in
/// waiter counts, the highwater mark or the policy, which are about threads that blocked.
pub(crate) fn waited_briefly(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &ObjEntry,
    site: CallSite,
    waited_ns: u64,
) {
    waited_untracked(tr, t, obj, site, waited_ns, counter::ENDED_BRIEF);
}

/// `t` waited `waited_ns` for `obj` although the shim, deciding before the call, had not taken
/// it for a waiter, so it began no tracked wait (a barrier arrival predicted to complete its
/// round that glibc made wait). Counted after the fact as a contended wait ended by `outcome`,
/// at its chain; like [`waited_briefly`], it takes no part in waiter counts, the highwater mark
/// or the policy, which never saw it begin (called inside the shim).
pub(crate) fn waited_unforeseen(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &ObjEntry,
    site: CallSite,
    waited_ns: u64,
    outcome: Outcome,
) {
    waited_untracked(tr, t, obj, site, waited_ns, outcome.key());
}

/// A contended wait no tracked wait covered, ended with reason code `key`.
fn waited_untracked(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &ObjEntry,
    site: CallSite,
    waited_ns: u64,
    key: u16,
) {
    crate::stack::with_room(|| waited_untracked_here(tr, t, obj, site, waited_ns, key))
}

#[inline(always)]
fn waited_untracked_here(
    tr: &Tracker,
    t: &ThreadRec,
    obj: &ObjEntry,
    site: CallSite,
    waited_ns: u64,
    key: u16,
) {
    if obj.flags() & CONTENDED == 0 {
        obj.set_flag(CONTENDED);
    }
    if obj.busy().stats.max_waiters.load(Ordering::Relaxed) == 0 {
        super::objects::raise(&obj.busy().stats.max_waiters, 1);
    }
    // The built-in policy names every waiter's chain (a cache hit after the first); a user's
    // policy decides on blocked waits only.
    let chain = if super::collect::selective() {
        0
    } else {
        tr.chain_at(t, site)
    };
    t.waits.note(
        obj,
        super::waits::Ended {
            chain,
            shared: false,
            outcome: key,
            waited_ns,
            reacquire_ns: None,
        },
    );
}

/// `t` did not wait after all: the wait [`wait_begin`] started was a misjudgement (a barrier
/// arrival taken for a waiter that turned out to complete the round). Undoes what the wait
/// counted while it was in progress (the object's waiters, the blocked threads, `waiting_on`)
/// and takes it out of the open episode's waiters, without counting a wait or ending it for
/// the policy (called inside the shim). The object's `max_waiters` and the highwater mark,
/// already raised, stay as they are.
pub(crate) fn wait_cancel(tr: &Tracker, t: &ThreadRec, w: Wait) {
    // In the order `wait_end_reacquired` uses: the count before `waiting_on`.
    w.obj.waiter_left(false, 0);
    t.waiting_on.store(std::ptr::null_mut(), Ordering::Release);
    tr.blocked.fetch_sub(1, Ordering::Relaxed);
    // Without looking at the flag first: another thread may have opened the episode with this
    // wait in it, and a cancel is rare.
    highwater::on_wait_cancelled(w.obj, t.tid(), w.start);
}

/// The calling thread leaves, by a jump out of a signal handler, the wait it was blocked in (if
/// it was): the thread no longer waits, and the object counts an error. Atomics only (it runs in
/// the handler, so the wait's length is not added to the object's waits, which may allocate):
/// its place in an open episode stays, since it did wait meanwhile.
pub fn wait_abandoned() {
    let p = super::threads::own_record();
    let Some(tr) = tracker() else { return };
    if p.is_null() {
        return;
    }
    // SAFETY: thread records are leaked and never freed; this is the thread's own.
    let t = unsafe { &*p };
    let obj = t.waiting_on.load(Ordering::Acquire);
    if obj.is_null() {
        return;
    }
    // SAFETY: tracking entries are leaked and never freed.
    let obj: &ObjEntry = unsafe { &*obj };
    // In the order `wait_end_reacquired` uses: the count before `waiting_on`.
    obj.waiter_left(false, 0);
    t.waiting_on.store(std::ptr::null_mut(), Ordering::Release);
    tr.blocked.fetch_sub(1, Ordering::Relaxed);
    // A deadlock it was part of is not written as broken (writing may allocate): forgotten.
    t.in_deadlock.store(0, Ordering::Relaxed);
    obj.busy().stats.errors.fetch_add(1, Ordering::Relaxed);
    obj.touch();
}

/// Waits for `w` in the real timed call `wait` (given a clock and an absolute time), cut in
/// slices between which the thread looks for wait-for cycles ([`super::drive::sliced`]); the
/// caller's `deadline` ends it as the real call would have.
pub(crate) fn wait_sliced(
    tr: &Tracker,
    t: &ThreadRec,
    w: &mut Wait,
    deadline: super::drive::Deadline,
    monotonic: bool,
    wait: impl FnMut(libc::clockid_t, &libc::timespec) -> libc::c_int,
) -> libc::c_int {
    let (start, first) = (w.start, w.slice_ns());
    super::drive::sliced(
        &super::drive::SystemClocks,
        deadline,
        monotonic,
        start,
        first,
        wait,
        || {
            wait_check(tr, t, w);
            w.slice_ns()
        },
    )
}

/// The wait `t` has just begun has no deadline (see [`deadlock::look_for_hang`]).
pub(crate) fn untimed(t: &ThreadRec) {
    t.wait_untimed.store(true, Ordering::Release);
}

/// A wait that is one real call, which cannot be cut in slices: a wait-for cycle suspected when
/// it began is confirmed (or dismissed) by a second look a few milliseconds later, before the
/// call.
pub(crate) fn confirm_before_call(tr: &Tracker, t: &ThreadRec, w: &mut Wait) {
    if w.suspected() {
        std::thread::sleep(std::time::Duration::from_nanos(SUSPECT_SLICE_NS));
        wait_check(tr, t, w);
    }
}

/// For a wait that polls (a spinlock): at `now`, if the slice that ends at `*slice_end` is
/// over, looks for wait-for cycles and starts the next slice.
pub(crate) fn check_when_due(
    tr: &Tracker,
    t: &ThreadRec,
    w: &mut Wait,
    now: u64,
    slice_end: &mut u64,
) {
    if now >= *slice_end {
        wait_check(tr, t, w);
        *slice_end = now + w.slice_ns();
    }
}

/// A wait slice expired and the thread waits on: look for a wait-for cycle again.
pub(crate) fn wait_check(tr: &Tracker, t: &ThreadRec, w: &mut Wait) {
    crate::stack::with_room(|| wait_check_here(tr, t, w))
}

#[inline(always)]
fn wait_check_here(tr: &Tracker, t: &ThreadRec, w: &mut Wait) {
    let now = deadlock::find_cycle(tr, t);
    if let (Some(prev), Some(cur)) = (&w.suspect, &now) {
        if prev == cur {
            deadlock::report(tr, t.tid(), cur, now_ns());
        }
    }
    w.suspect = now;
    if let Some(act) = &mut w.act {
        // SAFETY: the object of a wait not ended yet: live (see `Wait`).
        unsafe { super::collect::on_wait_check(tr, t, w.obj, act, w.start) };
    }
    // A process with no thread of the shim (single-threaded until now: one that waits on a
    // mutex it shares with another process) is flushed by its waiting thread, so that its log
    // shows the wait even if it never ends.
    tr.maybe_flush(now_ns());
}

/// How a wait ended (the reason code kept per object).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    Acquired,
    OwnerDied,
    Signalled,
    Broadcast,
    /// A barrier round completed.
    Released,
    TimedOut,
    Interrupted,
    /// An error return, with its errno.
    Failed(libc::c_int),
}

impl Outcome {
    /// How a wait ended, from the result of the real call (an error number, 0 for success): the
    /// one mapping of every family's results to reasons. A condition variable tells a signal
    /// from a broadcast itself, before asking this for the rest.
    pub fn of(r: libc::c_int) -> Outcome {
        match r {
            0 => Outcome::Acquired,
            libc::EOWNERDEAD => Outcome::OwnerDied,
            libc::ETIMEDOUT => Outcome::TimedOut,
            libc::EINTR => Outcome::Interrupted,
            e => Outcome::Failed(e),
        }
    }

    fn key(self) -> u16 {
        match self {
            Outcome::Acquired => counter::ENDED_ACQUIRED,
            Outcome::OwnerDied => counter::ENDED_OWNER_DIED,
            Outcome::Signalled => counter::ENDED_SIGNALLED,
            Outcome::Broadcast => counter::ENDED_BROADCAST,
            Outcome::Released => counter::ENDED_RELEASED,
            Outcome::TimedOut => counter::ENDED_TIMED_OUT,
            Outcome::Interrupted => counter::ENDED_INTERRUPTED,
            Outcome::Failed(_) => counter::ENDED_ERROR,
        }
    }

    /// Whether the waiter now holds the object (and must be counted as acquiring it).
    pub fn acquired(self) -> bool {
        matches!(self, Outcome::Acquired | Outcome::OwnerDied)
    }
}

/// `t` stops waiting (called inside the shim).
pub(crate) fn wait_end(tr: &Tracker, t: &ThreadRec, w: Wait, outcome: Outcome) {
    let _ = wait_end_reacquired(tr, t, w, outcome, None);
}

/// As [`wait_end`], for a condition variable wait woken `reacquire_ns` before it returned (the
/// time it took to get the mutex back). Returns the wait as the thread's cells counted it, and
/// (policy version, rule) of the wait event a rule wrote for it, if one did.
pub(crate) fn wait_end_reacquired(
    tr: &Tracker,
    t: &ThreadRec,
    w: Wait,
    outcome: Outcome,
    reacquire_ns: Option<u64>,
) -> (super::waits::Ended, Option<(u32, u32)>) {
    crate::stack::with_room(|| wait_end_reacquired_here(tr, t, w, outcome, reacquire_ns))
}

#[inline(always)]
fn wait_end_reacquired_here(
    tr: &Tracker,
    t: &ThreadRec,
    mut w: Wait,
    outcome: Outcome,
    reacquire_ns: Option<u64>,
) -> (super::waits::Ended, Option<(u32, u32)>) {
    let now = now_ns();
    // The count first: a thread finding the object busy now must not count this one.
    w.obj.waiter_left(outcome.acquired(), now);
    t.waiting_on.store(std::ptr::null_mut(), Ordering::Release);
    tr.blocked.fetch_sub(1, Ordering::Relaxed);
    if t.in_deadlock.load(Ordering::Relaxed) != 0 {
        deadlock::broken(tr, t, outcome.key(), now);
    }
    let obj = w.obj;
    let waited = now.saturating_sub(w.start);
    let mut event = None;
    if let Some(act) = &mut w.act {
        // SAFETY: the object of the wait ending: live (see `Wait`).
        let done =
            unsafe { super::collect::on_wait_end(tr, t, obj, act, w.start, waited, outcome.key()) };
        if done.chain != 0 {
            w.chain = done.chain;
        }
        event = done.event;
    }
    let ended = super::waits::Ended {
        chain: w.chain,
        shared: w.side == Side::Shared,
        outcome: outcome.key(),
        waited_ns: waited,
        reacquire_ns,
    };
    if outcome.acquired() && w.side == Side::Exclusive && obj.flags() & CONTENDED != 0 {
        // The hold the wait began is timed from now: if it makes others wait in turn, it is
        // measured from its start (at no cost to the fast path: a clock read in every critical
        // section of a contended object changed the contention, 2.3x instead of 1.2x on the
        // contended bench). The acquisition's bookkeeping that follows does not time it again.
        // SAFETY: owning thread, inside the shim: nothing else uses `local` now.
        unsafe { t.local() }.held.push(Held { obj, since: now });
    }
    t.waits.note(obj, ended);
    if super::events::mode() != crate::config::EventsMode::Off {
        let span = waitshim_format::events::WaitSpan {
            begin_ns: w.start,
            end_ns: now,
            object_id: tr.id_of(obj),
            chain_id: w.chain,
            reason: outcome.key(),
            shared: w.side == Side::Shared,
            waker: waker(t, obj, outcome),
        };
        t.events.add(tr, t.tid(), &span);
    }
    match outcome {
        Outcome::TimedOut => {
            obj.busy().stats.timeouts.fetch_add(1, Ordering::Relaxed);
            obj.touch();
        }
        Outcome::Failed(e) => {
            obj.busy().stats.errors.fetch_add(1, Ordering::Relaxed);
            obj.count_errno(e);
            obj.touch();
        }
        Outcome::Interrupted | Outcome::OwnerDied => {
            obj.busy().stats.errors.fetch_add(1, Ordering::Relaxed);
            obj.touch();
        }
        _ => {}
    }
    tr.maybe_flush(now);
    (ended, event)
}

/// The thread whose release, signal, broadcast or post ended `t`'s wait on `obj` that has just
/// ended with `outcome`, 0 if not known. An object with an owner was last acquired by the thread
/// that released it to this one (the waiter's own acquisition is counted after the wait ends);
/// the others keep the thread that last woke their waiters ([`released`]).
fn waker(t: &ThreadRec, obj: &ObjEntry, outcome: Outcome) -> u32 {
    let by = match (outcome, obj.kind) {
        (Outcome::TimedOut | Outcome::Interrupted | Outcome::Failed(_), _) => 0,
        (_, ObjectKind::Mutex | ObjectKind::RwLock | ObjectKind::Spin | ObjectKind::Thread) => {
            obj.owner.last.load(Ordering::Relaxed)
        }
        _ => obj
            .busy_if()
            .map_or(0, |b| b.last_waker.load(Ordering::Relaxed)),
    };
    if by == t.tid() {
        0
    } else {
        by
    }
}
