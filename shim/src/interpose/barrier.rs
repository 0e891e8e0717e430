//! `pthread_barrier_*`. Every call returns exactly what glibc returns, including which thread
//! gets `PTHREAD_BARRIER_SERIAL_THREAD`.
//!
//! What an arrival means for the tracker, and how the shim tells a round's last arrival, is in
//! `track::barrier`.

use libc::{c_int, c_uint, pthread_barrier_t, pthread_barrierattr_t};

use crate::track::barrier;
use crate::track::engage;

use crate::real::barrier as real;

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_init(
    b: *mut pthread_barrier_t,
    a: *const pthread_barrierattr_t,
    count: c_uint,
) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_barrier_init(b, a, count) };
    barrier::initialised(r, b as usize, count);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_destroy(b: *mut pthread_barrier_t) -> c_int {
    // SAFETY: forwarding the caller's arguments.
    let r = unsafe { real::pthread_barrier_destroy(b) };
    engage::destroyed(r, b as usize);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int {
    // SAFETY: the caller's barrier; forwarding.
    unsafe { barrier::wait(b as usize, move || real::pthread_barrier_wait(b)) }
}
