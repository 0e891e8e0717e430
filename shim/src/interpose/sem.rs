//! `sem_*`: unnamed (`sem_init`) and named (`sem_open`) POSIX semaphores. Every call returns
//! exactly what glibc returns, with the same `errno`: these functions report errors through
//! `errno`, so each wrapper saves it after the real call and restores it after its bookkeeping
//! (which may write the log or allocate).
//!
//! glibc exports each of these at two versions (`GLIBC_2.2.5` and `GLIBC_2.34`, `sem_clockwait`
//! at `GLIBC_2.30` and `GLIBC_2.34`) that are the same code at the same address: 2.34 only
//! recorded their move from libpthread into libc. So unlike the condition variables there is
//! nothing to choose between, and the default version (`dlsym`) is forwarded to for every caller.
//!
//! A semaphore is engaged while its value is zero: a wait first tries the real `sem_trywait`;
//! EAGAIN means the caller would sleep, and the sleep is a tracked wait that takes part in the
//! highwater mark. A semaphore has no owner, so it adds no wait-for edge. A post releases the
//! waiters: the poster ends an open high-contention episode (it is who the waiters waited for).
//! When the last waiter leaves an episode no post of this process ended (the post came from
//! another process sharing the semaphore, or the waits timed out or were interrupted), the
//! episode ends then, with no holder.
//!
//! A named semaphore is the object at the address `sem_open` returned, named "/name" in the log:
//! the name, not the address, is what identifies it across processes. glibc returns the same
//! mapping to every `sem_open` of one name in a process and unmaps it at the matching last
//! `sem_close`, which is where the object ends. `sem_unlink` only removes the name: processes
//! that have the semaphore open keep using it.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;

use crossbeam_skiplist::SkipMap;
use libc::{c_char, c_int, c_uint, clockid_t, mode_t, sem_t, timespec, EAGAIN};
use waitshim_format::{counter, ObjectKind};

use crate::real::RealFn;
use crate::track::engage::{self, Outcome, Side};
use crate::track::handler_counts::HANDLER_POSTS;
use crate::track::objects::{ObjEntry, AUX_POSTS, CONTENDED, DEAD, EPISODE};
use crate::track::threads::{self, current, current_fast, Inside, Slot, ThreadRec};
use crate::track::{tracker, CallSite, Tracker};

const KIND: ObjectKind = ObjectKind::Semaphore;

/// The C library's functions, in their own module: the wrappers below have the same names.
mod glibc {
    use libc::{c_char, c_int, c_uint, clockid_t, sem_t, timespec};

