//! Thread creation, joining, exit and naming. What they mean for the tracker (which threads
//! are alive by `pthread_t`, the thread object a join waits on) is in `track::joins` and the
//! thread registry.

use libc::{c_char, c_int, c_void, clockid_t, pthread_attr_t, pthread_t, timespec};

use crate::real;
use crate::track::{self, joins, Birth};

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

/// What the new thread needs to register itself before running the program's start routine.
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    parent: u32,
    chain: u32,
    created_ns: u64,
}

extern "C" fn trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: `p` is the Box leaked by pthread_create below, handed to exactly this thread.
    let s = unsafe { Box::from_raw(p as *mut Start) };
    track::thread_started(Birth {
        parent: s.parent,
        routine: s.routine as usize as u64,
        chain: s.chain,
        created_ns: s.created_ns,
    });
    (s.routine)(s.arg)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    th: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let Some((parent, chain, created_ns)) = track::creating() else {
        // SAFETY: forwarding.
        return unsafe { real::pthread_create(th, attr, routine, arg) };
    };
    let start = Box::into_raw(Box::new(Start {
        routine,
        arg,
        parent,
        chain,
        created_ns,
    }));
    // SAFETY: forwarding, with our trampoline and its argument in place of the caller's.
    let mut r = unsafe { real::pthread_create(th, attr, trampoline, start as *mut c_void) };
    if r == libc::EAGAIN && crate::service::step_back_for_tasks() {
        // SAFETY: as above: the task the shim's thread held is free again.
        r = unsafe { real::pthread_create(th, attr, trampoline, start as *mut c_void) };
    }
    if r != 0 {
        // SAFETY: the thread was not created, so the Box is still ours.
        drop(unsafe { Box::from_raw(start) });
        return r;
    }
    // A detached thread may already have ended and its descriptor been unmapped: not read.
    let mut detached = 0;
    // SAFETY: reading the caller's attributes, which pthread_create just accepted.
    let detached = !attr.is_null()
        && unsafe { attr_getdetachstate(attr, &mut detached) } == 0
        && detached == libc::PTHREAD_CREATE_DETACHED;
    // SAFETY: glibc stored the new thread's id through the caller's pointer; unless detached,
    // it is a descriptor not joined yet (this call has not returned).
    unsafe { joins::created(*th, detached, chain) };
    crate::service::ensure_started();
    r
}

extern "C" {
    #[link_name = "pthread_attr_getdetachstate"]
    fn attr_getdetachstate(attr: *const pthread_attr_t, state: *mut c_int) -> c_int;
}

/// `sched_yield`: counted for the calling thread and its call site (exact, written as
/// `ThreadYields`), then the real call, whose result it returns. The shim's own yields go to
/// the real function directly. The trampoline hands `yield_from` the return address into the
/// caller (the call site), then jumps to it.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn sched_yield() -> c_int {
    std::arch::naked_asm!("mov rdi, qword ptr [rsp]", "jmp {}", sym yield_from)
}

unsafe extern "C" fn yield_from(ret: usize) -> c_int {
    if let Some(t) = track::threads::current() {
        t.count_yield(ret);
    }
    // SAFETY: no arguments; forwarding.
    unsafe { real::sched_yield() }
}

use crate::real::join as real_join;

#[no_mangle]
pub unsafe extern "C" fn pthread_join(th: pthread_t, ret: *mut *mut c_void) -> c_int {
    // SAFETY: forwarding.
    joins::join(th, true, || unsafe { real::pthread_join(th, ret) })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_timedjoin_np(
    th: pthread_t,
    ret: *mut *mut c_void,
    ts: *const timespec,
) -> c_int {
    // SAFETY: forwarding.
    joins::join(th, false, || unsafe {
        real_join::pthread_timedjoin_np(th, ret, ts)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_clockjoin_np(
    th: pthread_t,
    ret: *mut *mut c_void,
    clk: clockid_t,
    ts: *const timespec,
) -> c_int {
    if clk != libc::CLOCK_REALTIME && clk != libc::CLOCK_MONOTONIC {
        // glibc rejects other clocks with EINVAL before looking at the thread.
        // SAFETY: forwarding.
        return unsafe { real_join::pthread_clockjoin_np(th, ret, clk, ts) };
    }
    // SAFETY: forwarding.
    joins::join(th, false, || unsafe {
        real_join::pthread_clockjoin_np(th, ret, clk, ts)
    })
}

#[no_mangle]
pub unsafe extern "C" fn pthread_tryjoin_np(th: pthread_t, ret: *mut *mut c_void) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real_join::pthread_tryjoin_np(th, ret) };
    joins::tried(th, r);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_exit(ret: *mut c_void) -> ! {
    track::thread_exited();
    // SAFETY: calling glibc's pthread_exit with the caller's value.
    unsafe { real::call_noreturn(&real::PTHREAD_EXIT, ret) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_setname_np(th: pthread_t, name: *const c_char) -> c_int {
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_setname_np(th, name) };
    if r == 0 && !name.is_null() {
        // SAFETY: glibc accepted it, so it is a NUL-terminated string.
        track::thread_named(th, unsafe { std::ffi::CStr::from_ptr(name) });
    }
    r
}
