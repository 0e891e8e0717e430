//! `pthread_mutex_*`. Every call returns exactly what glibc returns.
//!
//! Lock first tries the real trylock: success means no wait (the uncontended path); EBUSY means
//! the caller must wait, which is the contended path. Any other result is what lock itself would
//! return for that mutex (EOWNERDEAD, ENOTRECOVERABLE, EAGAIN, EINVAL) and is passed through.
//! A contended wait sleeps in the real timed lock in slices, so that it can look for wait-for
//! cycles while it waits; the caller's own deadline, if any, ends the wait exactly as it would.

use std::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, clockid_t, pthread_mutex_t, pthread_mutexattr_t, timespec, EBUSY, ETIMEDOUT};
use waitshim_format::{mutex_kind, ObjectKind};

use crate::layout::mutex::{self as glibc_mutex, subtype};
use crate::real;
use crate::track::delayed;
use crate::track::engage;
use crate::track::owned::{self, Lock};
use crate::track::threads::{current, current_fast, passes_through, ThreadRec};
use crate::track::CallSite;

const KIND: ObjectKind = ObjectKind::Mutex;

/// The caller's mutex, as the core's lock protocol names it.
fn lock(m: *mut pthread_mutex_t) -> Lock {
    Lock {
        addr: m as usize,
        kind: KIND,
        subtype,
    }
}

/// Mutexes whose trylock does not answer for their lock: glibc 2.36's trylock of a robust mutex
/// that is not recoverable returns ENOTRECOVERABLE but leaves it locked, and a priority-protect
/// trylock can succeed where lock fails with EINVAL. These go straight to the real function.
const NO_TRYLOCK_FIRST: u32 =
    mutex_kind::ROBUST | mutex_kind::PRIO_INHERIT | mutex_kind::PRIO_PROTECT;

/// Another library preloaded after this one interposes the mutex functions too (a second
/// profiler, a lock-debugging library): each call of the program must then reach it exactly
/// once, so locks are not tried first with trylock, which it would see as calls the program
/// never made, and waits are not sliced (see [`without_trylock`]).
static CHAINED: AtomicBool = AtomicBool::new(false);

/// Notes whether the next definitions of the mutex functions are the C library's own.
pub fn resolve() {
    let chained = [
        &real::slot::pthread_mutex_lock,
        &real::slot::pthread_mutex_trylock,
        &real::slot::pthread_mutex_timedlock,
        &real::slot::pthread_mutex_unlock,
    ]
    .into_iter()
    .any(|slot| slot.available() && !in_c_library(slot.resolved()));
    CHAINED.store(chained, Ordering::Relaxed);
}

/// Whether the function at `addr` lies in the C library (`libc.so`, or `libpthread.so` before
/// glibc 2.34). Asked with `dladdr`, which neither loads nor allocates: this runs at start-up,
/// possibly from inside the first lock of an allocator that is still setting itself up.
fn in_c_library(addr: usize) -> bool {
    // SAFETY: dladdr fills in the structure for any address, mapped or not.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return true;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string of the loader's.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    let file = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
    file.starts_with(b"libc.so") || file.starts_with(b"libpthread.so")
}

#[inline(always)]
fn chained() -> bool {
    CHAINED.load(Ordering::Relaxed)
}

fn valid(ts: *const timespec) -> bool {
    // SAFETY: a non-null pointer from the caller of a timed lock points to a timespec.
    !ts.is_null() && unsafe { (*ts).tv_nsec >= 0 && (*ts).tv_nsec < 1_000_000_000 }
}

/// Entry trampoline, as `pthread_mutex_lock`'s: the call site, in the third argument register,
/// lets a mutex initialised again and again at one place reuse its creation chain.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_init(
    m: *mut pthread_mutex_t,
    a: *const pthread_mutexattr_t,
) -> c_int {
    std::arch::naked_asm!("mov rdx, rsp", "jmp {}", sym init_from)
}