    crate::real::real_fns! {
        sem_init: fn(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int;
        sem_destroy: fn(s: *mut sem_t) -> c_int;
        sem_close: fn(s: *mut sem_t) -> c_int;
        sem_unlink: fn(name: *const c_char) -> c_int;
        sem_wait: fn(s: *mut sem_t) -> c_int;
        sem_trywait: fn(s: *mut sem_t) -> c_int;
        sem_timedwait: fn(s: *mut sem_t, t: *const timespec) -> c_int;
        sem_clockwait: fn(s: *mut sem_t, c: clockid_t, t: *const timespec) -> c_int;
        sem_post: fn(s: *mut sem_t) -> c_int;
        sem_getvalue: fn(s: *mut sem_t, v: *mut c_int) -> c_int;
    }
}

/// `sem_open` is variadic, which the table's macro cannot declare.
static SEM_OPEN: RealFn = RealFn::new(b"sem_open\0");

pub fn resolve() {
    glibc::slot::resolve();
    SEM_OPEN.available();
}

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
fn canonical_name(name: *const c_char) -> String {
    // SAFETY: glibc accepted the name, so it is a NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
    format!("/{}", s.trim_start_matches('/'))
}

/// The object at `addr`, registered on first use (semaphores initialised statically, in shared
/// memory by another process, or before the shim started). Called inside the shim.
fn object(tr: &Tracker, t: &ThreadRec, addr: usize) -> &'static ObjEntry {
    if let Some((_, obj)) = t.cached(addr) {
        return obj;
    }
    if ANY_NAMED.load(Ordering::Relaxed) && tr.objects.get(addr).is_none() {
        if let Some(e) = named().get(&addr) {
            // Applied when the object is announced just below.
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
        let _in = Inside::enter();
        object(tr, t, addr);
    }
    t.count(t.slot(addr));
    set_errno(e);
}

fn valid(ts: *const timespec) -> bool {
    // SAFETY: a non-null pointer from the caller of a timed wait points to a timespec.
    !ts.is_null() && unsafe { (*ts).tv_nsec >= 0 && (*ts).tv_nsec < 1_000_000_000 }
}

#[no_mangle]
pub unsafe extern "C" fn sem_init(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { glibc::sem_init(s, pshared, value) };
    if r == 0 {
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let e = errno();
            let _in = Inside::enter();
            tr.object_initialised(t, s as usize, KIND, 0, CallSite::default());
            prepare(object(tr, t, s as usize));
            set_errno(e);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn sem_destroy(s: *mut sem_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { glibc::sem_destroy(s) };
    if r == 0 {
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let e = errno();
            let _in = Inside::enter();
            tr.object_destroyed(t, s as usize);
            set_errno(e);
        }
    }
    r
}

/// `sem_t *sem_open(const char *name, int oflag, ...)`: `mode` and `value` are only passed
/// (and only read by glibc) with `O_CREAT`.
///
/// Rust cannot define a C variadic function; on x86-64 a variadic call passes its integer
/// arguments in the same registers as a fixed one (rdx, rcx here), so receiving them as fixed
/// parameters reads exactly what the caller passed, or unused register contents without
/// `O_CREAT`, which glibc then does not read either.
#[no_mangle]
pub unsafe extern "C" fn sem_open(
    name: *const c_char,
    oflag: c_int,
    mode: mode_t,
    value: c_uint,
) -> *mut sem_t {
    // SAFETY: the slot holds glibc's `sem_open`, whose C signature is this one.
    let f: unsafe extern "C" fn(*const c_char, c_int, ...) -> *mut sem_t =
        unsafe { std::mem::transmute::<usize, _>(SEM_OPEN.get()) };
    // SAFETY: forwarding the caller's arguments, with the variadic ones as received.
    let s = unsafe { f(name, oflag, mode, value) };
    if s == libc::SEM_FAILED || s.is_null() {
        return s;
    }
    let e = errno();
    let _in = Inside::enter();
    let addr = s as usize;
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
            let _in = Inside::enter();
            tr.object_initialised(t, addr, KIND, 0, CallSite::default());
            prepare(object(tr, t, addr));
            tr.name_object(addr, name);
        }
    }
    set_errno(e);
    s
}

#[no_mangle]
pub unsafe extern "C" fn sem_close(s: *mut sem_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { glibc::sem_close(s) };
    if r != 0 {
        return r;
    }
    let e = errno();
    let addr = s as usize;
    let last = {
        let _in = Inside::enter();
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
            let _in = Inside::enter();
            tr.object_destroyed(t, addr);
        }
    }
    set_errno(e);
    r
}

/// Removes the name only; see the module comment.
#[no_mangle]
pub unsafe extern "C" fn sem_unlink(name: *const c_char) -> c_int {
    // SAFETY: forwarding.
    unsafe { glibc::sem_unlink(name) }
}

#[no_mangle]
pub unsafe extern "C" fn sem_getvalue(s: *mut sem_t, v: *mut c_int) -> c_int {
    // SAFETY: forwarding.
    unsafe { glibc::sem_getvalue(s, v) }
}

#[no_mangle]
pub unsafe extern "C" fn sem_trywait(s: *mut sem_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { glibc::sem_trywait(s) };
    if let Some(t) = current() {
        let e = errno();
        if r == 0 {
            acquired(t, s as usize);
        } else if e == EAGAIN {
            if let Some(tr) = tracker() {
                let _in = Inside::enter();
                let obj = object(tr, t, s as usize);
                obj.busy().stats.busy.fetch_add(1, Ordering::Relaxed);
                obj.touch();
            }
        }
        set_errno(e);
    }
    r
}

/// Entry trampoline, as `pthread_mutex_lock`'s: hands `wait_from` the stack pointer at entry,
/// where the caller's return address is (the call site, for the chain cache).
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn sem_wait(s: *mut sem_t) -> c_int {
    std::arch::naked_asm!("mov rsi, rsp", "jmp {}", sym wait_from)
}

