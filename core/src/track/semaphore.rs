//! Semaphores (`sem_*`, unnamed and named): what a wait, a post, a try and the life of a
//! semaphore mean for the tracker. The wrappers in `interpose/sem.rs` call these with the real
//! functions; every function here leaves `errno` as the real call left it (bookkeeping may
//! write the log or allocate, which can change it).
//!
//! A semaphore is engaged while its value is zero: a wait first tries the real `sem_trywait`;
//! EAGAIN means the caller would sleep, and the sleep is a tracked wait that takes part in the
//! highwater mark. A semaphore has no owner, so it adds no wait-for edge. A post releases the
//! waiters: the poster ends an open high-contention episode (it is who the waiters waited for).
//! When the last waiter leaves an episode no post of this process ended (the post came from
//! another process sharing the semaphore, or the waits timed out or were interrupted), the
//! episode ends then, with no holder.
//!
//! A post may come from a signal handler: there nothing here allocates, locks or looks up
//! anything but the thread's own cache and a fixed table (`HANDLER_POSTS`).

use std::ffi::CStr;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

use crossbeam_skiplist::SkipMap;
use libc::{c_int, EAGAIN};
use waitshim_format::{counter, ObjectKind};

use super::engage::{self, Outcome, Side};
use super::handler_counts::{PendingCounts, HANDLER_POSTS};
use super::objects::{ObjEntry, AUX_POSTS, CONTENDED, DEAD, EPISODE};
use super::threads::{self, current, current_fast, InShim, Slot, ThreadRec};
use super::{tracker, CallSite, Tracker};

const KIND: ObjectKind = ObjectKind::Semaphore;

/// glibc's `SEM_VALUE_MAX`: a post at this value fails with EOVERFLOW.
const VALUE_MAX: u32 = i32::MAX as u32;

fn errno() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// A named semaphore mapped in this process: its name, and how many `sem_open`s of it are not
/// closed yet (glibc's own reference count).
struct Named {
    name: String,
    opens: AtomicU32,
}

/// Named semaphores by address. Lock-free (and copied into a forked child with the rest of the
/// memory), so that a child, whose tracker starts empty, still names the semaphores it inherited.
fn named() -> &'static SkipMap<usize, Named> {
    static NAMED: OnceLock<SkipMap<usize, Named>> = OnceLock::new();
    NAMED.get_or_init(SkipMap::new)
}

/// Whether any semaphore was ever opened by name: spares the lookup for unnamed ones.
static ANY_NAMED: AtomicBool = AtomicBool::new(false);

/// glibc ignores leading slashes ("/x", "x" and "//x" are one semaphore); the name is shown the
/// way the POSIX interface spells it, with one.
fn canonical_name(name: &CStr) -> String {
    format!("/{}", name.to_string_lossy().trim_start_matches('/'))
}

/// The object at `addr`, registered on first use (semaphores initialised statically, in shared
/// memory by another process, or before the shim started). Called inside the shim, under a
/// quiet guard at least: what may reach a cancellation point (registering, naming) takes a full
/// one of its own, and preparing a known semaphore's counters does nothing or allocates.
fn object(tr: &Tracker, t: &ThreadRec, addr: usize) -> &'static ObjEntry {
    if let Some((_, obj)) = t.cached(addr) {
        return obj;
    }
    if ANY_NAMED.load(Ordering::Relaxed) && tr.objects.get(addr).is_none() {
        if let Some(e) = named().get(&addr) {
            // Applied when the object is announced just below (or written now, if another
            // thread registered it meanwhile).
            let _in = InShim::enter();
            tr.name_object(addr, e.value().name.clone());
        }
    }
    let obj = tr.object(t, addr, KIND, 0);
    prepare(obj);
    obj
}

/// Allocates the object's kind-specific counters now, so that counting a post never allocates:
/// `sem_post` is async-signal-safe and programs call it from signal handlers.
fn prepare(obj: &ObjEntry) {
    obj.raise(counter::POSTS, 0);
}

/// `sem_init` made the semaphore at `addr`: a new generation of it.
pub fn initialised(addr: usize) {
    if let (Some(t), Some(tr)) = (current(), tracker()) {
        let e = errno();
        let _in = InShim::enter();
        tr.object_initialised(t, addr, KIND, 0, CallSite::default());
        prepare(object(tr, t, addr));
        set_errno(e);
    }
}

/// `sem_destroy` ended the semaphore at `addr`.
pub fn destroyed(addr: usize) {
    if let (Some(t), Some(tr)) = (current(), tracker()) {
        let e = errno();
        let _in = InShim::enter();
        tr.object_destroyed(t, addr);
        set_errno(e);
    }
}