unsafe extern "C" fn init_from(
    m: *mut pthread_mutex_t,
    a: *const pthread_mutexattr_t,
    entry_sp: usize,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_mutex_init(m, a) };
    // SAFETY: the entry stack pointer of a `pthread_mutex_init` that has not returned.
    let site = unsafe { CallSite::at_entry(entry_sp) };
    // SAFETY: `m` points to the caller's mutex storage (init requires a valid pointer): a live
    // mutex after a successful init; on failure the value read goes unused.
    let sub = unsafe { subtype(m as usize) };
    engage::initialised(r, m as usize, KIND, sub, site);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_mutex_destroy(m) };
    engage::destroyed(r, m as usize);
    r
}

/// Entry trampoline: hands `lock_from` the stack pointer at entry, where the caller's return
/// address is (the call site, for the chain cache), in the second argument register, then jumps
/// to it. Only the contended path reads the return address: loading it here, right after the
/// call stored it, costs more than the rest of the trampoline.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int {
    std::arch::naked_asm!("mov rsi, rsp", "jmp {}", sym lock_from)
}

/// The real lock or unlock.
type LockFn = unsafe extern "C" fn(*mut pthread_mutex_t) -> c_int;

/// The real `pthread_mutex_lock` or `pthread_mutex_unlock`, for a thread the shim tracks: the
/// shim resolves both before it registers any thread (`real::resolve_all`, when tracking starts).
#[inline(always)]
fn resolved(f: &real::RealFn) -> LockFn {
    let a = f.resolved();
    debug_assert!(a != 0);
    // SAFETY: the address of glibc's function of that name, whose signature is `LockFn`.
    unsafe { std::mem::transmute::<usize, LockFn>(a) }
}

