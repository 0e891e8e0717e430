//! Thread creation, joining, exit and naming.

use std::sync::atomic::Ordering;

use libc::{c_char, c_int, c_void, pthread_attr_t, pthread_t};
use waitshim_format::ThreadName;

use crate::clock::now_ns;
use crate::real;
use crate::track::threads::{current, Inside};
use crate::track::{self, tracker, Birth};

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
    if let Some(tr) = tracker() {
        let _in = Inside::enter();
        track::register_thread(
            tr,
            Some(Birth {
                parent: s.parent,
                routine: s.routine as usize as u64,
                chain: s.chain,
                created_ns: s.created_ns,
            }),
        );
    }
    (s.routine)(s.arg)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    th: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let (Some(t), Some(tr)) = (current(), tracker()) else {
        // SAFETY: forwarding.
        return unsafe { real::pthread_create(th, attr, routine, arg) };
    };
    let start = {
        let _in = Inside::enter();
        Box::into_raw(Box::new(Start {
            routine,
            arg,
            parent: t.tid(),
            chain: tr.chain(t),
            created_ns: now_ns(),
        }))
    };
    // SAFETY: forwarding, with our trampoline and its argument in place of the caller's.
    let r = unsafe { real::pthread_create(th, attr, trampoline, start as *mut c_void) };
    if r != 0 {
        let _in = Inside::enter();
        // SAFETY: the thread was not created, so the Box is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_join(th: pthread_t, ret: *mut *mut c_void) -> c_int {
    // A joining thread is not ready to run: it counts as blocked for the highwater rule.
    let tr = current().and(tracker());
    if let Some(tr) = tr {
        tr.blocked.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: forwarding.
    let r = unsafe { real::pthread_join(th, ret) };
    if let Some(tr) = tr {
        tr.blocked.fetch_sub(1, Ordering::Relaxed);
    }
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
        if let (Some(t), Some(tr)) = (current(), tracker()) {
            let _in = Inside::enter();
            let target = if th as usize == t.pthread.load(Ordering::Relaxed) {
                Some(t)
            } else {
                tr.threads
                    .iter()
                    .find(|e| e.value().0.pthread.load(Ordering::Relaxed) == th as usize)
                    .map(|e| e.value().0)
            };
            if let Some(target) = target {
                let tid = target.tid();
                target.named.store(true, Ordering::Relaxed);
                // SAFETY: glibc accepted it, so it is a NUL-terminated string.
                let name = unsafe { std::ffi::CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned();
                tr.log.write(
                    &ThreadName {
                        tid,
                        ns: now_ns(),
                        name,
                    }
                    .into(),
                );
            }
        }
    }
    r
}