/// `sem_open` of `name` returned the mapping at `addr`. glibc returns the same mapping to every
/// open of one name in a process: the first makes the object, named "/name" in the log (the
/// name, not the address, identifies it across processes); the others only count.
pub fn opened(addr: usize, name: &CStr) {
    let e = errno();
    let _in = InShim::enter();
    let map = named();
    let again = map
        .get(&addr)
        .map(|n| n.value().opens.fetch_add(1, Ordering::AcqRel));
    if again.is_none() {
        let name = canonical_name(name);
        map.insert(
            addr,
            Named {
                name: name.clone(),
                opens: AtomicU32::new(1),
            },
        );
        ANY_NAMED.store(true, Ordering::Relaxed);
        drop(_in);
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let _in = InShim::enter();
            tr.object_initialised(t, addr, KIND, 0, CallSite::default());
            prepare(object(tr, t, addr));
            tr.name_object(addr, name);
        }
    }
    set_errno(e);
}

/// `sem_close` of the mapping at `addr` succeeded: glibc unmaps it at the last close of the
/// opens of its name, which is where the object ends. (`sem_unlink` only removes the name:
/// processes that have the semaphore open keep using it.)
pub fn closed(addr: usize) {
    let e = errno();
    let last = {
        let _in = InShim::enter();
        match named().get(&addr) {
            Some(n) if n.value().opens.fetch_sub(1, Ordering::AcqRel) <= 1 => {
                n.remove();
                true
            }
            _ => false,
        }
    };
    if last {
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let _in = InShim::enter();
            tr.object_destroyed(t, addr);
        }
    }
    set_errno(e);
}

/// `sem_trywait` on the semaphore at `addr` returned `r`: a unit taken is an acquisition, EAGAIN
/// (at zero) a busy try.
pub fn tried(addr: usize, r: c_int) {
    let Some(t) = current() else { return };
    let e = errno();
    if r == 0 {
        acquired(t, addr);
    } else if e == EAGAIN {
        if let Some(tr) = tracker() {
            let _in = InShim::enter();
            let obj = object(tr, t, addr);
            obj.busy().stats.busy.fetch_add(1, Ordering::Relaxed);
            obj.touch();
        }
    }
    set_errno(e);
}

/// Counts an acquisition that did not wait, in the thread's cache like a mutex's; errno kept.
#[inline(always)]
fn acquired(t: &ThreadRec, addr: usize) {
    match t.cached(addr) {
        Some((s, _)) => {
            t.count(s);
        }
        None => acquired_uncached(t, addr),
    }
}

#[cold]
#[inline(never)]
fn acquired_uncached(t: &ThreadRec, addr: usize) {
    let Some(tr) = tracker() else { return };
    let e = errno();
    {
        // A lookup and a cache fill (see `object`).
        let _in = InShim::enter_quiet();
        object(tr, t, addr);
    }
    t.count(t.slot(addr));
    set_errno(e);
}

/// A wait (`sem_wait`, `sem_timedwait`, `sem_clockwait`) on the semaphore at `addr`: `try_` is
/// the real `sem_trywait`, `call` the real wait the caller asked for; returns what the one that
/// answered returned, with its errno. `entry_sp` is the entry stack pointer of the interposed
/// function (0: unknown), for the call site; `untimed`: the caller gave no deadline.
///
/// # Safety
/// `entry_sp` is 0 or the entry stack pointer of an interposed function that has not returned.
#[inline(always)]
pub unsafe fn wait(
    addr: usize,
    entry_sp: usize,
    untimed: bool,
    try_: impl Fn() -> c_int,
    call: impl Fn() -> c_int,
) -> c_int {
    let Some(t) = current() else {
        return call();
    };
    let caller_errno = errno();
    if try_() == 0 {
        // A successful trywait leaves errno alone, and so does counting it.
        acquired(t, addr);
        return 0;
    }
    // The trywait set errno (EAGAIN): the caller's must be what the real wait starts from.
    let busy = errno() == EAGAIN;
    set_errno(caller_errno);
    if !busy {
        return call();
    }
    let site = match entry_sp {
        0 => CallSite::default(),
        // SAFETY: per this function's contract.
        sp => unsafe { CallSite::at_entry(sp) },
    };
    if took_after_backoff(t, addr, site, &try_) {
        return 0;
    }
    set_errno(caller_errno);
    contended(t, addr, caller_errno, site, untimed, call)
}