unsafe extern "C" fn wait_from(s: *mut sem_t, entry_sp: usize) -> c_int {
    // SAFETY: forwarding / the caller's semaphore; `sem_wait` has not returned.
    unsafe { wait(s, entry_sp, true, || glibc::sem_wait(s)) }
}

#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(s: *mut sem_t, ts: *const timespec) -> c_int {
    if !valid(ts) {
        // glibc answers EINVAL before looking at the semaphore (and a null deadline crashes it,
        // as it would without the shim): trying it first would take a unit it does not take.
        // SAFETY: forwarding.
        return unsafe { glibc::sem_timedwait(s, ts) };
    }
    // SAFETY: forwarding / the caller's semaphore and valid deadline.
    unsafe { wait(s, 0, false, || glibc::sem_timedwait(s, ts)) }
}

#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(
    s: *mut sem_t,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if (clk != libc::CLOCK_REALTIME && clk != libc::CLOCK_MONOTONIC) || !valid(ts) {
        // As for sem_timedwait: glibc rejects other clocks and bad deadlines first.
        // SAFETY: forwarding.
        return unsafe { glibc::sem_clockwait(s, clk, ts) };
    }
    // SAFETY: as above.
    unsafe { wait(s, 0, false, || glibc::sem_clockwait(s, clk, ts)) }
}

/// Shared by the three waits; `call` is the real wait the caller asked for. `entry_sp` is the
/// entry stack pointer of the interposed function (0: unknown), for the call site; `untimed`:
/// the caller gave no deadline.
#[inline(always)]
unsafe fn wait(s: *mut sem_t, entry_sp: usize, untimed: bool, call: impl Fn() -> c_int) -> c_int {
    let Some(t) = current() else {
        return call();
    };
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    let errno_at = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let caller_errno = unsafe { *errno_at };
    // SAFETY: the caller's semaphore.
    if unsafe { glibc::sem_trywait(s) } == 0 {
        // A successful trywait leaves errno alone, and so does counting it.
        acquired(t, s as usize);
        return 0;
    }
    // The trywait set errno (EAGAIN): the caller's must be what the real wait starts from.
    // SAFETY: as above.
    let busy = unsafe { *errno_at } == EAGAIN;
    // SAFETY: as above.
    unsafe { *errno_at = caller_errno };
    if !busy {
        return call();
    }
    let site = match entry_sp {
        0 => CallSite::default(),
        // SAFETY: the entry stack pointer of a `sem_wait` that has not returned.
        sp => unsafe { CallSite::at_entry(sp) },
    };
    // SAFETY: the caller's semaphore.
    if unsafe { took_after_backoff(t, s, site) } {
        return 0;
    }
    // SAFETY: as above.
    unsafe { *errno_at = caller_errno };
    // SAFETY: the caller's semaphore.
    unsafe { contended(t, s, caller_errno, site, untimed, call) }
}

/// Stays away from the semaphore at zero for a moment and tries once more: true if `t` took a
/// unit, counted as a brief wait (see [`engage::back_off`]: a pool's units mostly come back
/// within instructions). errno is the caller's when it returns true, else the trywait's.
///
/// # Safety
/// `s` is the caller's semaphore.
#[cold]
#[inline(never)]
unsafe fn took_after_backoff(t: &ThreadRec, s: *mut sem_t, site: CallSite) -> bool {
    let Some(tr) = tracker() else { return false };
    let e = errno();
    let waited = engage::back_off();
    // SAFETY: the caller's semaphore.
    if unsafe { glibc::sem_trywait(s) } != 0 {
        return false;
    }
    {
        let _in = Inside::enter();
        let obj = object(tr, t, s as usize);
        engage::waited_briefly(tr, t, obj, site, waited);
    }
    acquired(t, s as usize);
    set_errno(e);
    true
}