unsafe extern "C" fn lock_from(m: *mut pthread_mutex_t, entry_sp: usize) -> c_int {
    // The two common paths of `lock_tracked`, reached without its checks: the single-threaded
    // one in its common case, kept free of calls so that it needs no stack frame and leaves by a
    // tail call, and trylock first.
    let addr = m as usize;
    if let Some(t) = current_fast() {
        // SAFETY: `m` is the mutex the caller is locking, live for the call (as
        // `pthread_mutex_lock` requires of its caller).
        let kind = unsafe { glibc_mutex::kind(addr) };
        if kind & NO_TRYLOCK_FIRST == 0 {
            if !(real::single_threaded()
                && kind & mutex_kind::PSHARED == 0
                // SAFETY: as above, `m` is the caller's live mutex.
                && unsafe { glibc_mutex::lock_word(addr) } == 0)
            {
                // SAFETY: forwarding the caller's arguments.
                return unsafe { lock_trying(m, entry_sp, t) };
            }
            if engage::acquired_quick(t, addr) {
                // SAFETY: forwarding.
                return unsafe { resolved(&real::slot::pthread_mutex_lock)(m) };
            }
        }
    } else if passes_through() {
        // SAFETY: forwarding.
        return unsafe { real::pthread_mutex_lock(m) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { lock_tracked(m, entry_sp) }
}

/// `extern "C"` like its caller, so that the call is a tail call.
#[inline(never)]
unsafe extern "C" fn lock_tracked(m: *mut pthread_mutex_t, entry_sp: usize) -> c_int {
    let Some(t) = current() else {
        // SAFETY: forwarding.
        return unsafe { real::pthread_mutex_lock(m) };
    };
    // SAFETY: `m` is the mutex the caller is locking, live for the call (as
    // `pthread_mutex_lock` requires of its caller).
    let kind = unsafe { glibc_mutex::kind(m as usize) };
    if kind & NO_TRYLOCK_FIRST != 0 {
        // SAFETY: forwarding the caller's mutex.
        return unsafe { without_trylock(t, m, true, || real::pthread_mutex_lock(m)) };
    }
    // A free private mutex in a single-threaded process cannot be taken by anyone else, so the
    // real lock cannot wait: account for the acquisition first and leave by a tail call into
    // glibc (which then locks without an atomic instruction), so the wrapper costs almost nothing.
    if real::single_threaded()
        && kind & mutex_kind::PSHARED == 0
        // SAFETY: as above, `m` is the caller's live mutex.
        && unsafe { glibc_mutex::lock_word(m as usize) } == 0
    {
        // SAFETY: `m` is the caller's live mutex, which the real lock below takes at once;
        // `subtype` reads it as a mutex.
        unsafe { engage::acquired(t, m as usize, KIND, subtype) };
        // SAFETY: forwarding.
        return unsafe { real::pthread_mutex_lock(m) };
    }
    // SAFETY: forwarding the caller's arguments.
    unsafe { lock_trying(m, entry_sp, t) }
}

/// Lock by trylock first, which tells whether the caller would wait.
#[inline(never)]
unsafe extern "C" fn lock_trying(m: *mut pthread_mutex_t, entry_sp: usize, t: &ThreadRec) -> c_int {
    // A held mutex (other than a recursive one, which its owner may take again) would fail the
    // trylock: reading its lock word first spares the failed compare-and-swap, which would take
    // the mutex's cache line from the holder, whose unlock then has to take it back.
    if chained() {
        // SAFETY: forwarding the caller's mutex.
        return unsafe { without_trylock(t, m, true, || real::pthread_mutex_lock(m)) };
    }
    let addr = m as usize;
    // SAFETY: `m` is the mutex the caller is locking, live for the call (as
    // `pthread_mutex_lock` requires of its caller).
    if unsafe { glibc_mutex::lock_word(addr) } != 0
        // SAFETY: as above.
        && unsafe { glibc_mutex::kind(addr) } & mutex_kind::TYPE_MASK != mutex_kind::RECURSIVE
    {
        // SAFETY: `m` is the caller's mutex; `pthread_mutex_lock` has not returned.
        return unsafe { lock_busy(t, m, EBUSY, entry_sp) };
    }
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_mutex_trylock(m) };
    if r == 0 {
        if !engage::acquired_quick_contended(t, m as usize) {
            // SAFETY: `m` is the caller's live mutex, which this thread now holds; `subtype`
            // reads it as a mutex.
            unsafe { engage::acquired(t, m as usize, KIND, subtype) };
        }
        return 0;
    }
    // SAFETY: `m` is the caller's mutex; `pthread_mutex_lock` has not returned.
    unsafe { lock_busy(t, m, r, entry_sp) }
}

/// Out of line, so the uncontended path saves no registers for it.
#[cold]
#[inline(never)]
unsafe fn lock_busy(t: &ThreadRec, m: *mut pthread_mutex_t, r: c_int, entry_sp: usize) -> c_int {
    if r != EBUSY {
        // SAFETY: `m` is the caller's mutex, live while `pthread_mutex_lock` has not returned.
        return unsafe { acquired_or_failed(t, m, r) };
    }
    // SAFETY: as below.
    if unsafe { took_after_backoff(t, m, entry_sp) } {
        return 0;
    }
    // SAFETY: `m` is the caller's mutex; `entry_sp` that of `pthread_mutex_lock`, not returned.
    unsafe { contended(t, m, None, CallSite::at_entry(entry_sp)) }
}

/// Stays off the busy mutex's cache line for a moment, then tries once more; true if `t` now
/// holds the mutex (the brief-wait rule: [`owned::after_back_off`]).
///
/// # Safety
/// `m` is the caller's mutex; `entry_sp` that of a `pthread_mutex_lock` that has not returned.
#[inline(never)]
unsafe fn took_after_backoff(t: &ThreadRec, m: *mut pthread_mutex_t, entry_sp: usize) -> bool {
    let addr = m as usize;
    // Its own mutex (a relock) does not come free.
    // SAFETY: `m` is the caller's mutex, live per this function's contract.
    if unsafe { glibc_mutex::owner(addr) } == t.tid() {
        return false;
    }
    // SAFETY: per this function's contract.
    let site = unsafe { CallSite::at_entry(entry_sp) };
    // SAFETY: `m` is the caller's live mutex: its lock word is read, then it is forwarded to the
    // real trylock.
    unsafe {
        owned::after_back_off(t, &lock(m), site, || {
            glibc_mutex::lock_word(addr) == 0 && real::pthread_mutex_trylock(m) == 0
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_mutex_trylock(m) };
    if let Some(t) = current() {
        // SAFETY: `m` is the caller's mutex, live for the call.
        unsafe { owned::tried(t, &lock(m), r) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut pthread_mutex_t,
    ts: *const timespec,
) -> c_int {
    // SAFETY: forwarding / the caller's mutex and deadline.
    unsafe {
        timed(m, libc::CLOCK_REALTIME, ts, |m, ts| {
            real::pthread_mutex_timedlock(m, ts)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut pthread_mutex_t,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if clk != libc::CLOCK_REALTIME && clk != libc::CLOCK_MONOTONIC {
        // glibc rejects other clocks with EINVAL even on a free mutex.
        // SAFETY: forwarding.
        return unsafe { real::pthread_mutex_clocklock(m, clk, ts) };
    }
    // SAFETY: as above.
    unsafe {
        timed(m, clk, ts, |m, ts| {
            real::pthread_mutex_clocklock(m, clk, ts)
        })
    }
}

/// Shared by timedlock and clocklock; `pass` is the real function on the caller's clock.
unsafe fn timed(
    m: *mut pthread_mutex_t,
    clk: clockid_t,
    ts: *const timespec,
    pass: impl Fn(*mut pthread_mutex_t, *const timespec) -> c_int,
) -> c_int {
    let t = match current() {
        Some(t)
            // SAFETY: `m` is the mutex the caller is locking, live for the call (as the timed
            // lock functions require of their caller).
            if unsafe { glibc_mutex::kind(m as usize) } & NO_TRYLOCK_FIRST != 0 || chained() =>
        {
            // SAFETY: forwarding the caller's mutex and deadline.
            return unsafe { without_trylock(t, m, false, || pass(m, ts)) };
        }
        // An invalid deadline is only checked by glibc when it has to wait: let it decide.
        Some(t) if valid(ts) => t,
        other => {
            let r = pass(m, ts);
            if let Some(t) = other {
                match r {
                    // SAFETY: `m` is the caller's live mutex, which this thread now holds;
                    // `subtype` reads it as a mutex.
                    0 => unsafe { engage::acquired(t, m as usize, KIND, subtype) },
                    ETIMEDOUT | EBUSY => {}
                    // EINVAL for the deadline, EOWNERDEAD (acquired), ...
                    _ => {
                        // SAFETY: `m` is the caller's mutex, live for the call.
                        unsafe { acquired_or_failed(t, m, r) };
                    }
                }
            }
            return r;
        }
    };
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_mutex_trylock(m) };
    if r == 0 {
        // SAFETY: `m` is the caller's live mutex, which this thread now holds; `subtype` reads it
        // as a mutex.
        unsafe { engage::acquired(t, m as usize, KIND, subtype) };
        return 0;
    }
    if r != EBUSY {
        // SAFETY: `m` is the caller's mutex, live for the call.
        return unsafe { acquired_or_failed(t, m, r) };
    }
    // SAFETY: valid deadline checked above.
    unsafe { contended(t, m, Some((clk, *ts)), CallSite::default()) }
}

/// # Safety
/// `m` is the caller's mutex: live.
#[cold]
#[inline(never)]
unsafe fn acquired_or_failed(t: &ThreadRec, m: *mut pthread_mutex_t, r: c_int) -> c_int {
    // SAFETY: as the caller promises.
    unsafe { owned::answered(t, &lock(m), r) };
    r
}

/// Robust, priority-inheriting and priority-protecting mutexes, and every mutex when another
/// interposer follows this one ([`CHAINED`]): one call to the real function, judged contended
/// when the mutex had an owner just before. A wait-for cycle is confirmed by a
/// second walk a few milliseconds later, since the wait cannot be sliced.
#[cold]
#[inline(never)]
unsafe fn without_trylock(
    t: &ThreadRec,
    m: *mut pthread_mutex_t,
    untimed: bool,
    call: impl Fn() -> c_int,
) -> c_int {
    // SAFETY: `m` is the caller's mutex, live for the call.
    unsafe {
        let busy = glibc_mutex::owner(m as usize) != 0;
        owned::wait_in_one_call(t, &lock(m), busy, untimed, call)
    }
}

/// The mutex is busy: wait for it, tracked.
unsafe fn contended(
    t: &ThreadRec,
    m: *mut pthread_mutex_t,
    deadline: Option<(clockid_t, timespec)>,
    site: CallSite,
) -> c_int {
    let addr = m as usize;
    let real_wait = |until: Option<(clockid_t, timespec)>| -> c_int {
        // SAFETY: forwarding the caller's mutex with a valid absolute time.
        unsafe {
            match until {
                None => real::pthread_mutex_lock(m),
                Some((libc::CLOCK_REALTIME, ts)) => real::pthread_mutex_timedlock(m, &ts),
                Some((clk, ts)) => real::pthread_mutex_clocklock(m, clk, &ts),
            }
        }
    };
    // SAFETY: `m` is the caller's mutex, live for the call.
    if unsafe {
        glibc_mutex::owner(addr) == t.tid()
            && subtype(addr) & mutex_kind::TYPE_MASK == mutex_kind::ERRORCHECK
    } {
        // Relocking an error-checking mutex: glibc answers EDEADLK at once, nobody waits.
        let r = real_wait(deadline);
        if r != 0 {
            // SAFETY: as above.
            unsafe { owned::answered(t, &lock(m), r) };
        }
        return r;
    }
    // Always sliced, even when no cycle is suspected: besides letting the wait look for cycles,
    // glibc's timed lock behaves better than its plain lock under heavy contention here (4
    // threads hammering one mutex: 450 k contended waits and 0.83 s with timed slices, against
    // 2.2 M waits and 1.5 s with the plain lock; native 0.6 s).
    //
    // Without a deadline of the caller's, the slices run on the monotonic clock when glibc has
    // clocklock (2.30+), from the wait's own start time: no clock read for the first one.
    let monotonic = real::slot::pthread_mutex_clocklock.available();
    // SAFETY: the caller's mutex, live for the call, which this thread does not hold.
    unsafe { owned::wait(t, &lock(m), deadline, site, monotonic, real_wait) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int {
    if delayed::armed() {
        // SAFETY: the mutex being unlocked.
        unsafe { delayed::before_release(m as usize, KIND) };
    }
    match current_fast() {
        Some(t) if engage::releasing_quick(t, m as usize) => {
            // SAFETY: forwarding.
            unsafe { resolved(&real::slot::pthread_mutex_unlock)(m) }
        }
        // SAFETY: forwarding.
        None if passes_through() => unsafe { real::pthread_mutex_unlock(m) },
        // SAFETY: forwarding.
        _ => unsafe { unlock_tracked(m) },
    }
}

/// The unlock beyond [`engage::releasing_quick`], out of line (and left by tail calls) so that
/// the fast path needs no stack frame.
#[inline(never)]
unsafe extern "C" fn unlock_tracked(m: *mut pthread_mutex_t) -> c_int {
    if let Some(t) = current() {
        // SAFETY: the mutex being unlocked.
        unsafe { engage::releasing(t, m as usize) };
    }
    // SAFETY: forwarding.
    unsafe { real::pthread_mutex_unlock(m) }
}