/// Stays away from the semaphore at zero for a moment and tries once more: true if `t` took a
/// unit, counted as a brief wait (see [`engage::back_off`]: a pool's units mostly come back
/// within instructions). errno is the caller's when it returns true, else the trywait's.
#[cold]
#[inline(never)]
fn took_after_backoff(
    t: &ThreadRec,
    addr: usize,
    site: CallSite,
    try_: impl Fn() -> c_int,
) -> bool {
    let Some(tr) = tracker() else { return false };
    let e = errno();
    let waited = engage::back_off();
    if try_() != 0 {
        return false;
    }
    {
        let _in = InShim::enter();
        let obj = object(tr, t, addr);
        engage::waited_briefly(tr, t, obj, site, waited);
    }
    acquired(t, addr);
    set_errno(e);
    true
}

/// The semaphore is at zero: wait for a post, tracked.
#[cold]
#[inline(never)]
fn contended(
    t: &ThreadRec,
    addr: usize,
    caller_errno: c_int,
    site: CallSite,
    untimed: bool,
    call: impl Fn() -> c_int,
) -> c_int {
    let Some(tr) = tracker() else {
        return call();
    };
    // The real waits are cancellation points: a cancelled thread leaves through this frame by
    // forced unwinding, which Rust allows only through frames with nothing to drop. So the
    // guard and the wait are dropped by hand; the thread's exit hook undoes a wait that a
    // cancellation cut short.
    let inside = ManuallyDrop::new(InShim::enter());
    let obj = object(tr, t, addr);
    // SAFETY: a semaphore has no holder: nothing is read at its address.
    let w = ManuallyDrop::new(unsafe { engage::wait_begin_at(tr, t, obj, Side::Exclusive, site) });
    if untimed {
        engage::untimed(t);
    }
    set_errno(caller_errno);
    let r = inside.cancellable(call);
    let e = errno();
    let w = ManuallyDrop::into_inner(w);
    // sem_*wait answer -1 and errno.
    engage::wait_end(tr, t, w, Outcome::of(if r == 0 { 0 } else { e }));
    if r == 0 {
        match t.cached(addr) {
            Some((slot, _)) => {
                t.count(slot);
            }
            None => {
                obj.acquisitions.fetch_add(1, Ordering::Relaxed);
                obj.touch();
            }
        }
    }
    engage::left_unreleased(tr, obj);
    drop(ManuallyDrop::into_inner(inside));
    set_errno(e);
    r
}

/// Whether a post of `obj`, whose value is `value` now, needs nothing of the tracker but its
/// count: nothing flagged on the object (destroyed, an episode to end), no waiter to name the
/// poster to, and a value below the maximum (the post that would fail, with EOVERFLOW, must
/// not be counted).
#[inline(always)]
fn post_is_plain(obj: &ObjEntry, value: u32) -> bool {
    obj.flags() & (DEAD | EPISODE) == 0
        && obj
            .busy_if()
            .is_none_or(|b| b.waiters.load(Ordering::Relaxed) == 0)
        && value < VALUE_MAX
}

/// The common post, without a call or a stack frame: a semaphore the calling thread has cached
/// with nothing flagged on it (`post_is_plain`). True: the post is counted, and the caller
/// posts by a tail call into glibc; false: nothing done, the caller takes [`post`].
///
/// # Safety
/// `addr` is the semaphore being posted: live.
#[inline(always)]
pub unsafe fn post_quick(addr: usize) -> bool {
    let Some(t) = current_fast() else {
        return false;
    };
    let slot = t.slot(addr);
    if slot.addr.load(Ordering::Relaxed) != addr {
        return false;
    }
    let Some((obj, true)) = slot.held() else {
        return false;
    };
    // SAFETY: per this function's contract.
    post_is_plain(obj, unsafe { crate::layout::sem::value(addr) })
        && t.count_aux_quick(slot, AUX_POSTS)
}

/// A post of the semaphore at `addr` by `call`, the real `sem_post`; returns its result, with
/// its errno. Before the post, a waiter it wakes must find the episode already ended by its
/// poster, and the poster named as the one who woke it; a post that succeeded is counted in
/// the thread's cache like acquisitions (no allocation, no lock).
#[inline(always)]
pub fn post(addr: usize, call: impl FnOnce() -> c_int) -> c_int {
    let Some(t) = current() else {
        let r = call();
        if r == 0 && threads::in_handler() {
            posted_in_handler(addr);
        }
        return r;
    };
    let Some((slot, obj)) = t.cached(addr).or_else(|| first_post(t, addr)) else {
        return call();
    };
    if obj.flags() & (EPISODE | CONTENDED) != 0 {
        let e = errno();
        engage::released(t, obj);
        set_errno(e);
    }
    let r = call();
    if r == 0 {
        t.count_aux(slot, AUX_POSTS);
    }
    r
}