/// The semaphore is at zero: wait for a post, tracked.
#[cold]
#[inline(never)]
unsafe fn contended(
    t: &ThreadRec,
    s: *mut sem_t,
    caller_errno: c_int,
    site: CallSite,
    untimed: bool,
    call: impl Fn() -> c_int,
) -> c_int {
    let addr = s as usize;
    let Some(tr) = tracker() else {
        return call();
    };
    // The real waits are cancellation points: a cancelled thread leaves through this frame by
    // forced unwinding, which Rust allows only through frames with nothing to drop. So the
    // guard and the wait are dropped by hand; the thread's exit hook undoes a wait that a
    // cancellation cut short.
    let inside = ManuallyDrop::new(Inside::enter());
    let obj = object(tr, t, addr);
    let w = ManuallyDrop::new(engage::wait_begin_at(tr, t, obj, Side::Exclusive, site));
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

/// The semaphore's value ([`crate::layout::sem`]). Only read, to tell a post that will fail
/// (EOVERFLOW at `SEM_VALUE_MAX`).
fn value(addr: usize) -> u32 {
    // SAFETY: `addr` is the semaphore the caller is posting: live.
    unsafe { crate::layout::sem::value(addr) }
}

type PostFn = unsafe extern "C" fn(*mut sem_t) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn sem_post(s: *mut sem_t) -> c_int {
    // The common case, without a stack frame: a cached semaphore with nothing flagged on it. The
    // post is counted first and glibc's sem_post is reached by a tail call; the one post that
    // can fail, at the maximum value, takes the general path.
    if let Some(t) = current_fast() {
        let addr = s as usize;
        let slot = t.slot(addr);
        let f = glibc::slot::sem_post.resolved();
        if let (true, Some((obj, true))) = (
            slot.addr.load(Ordering::Relaxed) == addr && f > 1,
            slot.held(),
        ) {
            if obj.flags() & (DEAD | EPISODE) == 0
                && obj
                    .busy_if()
                    .is_none_or(|b| b.waiters.load(Ordering::Relaxed) == 0)
                && value(addr) < i32::MAX as u32
                && t.count_aux_quick(slot, AUX_POSTS)
            {
                // SAFETY: glibc's sem_post, whose signature is `PostFn`; forwarding.
                return unsafe { std::mem::transmute::<usize, PostFn>(f)(s) };
            }
        }
    }
    // SAFETY: forwarding the caller's semaphore.
    unsafe { post_tracked(s) }
}

#[inline(never)]
unsafe extern "C" fn post_tracked(s: *mut sem_t) -> c_int {
    let Some(t) = current() else {
        // SAFETY: forwarding.
        let r = unsafe { glibc::sem_post(s) };
        if r == 0 && threads::in_handler() {
            posted_in_handler(s as usize);
        }
        return r;
    };
    let addr = s as usize;
    let Some((slot, obj)) = t.cached(addr).or_else(|| first_post(t, addr)) else {
        // SAFETY: forwarding.
        return unsafe { glibc::sem_post(s) };
    };
    // Before the post: a waiter it wakes must find the episode already ended by its poster, and
    // the poster named as the one who woke it.
    if obj.flags() & (EPISODE | CONTENDED) != 0 {
        let e = errno();
        engage::released(t, obj);
        set_errno(e);
    }
    // SAFETY: forwarding.
    let r = unsafe { glibc::sem_post(s) };
    if r == 0 {
        // Counted in the thread's cache like acquisitions (no allocation, no lock, errno kept).
        t.count_aux(slot, AUX_POSTS);
    }
    r
}

/// A post from a signal handler of the program, counted without allocating or locking: in the
/// thread's cache if it has the semaphore there, else in a fixed lock-free table the next flush
/// moves to the semaphore ([`HANDLER_POSTS`]). The episode it may end is closed by its last
/// waiter instead.
fn posted_in_handler(addr: usize) {
    let p = threads::own_record();
    if !p.is_null() {
        // SAFETY: records are leaked and never freed; `cached` and `count_aux` only read the
        // thread's cache and add to an atomic count.
        let t = unsafe { &*p };
        if let Some((slot, _)) = t.cached(addr) {
            t.count_aux(slot, AUX_POSTS);
            return;
        }
    }
    HANDLER_POSTS.record(addr);
}

/// A semaphore not in the thread's cache: registered (if new) and cached; errno kept.
#[cold]
#[inline(never)]
fn first_post(t: &ThreadRec, addr: usize) -> Option<(&Slot, &'static ObjEntry)> {
    let tr = tracker()?;
    let e = errno();
    let obj = {
        let _in = Inside::enter();
        object(tr, t, addr)
    };
    set_errno(e);
    Some((t.slot(addr), obj))
}
