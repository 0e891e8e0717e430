//! `sem_*`: unnamed (`sem_init`) and named (`sem_open`) POSIX semaphores. Every call returns
//! exactly what glibc returns, with the same `errno`: these functions report errors through
//! `errno`, so the tracker's side of each call (`track::semaphore`) keeps the errno the real
//! call left, whatever its bookkeeping does (it may write the log or allocate).
//!
//! glibc exports each of these at two versions (`GLIBC_2.2.5` and `GLIBC_2.34`, `sem_clockwait`
//! at `GLIBC_2.30` and `GLIBC_2.34`) that are the same code at the same address: 2.34 only
//! recorded their move from libpthread into libc. So unlike the condition variables there is
//! nothing to choose between, and the default version (`dlsym`) is forwarded to for every caller.
//!
//! What a wait, a post and a semaphore's life mean for the tracker is in `track::semaphore`;
//! these wrappers hand it the real functions, and sem_post's common case leaves by a tail call.

use libc::{c_char, c_int, c_uint, clockid_t, mode_t, sem_t, timespec};

use crate::track::semaphore;

/// The C library's functions, in their own module: the wrappers below have the same names.
use crate::real::sem as glibc;

/// `sem_open` is variadic, which the table's macro cannot declare.
use crate::real::sem::SEM_OPEN;

fn valid(ts: *const timespec) -> bool {
    // SAFETY: a non-null pointer from the caller of a timed wait points to a timespec.
    !ts.is_null() && unsafe { (*ts).tv_nsec >= 0 && (*ts).tv_nsec < 1_000_000_000 }
}

#[no_mangle]
pub unsafe extern "C" fn sem_init(s: *mut sem_t, pshared: c_int, value: c_uint) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { glibc::sem_init(s, pshared, value) };
    if r == 0 {
        semaphore::initialised(s as usize);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn sem_destroy(s: *mut sem_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { glibc::sem_destroy(s) };
    if r == 0 {
        semaphore::destroyed(s as usize);
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
    // SAFETY: glibc accepted the name, so it is a NUL-terminated string.
    semaphore::opened(s as usize, unsafe { std::ffi::CStr::from_ptr(name) });
    s
}

#[no_mangle]
pub unsafe extern "C" fn sem_close(s: *mut sem_t) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { glibc::sem_close(s) };
    if r == 0 {
        semaphore::closed(s as usize);
    }
    r
}

/// Removes the name only: processes that have the semaphore open keep using it.
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
    semaphore::tried(s as usize, r);
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
    // SAFETY: `entry_sp` is that of a `sem_wait` that has not returned; forwarding.
    unsafe {
        semaphore::wait(
            s as usize,
            entry_sp,
            true,
            move || glibc::sem_trywait(s),
            move || glibc::sem_wait(s),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(s: *mut sem_t, ts: *const timespec) -> c_int {
    if !valid(ts) {
        // glibc answers EINVAL before looking at the semaphore (and a null deadline crashes it,
        // as it would without the shim): trying it first would take a unit it does not take.
        // SAFETY: forwarding.
        return unsafe { glibc::sem_timedwait(s, ts) };
    }
    // SAFETY: no entry stack pointer; forwarding the caller's semaphore and valid deadline.
    unsafe {
        semaphore::wait(
            s as usize,
            0,
            false,
            move || glibc::sem_trywait(s),
            move || glibc::sem_timedwait(s, ts),
        )
    }
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
    // SAFETY: as in sem_timedwait.
    unsafe {
        semaphore::wait(
            s as usize,
            0,
            false,
            move || glibc::sem_trywait(s),
            move || glibc::sem_clockwait(s, clk, ts),
        )
    }
}

type PostFn = unsafe extern "C" fn(*mut sem_t) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn sem_post(s: *mut sem_t) -> c_int {
    // The common case, without a stack frame: the post is counted first and glibc's sem_post
    // is reached by a tail call.
    let f = glibc::slot::sem_post.resolved();
    // SAFETY: the caller's semaphore, being posted.
    if f > 1 && unsafe { semaphore::post_quick(s as usize) } {
        // SAFETY: glibc's sem_post, whose signature is `PostFn`; forwarding.
        return unsafe { std::mem::transmute::<usize, PostFn>(f)(s) };
    }
    // SAFETY: forwarding the caller's semaphore.
    unsafe { post_tracked(s) }
}

#[inline(never)]
unsafe extern "C" fn post_tracked(s: *mut sem_t) -> c_int {
    // SAFETY: forwarding.
    semaphore::post(s as usize, move || unsafe { glibc::sem_post(s) })
}