/// A post from a signal handler of the program, counted without allocating or locking (see
/// [`counted_in_handler`]). The episode it may end is closed by its last waiter instead.
fn posted_in_handler(addr: usize) {
    let p = threads::own_record();
    // SAFETY: records are leaked and never freed.
    let t = (!p.is_null()).then(|| unsafe { &*p });
    counted_in_handler(t, addr, &HANDLER_POSTS);
}

/// Counts a post from a handler running on thread `t` (if registered): in its cache if it has
/// the semaphore there, else in `table`, which the next flush moves to the semaphore. Reads
/// only the thread's cache and adds to atomic counts.
fn counted_in_handler<const N: usize>(
    t: Option<&ThreadRec>,
    addr: usize,
    table: &PendingCounts<N>,
) {
    if let Some(t) = t {
        if let Some((slot, _)) = t.cached(addr) {
            t.count_aux(slot, AUX_POSTS);
            return;
        }
    }
    table.record(addr);
}

/// A semaphore not in the thread's cache: registered (if new) and cached; errno kept.
#[cold]
#[inline(never)]
fn first_post(t: &ThreadRec, addr: usize) -> Option<(&Slot, &'static ObjEntry)> {
    let tr = tracker()?;
    let e = errno();
    let obj = {
        // A lookup and a cache fill (see `object`).
        let _in = InShim::enter_quiet();
        object(tr, t, addr)
    };
    set_errno(e);
    Some((t.slot(addr), obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn semaphore(addr: usize) -> &'static ObjEntry {
        Box::leak(Box::new(ObjEntry::new(addr, KIND)))
    }

    fn posts_in_cache(t: &ThreadRec, addr: usize) -> u16 {
        t.slot(addr).aux[AUX_POSTS].load(Ordering::Relaxed)
    }

    fn table_counts<const N: usize>(table: &PendingCounts<N>) -> Vec<(usize, u64)> {
        let mut v = Vec::new();
        table.drain(|a, n| {
            v.push((a, n));
            0
        });
        v
    }

    #[test]
    fn a_handler_posting_a_semaphore_its_thread_uses_counts_it_in_the_threads_cache() {
        let t = ThreadRec::new();
        t.install(semaphore(0x4000));
        let table = PendingCounts::<4>::new();
        counted_in_handler(Some(&t), 0x4000, &table);
        counted_in_handler(Some(&t), 0x4000, &table);
        assert_eq!(posts_in_cache(&t, 0x4000), 2);
        assert_eq!(table_counts(&table), vec![]);
    }

    #[test]
    fn a_handler_posting_a_semaphore_its_thread_never_used_counts_it_in_the_table() {
        let t = ThreadRec::new();
        let table = PendingCounts::<4>::new();
        counted_in_handler(Some(&t), 0x5000, &table);
        // A handler on a thread the shim has not registered.
        counted_in_handler(None, 0x5000, &table);
        assert_eq!(posts_in_cache(&t, 0x5000), 0);
        assert_eq!(table_counts(&table), vec![(0x5000, 2)]);
    }

    #[test]
    fn a_post_is_plain_only_with_no_waiter_no_episode_and_room_for_the_unit() {
        let s = semaphore(0x6000);
        assert!(post_is_plain(s, 0));
        assert!(
            !post_is_plain(s, VALUE_MAX),
            "a post at SEM_VALUE_MAX fails with EOVERFLOW: not counted as a post"
        );
        s.busy().waiters.store(1, Ordering::Relaxed);
        assert!(!post_is_plain(s, 0), "a waiter learns who posted");
        s.busy().waiters.store(0, Ordering::Relaxed);
        s.set_flag(EPISODE);
        assert!(!post_is_plain(s, 0), "the poster ends the open episode");
        s.clear_flag(EPISODE);
        s.set_flag(DEAD);
        assert!(
            !post_is_plain(s, 0),
            "a destroyed semaphore's entry counts nothing"
        );
    }

    #[test]
    fn a_named_semaphore_is_shown_with_one_leading_slash_as_glibc_reads_it() {
        assert_eq!(canonical_name(c"jobs"), "/jobs");
        assert_eq!(canonical_name(c"/jobs"), "/jobs");
        assert_eq!(canonical_name(c"//jobs"), "/jobs");
    }
}
